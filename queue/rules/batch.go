package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// HandleBatch is the handler of rules:reclassify-batch. It re-evaluates
// every message of its threads against the batch's rules whose latest job
// is still this batch's job (per rule: the others were superseded and a
// newer job covers them); when there is none it does no Gmail work and
// writes nothing (but for a batch redriven from the dead letters, which
// then counts as skipped). For each message and label it adds the label where a rule
// matches, removes it where it no longer matches and a rule had applied it,
// and never removes a label a person applied. Changes go to Gmail in
// messages.batchModify calls grouped by label change, within the account.s
// quota share; provenance, the batch's state, the job's counters and the
// task's completion commit in one transaction.
func (p *Pipeline) HandleBatch(ctx context.Context, t *queue.Task) error {
	// Reclassify spends the account's Gmail budget after live changes and
	// before full syncs.
	ctx = google.WithPriority(ctx, google.PriorityReclassify)
	var pl batchPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return queue.Permanent(fmt.Errorf("rules: decode batch payload: %w", err))
	}
	// The cheap check first: a few reads of latest job ids, no decoding.
	if !p.anyLive(pl) {
		return p.staleOr(p.settleFailed(pl))
	}
	release, err := p.gate.acquire(ctx, pl.AccountID, pl.JobID)
	if err != nil {
		return err
	}
	defer release()
	b := &batch{p: p, pl: pl, task: t}
	if err := b.load(); err != nil || len(b.live) == 0 {
		return p.staleOr(err)
	}
	return b.run(ctx)
}

func (p *Pipeline) staleOr(err error) error {
	if err != nil {
		return err
	}
	return queue.Stale("every rule of the batch has a newer reclassify job")
}

// anyLive reports whether a rule of the batch still has the batch's job as
// its latest.
func (p *Pipeline) anyLive(pl batchPayload) bool {
	live := true // a failed read falls through to load, which reports it
	_ = p.db.View(func(tx *store.Tx) error {
		live = slices.ContainsFunc(pl.RuleIDs, func(id string) bool { return tx.RuleLatestJob(id) == pl.JobID })
		return nil
	})
	return live
}

// liveRulesTx returns the batch's rules whose latest job is the batch's
// job, compiled.
func (p *Pipeline) liveRulesTx(tx *store.Tx, pl batchPayload) ([]*compiledRule, error) {
	var live []*compiledRule
	for _, id := range pl.RuleIDs {
		if tx.RuleLatestJob(id) != pl.JobID {
			continue
		}
		r, err := tx.RuleGet(id)
		if err != nil {
			return nil, err
		}
		c, err := p.compile(r)
		if err != nil {
			return nil, err
		}
		live = append(live, c)
	}
	return live, nil
}

// batch is one run of a batch task.
type batch struct {
	p    *Pipeline
	pl   batchPayload
	task *queue.Task
	live []*compiledRule
	msgs []*batchMessage
	gm   Gmail

	calls int
	// applied are the label changes of an earlier attempt that reached
	// Gmail and are recorded (see relabel); the job's counters count them.
	applied []provChange
}

type batchMessage struct {
	m    store.Message
	body string
	gone bool // deleted in Gmail since the mirror saw it
	prov map[string]store.Provenance
	// wants are the live rules that match, by label key.
	wants map[string]*compiledRule
}

// provChange is a provenance record to write (nil p: delete) once the
// Gmail call it depends on (label id and direction) succeeded.
type provChange struct {
	msg   *batchMessage
	label string
	p     *store.Provenance
	// add/remove: the Gmail change it depends on; neither: none.
	add, remove bool
	// want: a rule of the plan wants the label on the message.
	want bool
}

// reached reports whether the Gmail change c depends on did not fail.
func (c provChange) reached(failed map[string]bool) bool {
	return !(c.add && failed["+"+c.label] || c.remove && failed["-"+c.label])
}

func (b *batch) load() error {
	return b.p.db.View(func(tx *store.Tx) error {
		var err error
		if b.live, err = b.p.liveRulesTx(tx, b.pl); err != nil || len(b.live) == 0 {
			return err
		}
		return b.loadMessages(tx)
	})
}

// loadMessages reads the messages of the batch's threads from the mirror,
// with the provenance of their labels.
func (b *batch) loadMessages(tx *store.Tx) error {
	msgs, err := tx.ThreadMessages(b.pl.AccountID, b.pl.ThreadIDs...)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		prov, err := tx.LabelProvenance(b.pl.AccountID, m.ID)
		if err != nil {
			return err
		}
		b.msgs = append(b.msgs, &batchMessage{m: m, prov: prov})
	}
	return nil
}

// needsBody reports whether a live rule that reads bodies has no verdict
// of its version on the message: a full sync that read its body took the
// verdicts of the rules in force then (store.Message.BodyVerdicts).
func (bm *batchMessage) needsBody(live []*compiledRule) bool {
	for _, r := range live {
		if r.needBody && !r.deleted {
			if _, ok := bm.m.BodyVerdict(r.id, r.version); !ok {
				return true
			}
		}
	}
	return false
}

func (b *batch) run(ctx context.Context) error {
	start := time.Now()
	gm, err := b.p.gmail(ctx, b.pl.AccountID)
	if err != nil {
		return err
	}
	b.gm = gm
	if err := b.fetchBodies(ctx); err != nil {
		return err
	}
	// Which label each message should carry, by key.
	names := map[string]string{}
	create := map[string]bool{}
	for _, r := range b.live {
		if !r.deleted {
			names[r.labelKey] = r.label
		}
	}
	for _, bm := range b.msgs {
		if bm.gone {
			continue
		}
		msg := Message{From: bm.m.From, To: bm.m.To, Cc: bm.m.Cc, Subject: bm.m.Subject, Body: bm.body}
		for _, r := range b.live {
			if !r.deleted && r.matches(&bm.m, &msg) {
				if bm.wants == nil {
					bm.wants = map[string]*compiledRule{}
				}
				bm.wants[r.labelKey] = r
				create[r.labelKey] = true
			}
		}
	}
	// known: after a refresh, the label ids Gmail has.
	var known map[string]bool
	for retried := false; ; retried = true {
		ids, calls, err := b.p.labelIDs(ctx, gm, b.pl.AccountID, names, create)
		b.calls += calls
		if err != nil {
			return err
		}
		changes, adds, removes := b.plan(ids, known)
		switch {
		case b.p.queue != nil && b.task != nil:
			// The account's writer sends the changes, with other batches'.
			return b.queueWrites(changes, labelNames(ids, names), start)
		case b.p.queue != nil:
			// A settle's: the writer sends them too, at once.
			return b.settleWrites(changes, labelNames(ids, names))
		}
		again, err := b.direct(ctx, changes, adds, removes, retried)
		if err != nil || !again {
			return err
		}
		// A label id cached here was deleted in Gmail: plan again.
		if known, err = b.relabel(ctx); err != nil {
			return err
		}
	}
}

// settleWrites records a settle's changes for the account's writer, due at
// once (they belong to no job), and schedules it: the writer is the one
// path by which the rules' batchModify calls reach Gmail, so that a
// settle's change and a reclassify's of the same label replace each other
// as plans do (the latest intent wins) instead of racing there.
func (b *batch) settleWrites(changes []provChange, names map[string]string) error {
	now := b.p.cfg.Now().UTC()
	err := b.p.db.Batch(func(tx *store.Tx) error {
		w, err := b.writeDownTx(tx, changes, names, now)
		if err != nil || w.unsent == 0 {
			return err
		}
		return b.p.scheduleWriterTx(tx, b.pl.AccountID, now)
	})
	if err != nil {
		return fmt.Errorf("rules: record the settled labels of thread %v: %w", b.pl.ThreadIDs, err)
	}
	return nil
}

// direct makes a batch's label changes itself (batches of a pipeline
// without a queue: tests) and records them, holding the labels it changes
// (lockLabels) from the history stamp to the record. again reports that
// Gmail refused a label id (deleted there since it was cached) on the first
// try: what reached Gmail is recorded, and the caller plans again.
func (b *batch) direct(ctx context.Context, changes []provChange, adds, removes map[string][]string, retried bool) (again bool, err error) {
	start := time.Now()
	unlock, err := b.p.lockLabels(ctx, b.pl.AccountID, slices.Collect(maps.Keys(adds)), slices.Collect(maps.Keys(removes)))
	if err != nil {
		return false, err
	}
	defer unlock()
	if len(adds)+len(removes) > 0 {
		if err := b.stampHistory(ctx, changes); err != nil {
			return false, err
		}
		if err := b.intend(changes); err != nil {
			return false, err
		}
	}
	tApply := time.Now()
	failed, err := b.apply(ctx, adds, removes)
	if !retried && errors.Is(err, google.ErrInvalidLabel) {
		return true, b.commitReached(changes, failed)
	}
	tCommit := time.Now()
	if cerr := b.commit(changes, failed, err == nil); cerr != nil {
		return false, errors.Join(err, cerr)
	}
	if err != nil {
		return false, err
	}
	b.p.log.Debug("reclassify batch done", "job_id", b.pl.JobID, "batch", b.pl.Index, "account_id", b.pl.AccountID,
		"rules", len(b.live), "messages", len(b.msgs), "gmail_calls", b.calls, "locked", tApply.Sub(start),
		"gmail", tCommit.Sub(tApply), "commit", time.Since(tCommit))
	return false, nil
}

// relabel prepares a second attempt after Gmail refused a label id (it was
// deleted there since it was cached; direct recorded the changes that did
// reach Gmail): it reads the account's labels again into the label map (so labelIDs
// makes the label anew where a rule wants it) and the messages' provenance
// again, and returns the label ids Gmail has (plan drops the records of a
// label that is gone instead of removing it).
func (b *batch) relabel(ctx context.Context) (map[string]bool, error) {
	b.calls++
	known, err := b.p.refreshLabels(ctx, b.gm, b.pl.AccountID)
	if err != nil {
		return nil, err
	}
	err = b.p.db.View(func(tx *store.Tx) error {
		for _, bm := range b.msgs {
			var err error
			if bm.prov, err = tx.LabelProvenance(b.pl.AccountID, bm.m.ID); err != nil {
				return err
			}
		}
		return nil
	})
	return known, err
}

// commitReached records the changes of a first try that reached Gmail
// before it refused a label id (see relabel).
func (b *batch) commitReached(changes []provChange, failed map[string]bool) error {
	if err := b.commit(changes, failed, false); err != nil {
		return err
	}
	for _, c := range changes {
		if (c.add || c.remove) && c.reached(failed) {
			b.applied = append(b.applied, c)
		}
	}
	return nil
}

// fetchBodies reads from Gmail, a few at a time, the text of the batch's
// messages that a live rule reading bodies has no verdict on: the mirror
// keeps no bodies.
func (b *batch) fetchBodies(ctx context.Context) error {
	var todo []*batchMessage
	for _, bm := range b.msgs {
		if bm.needsBody(b.live) {
			todo = append(todo, bm)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		next  = make(chan *batchMessage)
	)
	for range min(b.p.cfg.BodyFetchers, len(todo)) {
		wg.Go(func() {
			for bm := range next {
				gmsg, err := b.gm.GetMessage(ctx, bm.m.ID, true)
				b.p.metrics.gmailCalls.WithLabelValues("messages.get").Inc()
				mu.Lock()
				b.calls++
				switch {
				case errors.Is(err, google.ErrNotFound):
					bm.gone = true
				case err != nil:
					if first == nil {
						first = err
						cancel()
					}
				default:
					bm.body = gmsg.Body
				}
				mu.Unlock()
			}
		})
	}
	for _, bm := range todo {
		select {
		case next <- bm:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	return first
}

// effectiveHas says whether the message carries label l: the provenance
// record of our own last change of l wins until the mirror takes a newer
// change of that label (the sync reports our change a little later). A
// pending change's outcome is unknown: the label counts as missing, so a
// rule that wants it sends the add again.
func effectiveHas(m *store.Message, l string, p store.Provenance, hasP bool) bool {
	if hasP && p.Pending {
		return false
	}
	if hasP && m.LabelHID(l) <= p.SeenHID {
		return p.Present
	}
	return m.HasLabel(l)
}

// plan decides each message's label changes. adds and removes map label
// ids to message ids. known, when not nil, holds every label id Gmail has:
// the records of a label that is not there any more are dropped.
func (b *batch) plan(ids map[string]string, known map[string]bool) (changes []provChange, adds, removes map[string][]string) {
	adds, removes = map[string][]string{}, map[string][]string{}
	liveByID := make(map[string]*compiledRule, len(b.live))
	for _, r := range b.live {
		liveByID[r.id] = r
	}
	now := b.p.cfg.Now().UTC()
	stamp := func(r *compiledRule, present bool, seen uint64) *store.Provenance {
		return &store.Provenance{RuleID: r.id, Version: r.version, JobID: b.pl.JobID, Present: present, SeenHID: seen, At: now}
	}
	for _, bm := range b.msgs {
		if bm.gone {
			continue
		}
		m := &bm.m
		handled := map[string]bool{}
		for key, r := range bm.wants {
			l := ids[key]
			handled[l] = true
			p, hasP := bm.prov[l]
			has := effectiveHas(m, l, p, hasP)
			switch {
			case hasP && p.Present && !has:
				// Ours, and gone (a person took it off): the rule puts it back.
				adds[l] = append(adds[l], m.ID)
				changes = append(changes, provChange{msg: bm, label: l, p: stamp(r, true, m.LabelHID(l)), add: true, want: true})
			case hasP && p.Present && (p.RuleID != r.id || p.Version != r.version):
				// Ours, kept: now on behalf of this rule version.
				changes = append(changes, provChange{msg: bm, label: l, p: stamp(r, true, p.SeenHID), want: true})
			case hasP && p.Present:
			case has:
				// A person's label (or Gmail's filter's): not ours to record.
				if hasP {
					changes = append(changes, provChange{msg: bm, label: l, want: true})
				}
			default:
				adds[l] = append(adds[l], m.ID)
				changes = append(changes, provChange{msg: bm, label: l, p: stamp(r, true, m.LabelHID(l)), add: true, want: true})
			}
		}
		for l, p := range bm.prov {
			if handled[l] {
				continue
			}
			r, ours := liveByID[p.RuleID]
			switch {
			case known != nil && !known[l]:
				// The label was deleted in Gmail, and with it from every
				// message: nothing to remove, nothing to remember.
				changes = append(changes, provChange{msg: bm, label: l})
			case (p.Present || p.Pending) && ours:
				// Applied by a rule of this batch that no longer wants it
				// here (it no longer matches, was deleted, or owns another
				// label now), or a change of its whose outcome is unknown.
				removes[l] = append(removes[l], m.ID)
				changes = append(changes, provChange{msg: bm, label: l, p: stamp(r, false, m.LabelHID(l)), remove: true})
			case !p.Present && !p.Pending && m.LabelHID(l) > p.SeenHID:
				// The mirror has caught up with our removal: forget it. A
				// pending removal's outcome is unknown (the newer change
				// the mirror took may be our own older add, landed late):
				// the writer or the rule's own next job settles it.
				changes = append(changes, provChange{msg: bm, label: l})
			}
		}
	}
	return changes, adds, removes
}

// apply makes the label changes in Gmail with batchModify, one call per
// label and direction (per 1,000 messages), GmailCalls of them at once
// (they touch different labels). failed names the label changes ("+id",
// "-id") that did not complete; err is the first error.
func (b *batch) apply(ctx context.Context, adds, removes map[string][]string) (failed map[string]bool, err error) {
	type change struct {
		key         string // "+id" or "-id"
		add, remove []string
		ids         []string
	}
	var changes []change
	for sign, byLabel := range map[string]map[string][]string{"-": removes, "+": adds} {
		for _, l := range slices.Sorted(maps.Keys(byLabel)) {
			c := change{key: sign + l, ids: byLabel[l]}
			if sign == "+" {
				c.add = []string{l}
			} else {
				c.remove = []string{l}
			}
			changes = append(changes, c)
		}
	}
	failed = map[string]bool{}
	var mu sync.Mutex
	inParallel(b.p.cfg.GmailCalls, changes, func(c change) {
		for chunk := range slices.Chunk(c.ids, google.MaxBatchModify) {
			mu.Lock()
			stop := err != nil
			b.calls++
			mu.Unlock()
			var cerr error
			if !stop {
				b.p.metrics.gmailCalls.WithLabelValues("batchModify").Inc()
				cerr = b.gm.BatchModify(ctx, chunk, c.add, c.remove)
			}
			if stop || cerr != nil {
				mu.Lock()
				failed[c.key] = true
				if err == nil {
					err = cerr
				}
				mu.Unlock()
				return
			}
		}
	})
	return failed, err
}

// commit records what happened in one transaction: the provenance of the
// changes that reached Gmail and, when the whole batch did, the batch's
// state, the job's counters and the task's completion. A batch without a
// task (a new message's settle) has no job: only its provenance and its
// label counts are recorded.
func (b *batch) commit(changes []provChange, failed map[string]bool, complete bool) error {
	if b.task == nil {
		return b.commitSettle(changes, failed, complete)
	}
	labeled, unlabeled := map[string]bool{}, map[string]bool{}
	nAdd, nRemove := 0, 0
	err := b.p.db.Update(func(tx *store.Tx) error {
		if err := b.putProvenance(tx, changes, failed); err != nil {
			return err
		}
		if !complete {
			return nil
		}
		for _, c := range slices.Concat(b.applied, changes) {
			switch {
			case c.add:
				labeled[c.msg.m.ThreadID] = true
				nAdd++
			case c.remove:
				unlabeled[c.msg.m.ThreadID] = true
				nRemove++
			}
		}
		bt, err := tx.ReclassifyBatchGet(b.pl.JobID, b.pl.Index)
		if err != nil {
			return err
		}
		job, err := tx.ReclassifyJobGet(b.pl.JobID)
		if err != nil {
			return err
		}
		if bt.State == store.BatchDone || bt.State == store.BatchWriting {
			return b.task.Ack(tx) // a second delivery of a batch that ran
		}
		// A batch dropped as stale by a newer job's publish while it ran did
		// run; a failed one was redriven from the dead letters, and its job
		// finishes anew.
		refinish := bt.State == store.BatchFailed
		*batchCounter(&job, bt.State)--
		bt.State = store.BatchDone
		if err := tx.ReclassifyBatchPut(bt); err != nil {
			return err
		}
		job.BatchesDone++
		job.RulesSkipped += len(b.pl.RuleIDs) - len(b.live)
		job.ThreadsLabeled += len(labeled)
		job.ThreadsUnlabeled += len(unlabeled)
		job.MessagesLabeled += nAdd
		job.MessagesUnlabeled += nRemove
		job.GmailCalls += b.calls
		if job.Waiting() == 0 && (job.FinishedAt.IsZero() || refinish) {
			job.FinishedAt = b.p.cfg.Now().UTC()
		}
		if err := tx.ReclassifyJobPut(job); err != nil {
			return err
		}
		if err := b.p.flushJobTx(tx, job); err != nil {
			return err
		}
		return b.task.Ack(tx)
	})
	if err != nil {
		return fmt.Errorf("rules: record batch %d of job %s: %w", b.pl.Index, b.pl.JobID, err)
	}
	if complete {
		m := b.p.metrics
		m.batches.WithLabelValues("run").Inc()
		m.threads.WithLabelValues("labeled").Add(float64(len(labeled)))
		m.threads.WithLabelValues("unlabeled").Add(float64(len(unlabeled)))
		m.labels.WithLabelValues("reclassify", "added").Add(float64(nAdd))
		m.labels.WithLabelValues("reclassify", "removed").Add(float64(nRemove))
	}
	return nil
}

// stampHistory raises the history id in the records of the changes about
// to go to Gmail to the mailbox's history id now (users.getProfile, one
// quota unit). The mirror may take older changes of a label after these
// (an earlier batch's, which it had not seen when this one planned): any
// change it takes with an id up to that one is older than ours, and the
// record stays the better knowledge of the label.
func (b *batch) stampHistory(ctx context.Context, changes []provChange) error {
	b.calls++
	b.p.metrics.gmailCalls.WithLabelValues("getProfile").Inc()
	_, hid, err := b.gm.Profile(ctx)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if c.add || c.remove {
			c.p.SeenHID = max(c.p.SeenHID, hid)
		}
	}
	return nil
}

// intend writes down the changes about to go to Gmail as pending (see
// store.Provenance): a run cut short after Gmail made them, and before
// commit, leaves them known as the rules' changes, to be made again.
func (b *batch) intend(changes []provChange) error {
	// Puts only, safe to run twice: shared with other writers' commit.
	return b.p.db.Batch(func(tx *store.Tx) error {
		for _, c := range changes {
			if !c.add && !c.remove {
				continue
			}
			p := *c.p
			p.Pending = true
			if err := tx.LabelProvenancePut(b.pl.AccountID, c.msg.m.ID, c.label, p); err != nil {
				return err
			}
			// This change goes to Gmail now, after any the writer holds
			// for the label (maybe in flight): that one is sent again
			// after it, with this change's effect.
			if err := b.p.redirectTx(tx, b.pl.AccountID, c.label, c.msg.m.ID, c.add, p); err != nil {
				return err
			}
		}
		return nil
	})
}

// putProvenance writes the provenance of the changes that reached Gmail.
func (b *batch) putProvenance(tx *store.Tx, changes []provChange, failed map[string]bool) error {
	for _, c := range changes {
		var err error
		switch {
		case !c.reached(failed):
			continue
		case !c.add && !c.remove:
			err = b.p.decideTx(tx, b.pl.AccountID, c)
		case c.p == nil:
			err = tx.LabelProvenanceDelete(b.pl.AccountID, c.msg.m.ID, c.label)
		default:
			err = confirmTx(tx, b.pl.AccountID, c.msg.m.ID, c.label, *c.p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// confirmTx makes the pending record of a direct change that Gmail made
// (intend, putRecords) confirmed as p, unless a newer intent replaced it
// while the call was out (a reclassify's plan for the writer): that one
// stands, and the writer confirms it once it has sent it. Confirmed over
// it, the newer change would land after this one with a record that says
// otherwise (the property test saw a reclassify's add stay, as nobody's,
// under a settle's confirmed removal).
func confirmTx(tx *store.Tx, accountID, messageID, labelID string, p store.Provenance) error {
	cur, err := tx.LabelProvenanceGet(accountID, messageID, labelID)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	mine := p
	mine.Pending = true
	if err != nil || !sameIntent(cur, mine) {
		return nil
	}
	p.Pending = false
	return tx.LabelProvenancePut(accountID, messageID, labelID, p)
}

// commitSettle records a settle's provenance and, once all of it reached
// Gmail, counts its label changes as new mail's.
func (b *batch) commitSettle(changes []provChange, failed map[string]bool, complete bool) error {
	err := b.p.db.Update(func(tx *store.Tx) error { return b.putProvenance(tx, changes, failed) })
	if err != nil {
		return fmt.Errorf("rules: record the settled labels of thread %v: %w", b.pl.ThreadIDs, err)
	}
	if complete {
		for _, c := range slices.Concat(b.applied, changes) {
			switch {
			case c.add:
				b.p.metrics.labels.WithLabelValues("new_mail", "added").Inc()
			case c.remove:
				b.p.metrics.labels.WithLabelValues("new_mail", "removed").Inc()
			}
		}
	}
	return nil
}

// labelNames maps the label ids of the batch's rules to their names.
func labelNames(ids, names map[string]string) map[string]string {
	out := make(map[string]string, len(ids))
	for key, id := range ids {
		if name, ok := names[key]; ok {
			out[id] = name
		}
	}
	return out
}

// queueWrites is a reclassify batch's commit when the account's writer
// sends its label changes to Gmail: in one transaction it records the
// changes that need no Gmail call, writes the others down as pending
// provenance and as label writes (each replacing an older plan for the same
// label of the same message), marks the batch writing with the counts its
// job takes once its changes are in Gmail, schedules the writer, and
// completes the task. A batch without label changes is done at once.
func (b *batch) queueWrites(changes []provChange, names map[string]string, start time.Time) error {
	now := b.p.cfg.Now().UTC()
	var (
		w    plannedWrites
		void bool
	)
	// One commit shared with the other batches that commit at the same
	// moment (their fsyncs, not their plans, would bound the rate); the
	// function may run again, so it starts from nothing each time.
	err := b.p.db.Batch(func(tx *store.Tx) error {
		void = false
		bt, err := tx.ReclassifyBatchGet(b.pl.JobID, b.pl.Index)
		if err != nil {
			return err
		}
		if bt.State == store.BatchDone || bt.State == store.BatchWriting {
			return b.task.Ack(tx) // a second delivery of a batch that ran
		}
		if bt.State == store.BatchStale {
			void = true
			return b.voidTx(tx)
		}
		if w, err = b.writeDownTx(tx, changes, names, now); err != nil {
			return err
		}
		if err := b.plannedTx(tx, bt, w, now); err != nil {
			return err
		}
		return b.task.Ack(tx)
	})
	if err != nil {
		return fmt.Errorf("rules: record batch %d of job %s: %w", b.pl.Index, b.pl.JobID, err)
	}
	if void {
		// Counted stale by the publish that dropped it.
		b.p.log.Debug("reclassify batch superseded while it ran", "job_id", b.pl.JobID, "batch", b.pl.Index, "account_id", b.pl.AccountID)
		return nil
	}
	b.p.metrics.batches.WithLabelValues("run").Inc()
	b.p.log.Debug("reclassify batch planned", "job_id", b.pl.JobID, "batch", b.pl.Index, "account_id", b.pl.AccountID,
		"rules", len(b.live), "messages", len(b.msgs), "label_changes", w.unsent, "gmail_calls", b.calls, "elapsed", time.Since(start))
	return nil
}

// voidTx completes the task of a batch dropped by a newer job's publish
// while it ran: that job plans these threads again, and none of this plan's
// changes has reached Gmail (the writer would send them), so the plan is
// void and the batch stays skipped. Its job may have finished at that
// publish: recording changes now would leave them going out after its
// reclassify.done. Only its Gmail calls count.
func (b *batch) voidTx(tx *store.Tx) error {
	job, err := tx.ReclassifyJobGet(b.pl.JobID)
	if err != nil {
		return err
	}
	job.GmailCalls += b.calls
	if err := tx.ReclassifyJobPut(job); err != nil {
		return err
	}
	return b.task.Ack(tx)
}

// plannedWrites counts what a batch's plan left for the writer.
type plannedWrites struct {
	labeled, unlabeled map[string]bool // thread ids
	touched            map[string]bool // label ids
	nAdd, nRemove      int
	unsent             int
}

// writeDownTx records the plan's changes: a decision that needs no Gmail
// call at once, the others as pending provenance and label writes (an
// older plan's write for the same label of the same message is replaced,
// and counted as handled in its batch).
func (b *batch) writeDownTx(tx *store.Tx, changes []provChange, names map[string]string, now time.Time) (plannedWrites, error) {
	account := b.pl.AccountID
	w := plannedWrites{labeled: map[string]bool{}, unlabeled: map[string]bool{}, touched: map[string]bool{}}
	for _, c := range changes {
		id := c.msg.m.ID
		if !c.add && !c.remove {
			if err := b.p.decideTx(tx, account, c); err != nil {
				return w, err
			}
			continue
		}
		pr := *c.p
		pr.Pending = true
		if err := tx.LabelProvenancePut(account, id, c.label, pr); err != nil {
			return w, err
		}
		lw := store.LabelWrite{AccountID: account, LabelID: c.label, MessageID: id, ThreadID: c.msg.m.ThreadID,
			Add: c.add, LabelName: names[c.label], JobID: b.pl.JobID, Batch: b.pl.Index, Prov: pr, At: now}
		old, replaced, err := tx.LabelWritePut(&lw)
		if err != nil {
			return w, err
		}
		if replaced {
			if err := b.p.releaseTx(tx, batchRef{old.JobID, old.Batch}, 1, ""); err != nil {
				return w, err
			}
		}
		w.unsent++
		w.touched[c.label] = true
		if c.add {
			w.labeled[c.msg.m.ThreadID] = true
			w.nAdd++
		} else {
			w.unlabeled[c.msg.m.ThreadID] = true
			w.nRemove++
		}
	}
	return w, nil
}

// plannedTx moves the batch on in its job: done when it left nothing to
// write, writing (with the counts its job takes once its changes are in
// Gmail) otherwise, and then schedules the account's writer.
func (b *batch) plannedTx(tx *store.Tx, bt store.ReclassifyBatch, w plannedWrites, now time.Time) error {
	// releaseTx may have rewritten the job: read it after.
	job, err := tx.ReclassifyJobGet(b.pl.JobID)
	if err != nil {
		return err
	}
	// A failed batch redriven from the dead letters counts again, but
	// its job, finished once (reclassify.done sent), stays finished: it
	// is never done twice.
	*batchCounter(&job, bt.State)--
	job.RulesSkipped += len(b.pl.RuleIDs) - len(b.live)
	job.GmailCalls += b.calls
	bt.WriteFailed = "" // a redriven batch starts afresh
	bt.ThreadsLabeled, bt.ThreadsUnlabeled = len(w.labeled), len(w.unlabeled)
	bt.MessagesLabeled, bt.MessagesUnlabeled = w.nAdd, w.nRemove
	if w.unsent == 0 {
		bt.State = store.BatchDone
		job.BatchesDone++
		job.ThreadsLabeled += len(w.labeled)
		job.ThreadsUnlabeled += len(w.unlabeled)
		if job.Waiting() == 0 && job.FinishedAt.IsZero() {
			job.FinishedAt = now
		}
	} else {
		bt.State, bt.Unsent, bt.Payload = store.BatchWriting, w.unsent, b.task.Payload
		job.BatchesWriting++
	}
	if err := tx.ReclassifyBatchPut(bt); err != nil {
		return err
	}
	if err := tx.ReclassifyJobPut(job); err != nil {
		return err
	}
	if w.unsent > 0 {
		// The writer waits for more changes of its labels, but not when
		// a group is full (or the job's last batch has run: flushJobTx).
		at := now.Add(b.p.cfg.WriteDelay)
		full := slices.ContainsFunc(slices.Collect(maps.Keys(w.touched)), func(l string) bool {
			return tx.LabelWriteCount(b.pl.AccountID, l, google.MaxBatchModify) >= google.MaxBatchModify
		})
		if full {
			at = now
		}
		if err := b.p.scheduleWriterTx(tx, b.pl.AccountID, at); err != nil {
			return err
		}
	}
	return b.p.flushJobTx(tx, job)
}
