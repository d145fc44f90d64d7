package rules

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// The account's writer (rules:label-write) sends the label changes that
// reclassify batches record in the store's label writes to Gmail, grouped
// by label and direction into messages.batchModify calls of up to 1,000
// ids: a call costs 50 quota units whatever its number of ids, so a
// reclassify pays per 1,000 changed messages of a label instead of per
// batch of 50 threads.
//
// It is a durable task, one per account at a time (its outbox key): a batch
// records its changes and (re)schedules the writer in its own transaction,
// and the writer, before it acknowledges its task, looks in the same
// transaction for changes it has not sent and schedules itself again for
// them. So a change recorded is never left without a writer, and a kill at
// any point loses none: what the writer sent but had not yet recorded as
// sent is sent again, with the same effect (batchModify sets labels).

// writerRunLimit bounds one writer task's run: a long reclassify keeps its
// writer busy, and the task's timeout must never cut it short.
const writerRunLimit = time.Minute

// writePayload is the payload of a rules:label-write task.
type writePayload struct {
	AccountID string `json:"accountId"`
}

func writerKey(accountID string) string { return TypeLabelWrite + ":" + accountID }

// HandleLabelWrite is the handler of rules:label-write: it sends the
// account's label changes that are due (a group of 1,000 ids of one label
// and direction, or any change older than WriteDelay, or any change of a
// job whose every batch has run), records each call's changes as made, and
// schedules itself again for the changes that wait.
func (p *Pipeline) HandleLabelWrite(ctx context.Context, t *queue.Task) error {
	ctx = google.WithPriority(ctx, google.PriorityReclassify)
	var pl writePayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return queue.Permanent(fmt.Errorf("rules: decode label write payload: %w", err))
	}
	unlock, err := p.writers.lock(ctx, pl.AccountID)
	if err != nil {
		return err
	}
	defer unlock()
	w := &writer{p: p, account: pl.AccountID}
	deadline := time.Now().Add(writerRunLimit)
	for {
		sent, err := w.once(ctx)
		if err != nil {
			return err
		}
		if !sent || time.Now().After(deadline) {
			break
		}
	}
	// The task's end and the next run's schedule commit together, after the
	// batches' commits that came first: a change recorded meanwhile found
	// this task's record and did not schedule one of its own.
	return p.db.Update(func(tx *store.Tx) error {
		if err := t.Ack(tx); err != nil {
			return err
		}
		flush, err := tx.LabelFlushTake(pl.AccountID)
		if err != nil || !tx.LabelWritesAny(pl.AccountID) {
			return err
		}
		now := p.cfg.Now()
		at := w.next
		if tx.LabelWriteSeq() != w.seq {
			// Changes recorded since the last look are due by then at
			// the latest.
			if soon := now.Add(p.cfg.WriteDelay); at.IsZero() || soon.Before(at) {
				at = soon
			}
		}
		if flush {
			at = now
		}
		_, _, err = p.queue.Enqueue(tx, TypeLabelWrite, pl, queue.Key(writerKey(pl.AccountID)), queue.RunAt(at))
		return err
	})
}

// lockAll locks every key, in order (so that two callers never wait for
// each other), and returns what unlocks them all.
func (l *keyedLocks) lockAll(ctx context.Context, keys []string) (unlock func(), err error) {
	var unlocks []func()
	unlockAll := func() {
		for _, u := range slices.Backward(unlocks) {
			u()
		}
	}
	for _, k := range slices.Compact(slices.Sorted(slices.Values(keys))) {
		u, err := l.lock(ctx, k)
		if err != nil {
			unlockAll()
			return nil, err
		}
		unlocks = append(unlocks, u)
	}
	return unlockAll, nil
}

// lockLabels holds the account's labels for a direct change (new mail's,
// a settle's): no other write of them is in flight until unlock.
//
// New mail's labels, a settle's and the writer's go to Gmail by different
// calls (messages.modify, a settle's batchModify, the writer's
// batchModify), and Gmail takes calls in flight together in any order: one
// made while another of the same label was out could land first and be
// undone by the older one (the label property test saw a reclassify's add
// land after a settle's removal and stay, as nobody's). So each holds the
// lock of every label it changes while its call is out; the writer's call,
// which may wait long for quota, takes it only once its units are granted
// (google.WithWriteGate, writer.gate) and then checks that no newer change
// replaced its own meanwhile. Runs in several processes (an external
// Redis) are not ordered by it, like the writer's lock and the reclassify
// gate.
func (p *Pipeline) lockLabels(ctx context.Context, accountID string, labels ...[]string) (unlock func(), err error) {
	var keys []string
	for _, ls := range labels {
		for _, l := range ls {
			keys = append(keys, labelLockKey(accountID, l))
		}
	}
	return p.writeLocks.lockAll(ctx, keys)
}

func labelLockKey(accountID, labelID string) string { return accountID + "\x00" + labelID }

// errSuperseded ends a writer's call before it goes out: a change of the
// call was replaced while it waited (by a direct change redirected into it,
// or by a newer plan). Nothing was sent; the writer looks again.
var errSuperseded = errors.New("rules: a label change of the call was replaced while it waited")

// gate is the write gate of chunk c's call (see writeLocks): the label's
// lock, and the check that each of the call's changes is still the one
// waiting.
func (w *writer) gate(c *writeChunk) google.WriteGate {
	return func(ctx context.Context) (func(), error) {
		unlock, err := w.p.writeLocks.lock(ctx, labelLockKey(w.account, c.label))
		if err != nil {
			return nil, err
		}
		current := true
		err = w.p.db.View(func(tx *store.Tx) error {
			for _, lw := range c.writes {
				cur, err := tx.LabelWriteGet(w.account, lw.LabelID, lw.MessageID)
				if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				if err != nil || cur.Seq != lw.Seq {
					current = false
					return nil
				}
			}
			return nil
		})
		if err == nil && !current {
			err = errSuperseded
		}
		if err != nil {
			unlock()
			return nil, err
		}
		return unlock, nil
	}
}

// scheduleWriterTx makes sure the account's writer runs by at, in the
// caller's transaction: a writer task that is there already is brought
// forward to at when it was due later.
func (p *Pipeline) scheduleWriterTx(tx *store.Tx, accountID string, at time.Time) error {
	if !at.After(p.cfg.Now()) {
		// A writer that is running now reads this when it ends.
		if err := tx.LabelFlushWant(accountID); err != nil {
			return err
		}
	}
	_, _, err := p.queue.Enqueue(tx, TypeLabelWrite, writePayload{AccountID: accountID},
		queue.Key(writerKey(accountID)), queue.RunAt(at), queue.BringForward())
	return err
}

// flushJobTx sends the job's waiting changes at once, in the caller's
// transaction, when every batch of the job that still waits has run and
// waits only for the account writers (they would otherwise wait for
// WriteDelay): the writers of every account with a writing batch of the
// job are made due now. Each path that moves a batch of a job out of
// waiting calls it: a batch that ran with something to write or nothing,
// one dropped as stale, one that failed may be the last the others waited
// for.
func (p *Pipeline) flushJobTx(tx *store.Tx, job store.ReclassifyJob) error {
	if job.BatchesWriting == 0 || job.Waiting() > job.BatchesWriting {
		return nil
	}
	accounts := map[string]bool{}
	err := tx.ReclassifyBatches(job.ID, func(b store.ReclassifyBatch) (bool, error) {
		if b.State == store.BatchWriting {
			accounts[b.AccountID] = true
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, a := range slices.Sorted(maps.Keys(accounts)) {
		if err := p.scheduleWriterTx(tx, a, p.cfg.Now()); err != nil {
			return err
		}
	}
	return nil
}

func groupKey(lw store.LabelWrite) string {
	if lw.Add {
		return "+" + lw.LabelID
	}
	return "-" + lw.LabelID
}

// jobsPlanned answers, once per job, whether every batch of a job has run
// (all that wait are writing): its changes then go at once.
type jobsPlanned struct {
	tx   *store.Tx
	seen map[string]bool
}

func (j *jobsPlanned) all(jobID string) bool {
	if done, ok := j.seen[jobID]; ok {
		return done
	}
	if j.seen == nil {
		j.seen = map[string]bool{}
	}
	job, err := j.tx.ReclassifyJobGet(jobID)
	// A job that is gone has nothing left to wait for.
	done := err != nil || job.Waiting() <= job.BatchesWriting
	j.seen[jobID] = done
	return done
}

// writer is one run of an account's writer task.
type writer struct {
	p       *Pipeline
	account string
	gm      Gmail
	// next and seq are what the last look at the changes saw: when the
	// earliest of those left is due, and the label writes' sequence then.
	next time.Time
	seq  uint64
}

// writeChunk is one batchModify call: up to 1,000 changes of one label in
// one direction.
type writeChunk struct {
	label  string
	add    bool
	writes []store.LabelWrite
	err    error
}

// once sends the changes that are due, each group in calls of up to 1,000
// ids, after one users.getProfile whose history id stamps them all, and
// records what reached Gmail. sent reports whether there was anything to
// send (the caller looks again).
func (w *writer) once(ctx context.Context) (sent bool, err error) {
	chunks, err := w.due()
	if err != nil || len(chunks) == 0 {
		return false, err
	}
	if w.gm == nil {
		if w.gm, err = w.p.gmail(ctx, w.account); err != nil {
			return false, err
		}
	}
	// The mirror may take older changes of a label after ours: any change
	// it takes with a history id up to this one is older (see stampHistory).
	w.p.metrics.gmailCalls.WithLabelValues("getProfile").Inc()
	_, hid, err := w.gm.Profile(ctx)
	if err != nil {
		return false, err
	}
	chunks = w.sendSplitting(ctx, chunks)
	if err := w.record(chunks, hid); err != nil {
		return false, err
	}
	var failed error
	var invalid []*writeChunk
	for _, c := range chunks {
		switch {
		case c.err == nil:
		case errors.Is(c.err, errSuperseded):
			// Not sent: the next round sends what replaced it.
		case errors.Is(c.err, google.ErrInvalidLabel):
			invalid = append(invalid, c)
		case errors.Is(c.err, google.ErrNotFound):
			// A message of the call was deleted in Gmail: its change is
			// dropped once the mirror knows, and the rest go again.
			if err := w.dropGone(c); err != nil {
				return false, errors.Join(c.err, err)
			}
			failed = cmp.Or(failed, c.err)
		case queue.IsPermanent(c.err):
			w.p.log.Warn("label changes refused by Gmail for good", "account_id", w.account,
				"label_id", c.label, "messages", len(c.writes), "err", c.err)
			if err := w.giveUp(c); err != nil {
				return false, err
			}
		default:
			failed = cmp.Or(failed, c.err)
		}
	}
	if len(invalid) > 0 {
		if err := w.relabel(ctx, invalid); err != nil {
			return false, err
		}
	}
	if failed != nil {
		// Retried with backoff; what went through is recorded.
		return false, failed
	}
	return true, nil
}

// due reads the account's waiting changes and returns the calls to make:
// every full 1,000 of a group, and the rest of a group that is due.
func (w *writer) due() ([]*writeChunk, error) {
	now := w.p.cfg.Now()
	groups := map[string]*writeChunk{}
	dueGroups := map[string]bool{}
	w.next = time.Time{}
	err := w.p.db.View(func(tx *store.Tx) error {
		w.seq = tx.LabelWriteSeq()
		planned := jobsPlanned{tx: tx}
		return tx.LabelWrites(w.account, func(lw store.LabelWrite) bool {
			k := groupKey(lw)
			g := groups[k]
			if g == nil {
				g = &writeChunk{label: lw.LabelID, add: lw.Add}
				groups[k] = g
			}
			g.writes = append(g.writes, lw)
			if !dueGroups[k] && (now.Sub(lw.At) >= w.p.cfg.WriteDelay || planned.all(lw.JobID)) {
				dueGroups[k] = true
			}
			if at := lw.At.Add(w.p.cfg.WriteDelay); w.next.IsZero() || at.Before(w.next) {
				w.next = at
			}
			return true
		})
	})
	if err != nil {
		return nil, err
	}
	var chunks []*writeChunk
	for _, k := range slices.Sorted(maps.Keys(groups)) {
		g := groups[k]
		slices.SortFunc(g.writes, func(a, b store.LabelWrite) int { return cmp.Compare(a.Seq, b.Seq) })
		n := len(g.writes)
		if !dueGroups[k] {
			n -= n % google.MaxBatchModify
		}
		for part := range slices.Chunk(g.writes[:n], google.MaxBatchModify) {
			chunks = append(chunks, &writeChunk{label: g.label, add: g.add, writes: part})
		}
	}
	return chunks, nil
}

// sendSplitting sends the chunks; a call of several messages that Gmail
// refuses for good is made again in halves, so that the refusal of one
// message's change (a message Gmail will not change) costs only that
// change. It returns the chunks as finally sent.
func (w *writer) sendSplitting(ctx context.Context, chunks []*writeChunk) []*writeChunk {
	w.send(ctx, chunks)
	for {
		var halves, out []*writeChunk
		for _, c := range chunks {
			if len(c.writes) < 2 || !queue.IsPermanent(c.err) || errors.Is(c.err, google.ErrInvalidLabel) || errors.Is(c.err, google.ErrNotFound) {
				out = append(out, c)
				continue
			}
			mid := len(c.writes) / 2
			for _, part := range [][]store.LabelWrite{c.writes[:mid], c.writes[mid:]} {
				halves = append(halves, &writeChunk{label: c.label, add: c.add, writes: part})
			}
		}
		if len(halves) == 0 {
			return chunks
		}
		w.send(ctx, halves)
		chunks = append(out, halves...)
	}
}

// send makes the calls, GmailCalls at once; each chunk keeps its error.
func (w *writer) send(ctx context.Context, chunks []*writeChunk) {
	inParallel(w.p.cfg.GmailCalls, chunks, func(c *writeChunk) {
		ids := make([]string, len(c.writes))
		for i, lw := range c.writes {
			ids[i] = lw.MessageID
		}
		var add, remove []string
		if c.add {
			add = []string{c.label}
		} else {
			remove = []string{c.label}
		}
		w.p.metrics.gmailCalls.WithLabelValues("batchModify").Inc()
		c.err = w.gm.BatchModify(google.WithWriteGate(ctx, w.gate(c)), ids, add, remove)
	})
}

// inParallel calls fn with each item, at most n at once, and returns when
// every call has.
func inParallel[T any](n int, items []T, fn func(T)) {
	var wg sync.WaitGroup
	sema := make(chan struct{}, n)
	for _, it := range items {
		sema <- struct{}{}
		wg.Go(func() {
			defer func() { <-sema }()
			fn(it)
		})
	}
	wg.Wait()
}

// record writes down, in one transaction, the changes of the calls that
// succeeded: each leaves the label writes, its provenance record is
// confirmed (unless a newer plan replaced it meanwhile: that one goes
// later), and its batch, once none of its changes waits, is done in its
// job. The calls are counted in the job of each call's first change.
func (w *writer) record(chunks []*writeChunk, hid uint64) error {
	err := w.p.db.Update(func(tx *store.Tx) error {
		rel := newReleases(w.p)
		profileCounted := false
		for _, c := range chunks {
			if c.err != nil {
				continue
			}
			calls := 1
			if !profileCounted {
				calls, profileCounted = 2, true
			}
			rel.calls[c.writes[0].JobID] += calls
			for _, lw := range c.writes {
				cur, err := tx.LabelWriteGet(w.account, lw.LabelID, lw.MessageID)
				if errors.Is(err, store.ErrNotFound) || err == nil && cur.Seq != lw.Seq {
					continue
				}
				if err != nil {
					return err
				}
				if err := tx.LabelWriteDelete(w.account, lw.LabelID, lw.MessageID); err != nil {
					return err
				}
				pr, err := tx.LabelProvenanceGet(w.account, lw.MessageID, lw.LabelID)
				if err == nil && sameIntent(pr, lw.Prov) {
					pr.Pending = false
					pr.SeenHID = max(pr.SeenHID, hid)
					if err := tx.LabelProvenancePut(w.account, lw.MessageID, lw.LabelID, pr); err != nil {
						return err
					}
				} else if err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				rel.add(lw, "")
				if lw.JobID == "" {
					rel.settled(lw)
				}
			}
		}
		return rel.apply(tx)
	})
	if err != nil {
		return fmt.Errorf("rules: record the label changes of account %s: %w", w.account, err)
	}
	return nil
}

// sameIntent reports whether provenance record pr is still the pending one
// a label write carried.
func sameIntent(pr, want store.Provenance) bool {
	return pr.Pending && pr.RuleID == want.RuleID && pr.Version == want.Version && pr.JobID == want.JobID &&
		pr.Present == want.Present && pr.At.Equal(want.At)
}

// giveUp drops the changes of a call Gmail refused for good; their batches
// count as failed, and their provenance stays pending, so that the next
// reclassify of the rule sends them again.
func (w *writer) giveUp(c *writeChunk) error {
	reason := queue.Truncate(fmt.Sprintf("Gmail refused to change label %s: %v", c.label, c.err), 4000)
	return w.p.db.Update(func(tx *store.Tx) error {
		rel := newReleases(w.p)
		for _, lw := range c.writes {
			cur, err := tx.LabelWriteGet(w.account, lw.LabelID, lw.MessageID)
			if err != nil || cur.Seq != lw.Seq {
				continue
			}
			if err := tx.LabelWriteDelete(w.account, lw.LabelID, lw.MessageID); err != nil {
				return err
			}
			rel.add(lw, reason)
		}
		return rel.apply(tx)
	})
}

// dropGone drops the changes of a call's messages that the mirror no
// longer has (deleted in Gmail): there is nothing to label.
func (w *writer) dropGone(c *writeChunk) error {
	return w.p.db.Update(func(tx *store.Tx) error {
		rel := newReleases(w.p)
		for _, lw := range c.writes {
			if _, err := tx.MessageGet(w.account, lw.MessageID); !errors.Is(err, store.ErrNotFound) {
				continue
			}
			cur, err := tx.LabelWriteGet(w.account, lw.LabelID, lw.MessageID)
			if err != nil || cur.Seq != lw.Seq {
				continue
			}
			if err := dropWriteTx(tx, lw); err != nil {
				return err
			}
			rel.add(lw, "")
		}
		return rel.apply(tx)
	})
}

// dropWriteTx forgets a label write that will not be sent and its pending
// provenance record.
func dropWriteTx(tx *store.Tx, lw store.LabelWrite) error {
	if err := tx.LabelWriteDelete(lw.AccountID, lw.LabelID, lw.MessageID); err != nil {
		return err
	}
	pr, err := tx.LabelProvenanceGet(lw.AccountID, lw.MessageID, lw.LabelID)
	if err == nil && sameIntent(pr, lw.Prov) {
		return tx.LabelProvenanceDelete(lw.AccountID, lw.MessageID, lw.LabelID)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

// relabel handles calls Gmail refused for a label id it does not know (the
// label was deleted there since it was cached, and with it from every
// message): the account's labels are read again; removals of the label are
// done, and its additions move to the label made anew, to go in the next
// round. So do the labels the records say a rule's current version kept
// there: they went with the label, and the rule still wants them (the
// batch that met the deleted label takes them over). Other records of the
// label are forgotten.
func (w *writer) relabel(ctx context.Context, chunks []*writeChunk) error {
	known, err := w.p.refreshLabels(ctx, w.gm, w.account)
	if err != nil {
		return err
	}
	byLabel := map[string][]*writeChunk{}
	for _, c := range chunks {
		if known[c.label] {
			// Refused, yet Gmail lists it: not a label to make anew.
			if err := w.giveUp(c); err != nil {
				return err
			}
			continue
		}
		byLabel[c.label] = append(byLabel[c.label], c)
	}
	for _, label := range slices.Sorted(maps.Keys(byLabel)) {
		if err := w.relabelOne(ctx, label, byLabel[label]); err != nil {
			return err
		}
	}
	return nil
}

// keptLabel is a record of a label a rule's current version kept on a
// message.
type keptLabel struct {
	message string
	prov    store.Provenance
}

func (w *writer) relabelOne(ctx context.Context, label string, chunks []*writeChunk) error {
	name, owner := "", batchRef{}
	for _, c := range chunks {
		if c.add && name == "" {
			name = c.writes[0].LabelName
		}
		if owner.job == "" {
			owner = batchRef{c.writes[0].JobID, c.writes[0].Batch}
		}
	}
	kept, keptName, err := w.kept(label)
	if err != nil {
		return err
	}
	name = cmp.Or(name, keptName)
	newID := ""
	if name != "" {
		key := strings.ToLower(name)
		ids, _, err := w.p.labelIDs(ctx, w.gm, w.account, map[string]string{key: name}, map[string]bool{key: true})
		if err != nil {
			return err
		}
		newID = ids[key]
	}
	m := &labelMove{w: w, from: label, to: newID, name: name, owner: owner}
	return w.p.db.Update(func(tx *store.Tx) error {
		m.tx, m.rel = tx, newReleases(w.p)
		if err := m.writes(chunks); err != nil {
			return err
		}
		taken, err := m.keptLabels(kept)
		if err != nil {
			return err
		}
		if err := m.forgetRest(); err != nil {
			return err
		}
		if err := w.p.takeOverTx(tx, owner, taken); err != nil {
			return err
		}
		return m.rel.apply(tx)
	})
}

// kept returns the records of the labels that rules' current versions kept
// on messages under label id label, and the name of one such rule's label.
func (w *writer) kept(label string) (kept []keptLabel, name string, err error) {
	err = w.p.db.View(func(tx *store.Tx) error {
		rules := map[string]store.Rule{}
		return tx.LabelProvenanceOfLabel(w.account, label, func(msg string, pr store.Provenance) error {
			if pr.Pending || !pr.Present {
				return nil
			}
			r, ok := rules[pr.RuleID]
			if !ok {
				var err error
				if r, err = tx.RuleGet(pr.RuleID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
				rules[pr.RuleID] = r
			}
			if r.ID != "" && !r.Deleted && r.Version == pr.Version {
				kept = append(kept, keptLabel{msg, pr})
				name = cmp.Or(name, r.Label)
			}
			return nil
		})
	})
	return kept, name, err
}

// labelMove moves, in one transaction, what the records say of a label
// Gmail deleted (from) to the label made anew for it (to; "" when no rule
// wants it any more).
type labelMove struct {
	w        *writer
	tx       *store.Tx
	rel      *releases
	from, to string
	name     string
	owner    batchRef // the batch that takes over the kept labels
}

// put makes lw a pending write of the new label, unless a newer plan for
// the new label is there already.
func (m *labelMove) put(lw store.LabelWrite) error {
	if _, err := m.tx.LabelWriteGet(m.w.account, m.to, lw.MessageID); err == nil {
		m.rel.add(lw, "")
		return nil
	}
	lw.LabelID = m.to
	lw.Prov.Pending = true
	if err := m.tx.LabelProvenancePut(m.w.account, lw.MessageID, m.to, lw.Prov); err != nil {
		return err
	}
	_, _, err := m.tx.LabelWritePut(&lw)
	return err
}

// writes drops the refused calls' changes that still wait: removals are
// done (the label went from every message), additions move to the new
// label.
func (m *labelMove) writes(chunks []*writeChunk) error {
	for _, c := range chunks {
		for _, lw := range c.writes {
			cur, err := m.tx.LabelWriteGet(m.w.account, lw.LabelID, lw.MessageID)
			if err != nil || cur.Seq != lw.Seq {
				continue
			}
			if err := dropWriteTx(m.tx, lw); err != nil {
				return err
			}
			if !lw.Add || m.to == "" {
				m.rel.add(lw, "")
				continue
			}
			if err := m.put(lw); err != nil {
				return err
			}
		}
	}
	return nil
}

// keptLabels puts the labels the rules kept back, under the new label, and
// returns how many the owner batch takes over.
func (m *labelMove) keptLabels(kept []keptLabel) (taken int, err error) {
	now := m.w.p.cfg.Now().UTC()
	for _, k := range kept {
		if err := m.tx.LabelProvenanceDelete(m.w.account, k.message, m.from); err != nil {
			return taken, err
		}
		if m.to == "" {
			continue
		}
		if _, err := m.tx.LabelWriteGet(m.w.account, m.to, k.message); err == nil {
			continue
		}
		pr := k.prov
		pr.At = now
		lw := store.LabelWrite{AccountID: m.w.account, LabelID: m.to, MessageID: k.message, Add: true,
			LabelName: m.name, JobID: m.owner.job, Batch: m.owner.index, Prov: pr, At: now}
		if err := m.put(lw); err != nil {
			return taken, err
		}
		taken++
	}
	return taken, nil
}

// forgetRest forgets the rest of the old label's records that no write
// waits on: it is gone from every message.
func (m *labelMove) forgetRest() error {
	var gone []string
	err := m.tx.LabelProvenanceOfLabel(m.w.account, m.from, func(msg string, pr store.Provenance) error {
		if _, err := m.tx.LabelWriteGet(m.w.account, m.from, msg); errors.Is(err, store.ErrNotFound) {
			gone = append(gone, msg)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, msg := range gone {
		if err := m.tx.LabelProvenanceDelete(m.w.account, msg, m.from); err != nil {
			return err
		}
	}
	return nil
}

// takeOverTx adds n changes to a writing batch's (the labels it puts back
// after their label was deleted in Gmail).
func (p *Pipeline) takeOverTx(tx *store.Tx, ref batchRef, n int) error {
	if n == 0 {
		return nil
	}
	bt, err := tx.ReclassifyBatchGet(ref.job, ref.index)
	if errors.Is(err, store.ErrNotFound) || err == nil && bt.State != store.BatchWriting {
		return nil
	}
	if err != nil {
		return err
	}
	bt.Unsent += n
	bt.MessagesLabeled += n
	return tx.ReclassifyBatchPut(bt)
}

// releases gathers, within one transaction, the label writes that left the
// store (sent, dropped or replaced), by batch, to finish the batches none
// of whose changes wait any more.
type releases struct {
	p      *Pipeline
	counts map[batchRef]int
	failed map[batchRef]string // why a change of the batch was refused for good
	calls  map[string]int      // job id -> Gmail calls to count
	// settles counts the settles' changes sent, by direction (add: true).
	settles map[bool]int
}

type batchRef struct {
	job   string
	index int
}

func newReleases(p *Pipeline) *releases {
	return &releases{p: p, counts: map[batchRef]int{}, failed: map[batchRef]string{}, calls: map[string]int{}, settles: map[bool]int{}}
}

// add counts lw as released; failed, when not empty, says why Gmail
// refused it for good.
func (r *releases) add(lw store.LabelWrite, failed string) {
	ref := batchRef{lw.JobID, lw.Batch}
	r.counts[ref]++
	if failed != "" {
		r.failed[ref] = failed
	}
}

// settled counts a settle's change (one of no job) that reached Gmail as
// new mail's, once the transaction commits.
func (r *releases) settled(lw store.LabelWrite) {
	r.settles[lw.Add]++
}

func (r *releases) apply(tx *store.Tx) error {
	if len(r.settles) > 0 {
		m, added, removed := r.p.metrics, r.settles[true], r.settles[false]
		tx.OnCommit(func() {
			m.labels.WithLabelValues("new_mail", "added").Add(float64(added))
			m.labels.WithLabelValues("new_mail", "removed").Add(float64(removed))
		})
	}
	for _, job := range slices.Sorted(maps.Keys(r.calls)) {
		j, err := tx.ReclassifyJobGet(job)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		j.GmailCalls += r.calls[job]
		if err := tx.ReclassifyJobPut(j); err != nil {
			return err
		}
	}
	refs := slices.SortedFunc(maps.Keys(r.counts), func(a, b batchRef) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.index, b.index))
	})
	for _, ref := range refs {
		if err := r.p.releaseTx(tx, ref, r.counts[ref], r.failed[ref]); err != nil {
			return err
		}
	}
	return nil
}

// releaseTx counts n of a writing batch's changes as no longer waiting
// (failed, when not empty: why one was refused for good) and, when none
// waits any more, finishes the batch in its job: done, with the counts it
// kept, or, when a change was refused, failed and in the dead letters (a
// redrive runs the batch again); the job finishes when no batch waits.
func (p *Pipeline) releaseTx(tx *store.Tx, ref batchRef, n int, failed string) error {
	bt, err := tx.ReclassifyBatchGet(ref.job, ref.index)
	if errors.Is(err, store.ErrNotFound) || err == nil && bt.State != store.BatchWriting {
		return nil
	}
	if err != nil {
		return err
	}
	bt.Unsent -= n
	if failed != "" && bt.WriteFailed == "" {
		bt.WriteFailed = failed
	}
	if bt.Unsent > 0 {
		return tx.ReclassifyBatchPut(bt)
	}
	job, err := tx.ReclassifyJobGet(ref.job)
	if err != nil {
		return err
	}
	bt.Unsent = 0
	job.BatchesWriting--
	if bt.WriteFailed != "" {
		if err := p.buryBatchTx(tx, bt); err != nil {
			return err
		}
		bt.State = store.BatchFailed
		job.BatchesFailed++
		bt.Payload = nil
	} else {
		bt.State = store.BatchDone
		job.BatchesDone++
		bt.Payload = nil
		job.ThreadsLabeled += bt.ThreadsLabeled
		job.ThreadsUnlabeled += bt.ThreadsUnlabeled
		job.MessagesLabeled += bt.MessagesLabeled
		job.MessagesUnlabeled += bt.MessagesUnlabeled
	}
	if err := tx.ReclassifyBatchPut(bt); err != nil {
		return err
	}
	if job.Waiting() == 0 && job.FinishedAt.IsZero() {
		job.FinishedAt = p.cfg.Now().UTC()
	}
	if err := tx.ReclassifyJobPut(job); err != nil {
		return err
	}
	if bt.WriteFailed == "" {
		m := p.metrics
		tx.OnCommit(func() {
			m.threads.WithLabelValues("labeled").Add(float64(bt.ThreadsLabeled))
			m.threads.WithLabelValues("unlabeled").Add(float64(bt.ThreadsUnlabeled))
			m.labels.WithLabelValues("reclassify", "added").Add(float64(bt.MessagesLabeled))
			m.labels.WithLabelValues("reclassify", "removed").Add(float64(bt.MessagesUnlabeled))
		})
	}
	return nil
}

// buryBatchTx archives a writing batch one of whose label changes Gmail
// refused for good, through the queue as a failed task is: with its alert,
// and with the group and weight it was enqueued with (its account, its
// threads), so that a redrive shares the account's turn as it did.
func (p *Pipeline) buryBatchTx(tx *store.Tx, bt store.ReclassifyBatch) error {
	now := p.cfg.Now().UTC()
	return p.queue.BuryTx(tx, store.DeadLetter{
		ID: bt.OutboxID, Type: TypeReclassifyBatch, Queue: bt.Queue, Payload: bt.Payload,
		Group: bt.AccountID, Weight: bt.Threads,
		Error: bt.WriteFailed, Attempts: 1, FirstFailedAt: now, LastFailedAt: now,
	})
}

// redirectTx makes the waiting label write of a message's label, if any,
// carry a change about to go to Gmail directly (new mail's, a settle's):
// add or not, with its pending provenance prov. The writer may have the
// older change in flight (read, waiting for quota, or sent): deleting the
// record would let that older change land after the direct one and stay.
// Redirected, the record is sent again after it, with the newer change's
// effect, and its batch counts it as handled then.
func (p *Pipeline) redirectTx(tx *store.Tx, accountID, labelID, messageID string, add bool, prov store.Provenance) error {
	w, err := tx.LabelWriteGet(accountID, labelID, messageID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	prov.Pending = true
	w.Add, w.Prov, w.At = add, prov, p.cfg.Now().UTC()
	if _, _, err := tx.LabelWritePut(&w); err != nil {
		return err
	}
	return p.scheduleWriterTx(tx, accountID, p.cfg.Now())
}

// decideTx records a plan's decision about a message's label that needs
// no Gmail call: its provenance record, put or deleted. A change the writer
// holds for the label (a reclassify's older plan, or one a direct change
// redirected) may be in flight: deleted, it would land all the same, after
// this decision, and stay with no record of it (the soak saw a rule's label
// kept as a person's). So that change stays, and goes again after the one
// in flight: as an add where the plan wants the label on, as it is
// otherwise, with the record it leaves behind (a removal to forget is
// forgotten once the mirror has seen this one).
func (p *Pipeline) decideTx(tx *store.Tx, accountID string, c provChange) error {
	w, err := tx.LabelWriteGet(accountID, c.label, c.msg.m.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	case !c.want:
		return nil
	case !w.Add:
		prov := w.Prov
		prov.Present = true
		if err := p.redirectTx(tx, accountID, c.label, c.msg.m.ID, true, prov); err != nil {
			return err
		}
	}
	if c.p == nil {
		return tx.LabelProvenanceDelete(accountID, c.msg.m.ID, c.label)
	}
	return tx.LabelProvenancePut(accountID, c.msg.m.ID, c.label, *c.p)
}
