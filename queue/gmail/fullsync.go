package gmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/googleerr"
	"mailroom/queue/rules"
	"mailroom/store"
)

// handleFullSync is gmail:full-sync: the account's full sync at bulk
// priority, in its own task and queue so that the history sync (gmail:sync)
// goes on beside it: pushes that come during a full sync have their history
// read and their events run at live priority, from the history id the full
// sync started at. Both write the mirror with per-attribute history ids,
// so whatever the interleaving the newer state of each attribute wins.
//
// One run does a slice of the full sync (about FullSyncSlice messages,
// see fullSyncSlice) and then, in the transaction that acks it, records
// the account's next run behind the other accounts' waiting full syncs:
// the few gmail-full-sync workers serve every account in turn instead of
// one account's whole mailbox after another's. A full sync requested while
// one runs (a resync, history too old) begins afresh at the next run.
func (p *Pipeline) handleFullSync(ctx context.Context, t *queue.Task) error {
	var pl syncPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return queue.Permanent(fmt.Errorf("gmail: full sync: bad payload: %w", err))
	}
	acc, err := p.account(pl.AccountID)
	if err != nil {
		return err
	}
	if !active(acc) && !acc.FullSyncDead {
		return queue.Stale("account " + acc.ID + " is " + acc.Status)
	}
	if acc.FullSyncDead { // its dead letter redriven
		if err := p.reviveAccount(acc.ID); err != nil {
			return err
		}
	}
	acc, done, err := p.fullSyncDue(t, acc.ID)
	if err != nil || done {
		return err // no full sync is due (one that ran took this request)
	}
	ctx = google.WithPriority(ctx, google.PriorityBulk)
	run := store.SyncRun{Kind: "full", Trigger: pl.Trigger, StartedAt: p.now(), FromHistoryID: acc.HistoryID}
	gm, err := p.client(ctx, acc)
	var start store.FullSyncStart
	if err == nil {
		start, err = p.startFullSync(ctx, gm, acc)
	}
	last := false
	if err == nil {
		last, err = p.fullSyncSlice(ctx, gm, acc.ID, start)
	}
	if err != nil {
		return p.syncFailed(acc.ID, run, err)
	}
	if !last {
		return p.fullSyncHandOn(t, acc.ID, pl.Trigger)
	}
	if err := p.finishFullSync(t, acc.ID, &run); err != nil {
		return err
	}
	p.metrics.syncs.WithLabelValues(run.Kind, "ok").Inc()
	p.log.Debug("full sync done", "account_id", acc.ID, "task_id", t.ID, "messages", run.Messages,
		"resumed", run.Resumed, "history_id", run.ToHistoryID)
	return nil
}

// fullSyncDue acks the task, in one transaction with the check, when no
// full sync of the account is due (a request that came meanwhile found
// this task and left the work to it).
func (p *Pipeline) fullSyncDue(t *queue.Task, accountID string) (acc store.Account, done bool, err error) {
	err = p.db.Update(func(tx *store.Tx) (err error) {
		if acc, err = tx.AccountGet(accountID); err != nil {
			return err
		}
		if done = !needsFullSync(acc); done {
			return t.Ack(tx)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return acc, false, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	return acc, done, err
}

// fullSyncHandOn ends a run that left work: in one transaction it acks the
// task and records the account's next run, which waits behind the full
// syncs of the other accounts already waiting (the outbox key keeps one
// per account).
func (p *Pipeline) fullSyncHandOn(t *queue.Task, accountID, trigger string) error {
	err := p.db.Update(func(tx *store.Tx) error {
		if err := t.Ack(tx); err != nil {
			return err
		}
		if _, err := tx.AccountGet(accountID); err != nil {
			return err
		}
		return p.enqueueFullSync(tx, accountID, trigger)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil // the account is gone, and its full sync with it
	}
	if err != nil {
		return fmt.Errorf("gmail: hand on the full sync of account %s: %w", accountID, err)
	}
	return nil
}

// fullSyncKey keys an account's one gmail:full-sync task.
func fullSyncKey(accountID string) string { return "gmail:full-sync:" + accountID }

// enqueueFullSync records the account's full sync unless one is waiting
// (or running: it does the next pass when it sees the new request).
func (p *Pipeline) enqueueFullSync(tx *store.Tx, accountID, trigger string) error {
	_, _, err := p.queue.Enqueue(tx, TypeFullSync, syncPayload{AccountID: accountID, Trigger: trigger},
		queue.Key(fullSyncKey(accountID)))
	return err
}

// A full sync mirrors the whole mailbox: the labels, the profile's history
// id, every message id with its thread id (messages.list, 500 a page),
// each message's metadata (fetched in parallel under the account's quota),
// stored as they come; messages no longer listed become tombstones; the
// watermark goes to the profile's history id, taken before the listing (or
// as far as the history sync beside it read from there). The history sync
// reads from that id while the full sync runs, so whatever changed during
// it reaches the mirror as events (each change carries its history id: a
// fetched snapshot never overwrites a newer change, nor a change a newer
// snapshot). The transaction that records it complete also schedules the
// user's label rules over the account (RuleApplier.ReclassifyAccount) and
// a history sync from the new watermark.
//
// It fetches thread by thread: the whole mailbox is listed first (5 units
// a page of 500 ids, about 1% of the work), its ids grouped by thread over
// the whole listing (store's FullSyncListAdd), then a thread whose listed
// messages cost more by messages.get than one threads.get is fetched with
// one threads.get, and the rest message by message (the prices in force:
// threads.get 40 against 20 a message under the 2026 list, so from three
// messages up; 10 against 5 under 2025's, from two). Grouping over the whole
// listing, not page by page, is what keeps a thread whose messages fall on
// several pages from being fetched twice. A threads.get answers the
// thread's messages as they are now, those the listing did not name (mail
// that came after it) among them: they are paid for, so they are stored
// too. The history sync beside the full sync, reading from the start's
// history id, brings them as message-added events all the same; those
// find them in the mirror and read nothing (their rules still run at
// once), and a message message-added read first is noted as this full
// sync's, which then skips it: a message is read once whichever of the
// two comes first (the mirror announces it, message.added, once, when
// its first snapshot is stored).
//
// It runs in slices (runs of gmail:full-sync): the first begins it
// (startFullSync); each lists what is left to list (FullSyncStart's
// PageToken), then fetches about FullSyncSlice messages from the groups
// left (a thread is not split), and drops each group in the transaction
// that stores its messages. So neither a slice's end nor a run handed back
// for quota, an error, a restart or kill -9 fetches a message twice: a
// group is either stored and gone or still there, and a message stored by
// any run of it is skipped (FullSyncFetched). A new request (resync)
// starts afresh.
//
// A full sync begun by an older mailroom kept its page listed last as ids
// without thread ids (FullSyncStart without Grouped): its first run here
// moves those ids to groups of one (fetched with messages.get, as they
// would have been) and lists the pages after it grouped by thread.

// startFullSync returns the full sync in progress that serves the
// account's latest request, or begins it: labels, the profile (its
// address must be the account's) and the start recorded.
func (p *Pipeline) startFullSync(ctx context.Context, gm *google.Gmail, acc store.Account) (store.FullSyncStart, error) {
	requested := acc.FullSyncRequested
	if s := acc.FullSyncStart; s != nil && s.Requested == requested {
		return *s, nil
	}
	if err := p.refreshLabels(ctx, gm, acc.ID); err != nil {
		return store.FullSyncStart{}, err
	}
	prof, err := gm.ProfileInfo(ctx)
	if err != nil {
		return store.FullSyncStart{}, googleerr.ToQueue(err)
	}
	if !sameAddress(prof.Email, acc.Email) {
		return store.FullSyncStart{}, queue.Permanent(fmt.Errorf("gmail: the token of account %s is for %s, not %s", acc.ID, prof.Email, acc.Email))
	}
	return p.beginFullSync(acc.ID, requested, prof)
}

// fullSyncSlice does one run's share of the full sync start: it lists
// what is left to list (each page recorded in its own transaction), then
// fetches and stores the groups left, about FullSyncSlice messages, until
// the slice is fetched or no group is left (last); while no other
// account's full sync is recorded, it goes on slice after slice, up to
// about FullSyncRunMax messages. Each chunk done is recorded in the
// transaction that stores its messages.
func (p *Pipeline) fullSyncSlice(ctx context.Context, gm *google.Gmail, accountID string, start store.FullSyncStart) (last bool, err error) {
	st, ok := start, true
	if !st.Grouped {
		if st, ok, err = p.updateStart(accountID, st.Requested, func(tx *store.Tx, s *store.FullSyncStart) error {
			s.Grouped = true
			return tx.FullSyncRegroup(accountID, s.Requested)
		}); err != nil || !ok {
			return false, err // !ok: a newer full sync began; the next run starts it
		}
	}
	for !st.ListedAll {
		if st, ok, err = p.listPage(ctx, gm, accountID, st); err != nil || !ok {
			return false, err
		}
	}
	groups := func(n int) (gs []store.FullSyncGroup, err error) {
		err = p.db.View(func(tx *store.Tx) (err error) { gs, err = tx.FullSyncGroups(accountID, n); return err })
		if err != nil {
			return nil, fmt.Errorf("gmail: full sync of account %s: %w", accountID, err)
		}
		return gs, nil
	}
	limit := p.cfg.FullSyncSlice
	for fetched := 0; fetched < limit; {
		gs, err := groups(limit - fetched)
		if err != nil || len(gs) == 0 {
			return err == nil, err
		}
		n, err := p.fetchAndStore(ctx, gm, accountID, st.Requested, gs)
		if errors.Is(err, errNewerFullSync) {
			return false, nil // the next run starts it
		}
		if err != nil {
			return false, err
		}
		fetched += n
		if fetched >= limit && limit+p.cfg.FullSyncSlice <= p.cfg.FullSyncRunMax && p.fullSyncAlone() {
			limit += p.cfg.FullSyncSlice
		}
	}
	gs, err := groups(1)
	return len(gs) == 0, err
}

// fullSyncAlone reports whether no other account's full sync is recorded:
// the running one's task is the queue's only record, so nobody waits for
// a turn.
func (p *Pipeline) fullSyncAlone() bool {
	n := 0
	_ = p.db.View(func(tx *store.Tx) error { n = tx.OutboxLen(fullSyncQueue); return nil })
	return n <= 1
}

// listPage lists the page at st.PageToken and records, in one
// transaction, its ids that no run stored yet in their threads' groups,
// the next page's token, and how many were stored before (Resumed). ok is
// false when a newer full sync began meanwhile.
func (p *Pipeline) listPage(ctx context.Context, gm *google.Gmail, accountID string, st store.FullSyncStart) (store.FullSyncStart, bool, error) {
	token := st.PageToken
	var refs []google.MessageRef
	var next string
	err := bulkCall(ctx, func() (err error) { refs, next, err = gm.ListMessages(ctx, token, listPageSize); return err })
	if err != nil && token != "" && queue.IsPermanent(err) && !errors.Is(err, google.ErrRevoked) {
		// Gmail no longer takes the token (it expired meanwhile): list
		// again from the first page; messages stored or grouped already
		// are skipped.
		p.log.Warn("full sync: Gmail refused the saved page token; listing from the first page",
			"account_id", accountID, "err", err)
		refs, next, err = gm.ListMessages(ctx, "", listPageSize)
	}
	if err != nil {
		return st, false, googleerr.ToQueue(err)
	}
	todo, err := p.notFetchedYet(accountID, refs)
	if err != nil {
		return st, false, err
	}
	listed := make([]store.FullSyncRef, len(todo))
	for i, r := range todo {
		listed[i] = store.FullSyncRef{ID: r.ID, ThreadID: r.ThreadID}
	}
	return p.updateStart(accountID, st.Requested, func(tx *store.Tx, s *store.FullSyncStart) error {
		s.PageToken, s.ListedAll = next, next == ""
		s.Resumed += len(refs) - len(todo)
		s.Listed += len(refs)
		return tx.FullSyncListAdd(accountID, listed)
	})
}

// updateStart changes the start of the full sync serving request
// requested, and its records (change), in one transaction, and returns
// the start; ok is false when a newer full sync began meanwhile (nothing
// is changed).
func (p *Pipeline) updateStart(accountID string, requested uint64, change func(*store.Tx, *store.FullSyncStart) error) (st store.FullSyncStart, ok bool, err error) {
	err = p.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		s := a.FullSyncStart
		if ok = s != nil && s.Requested == requested; !ok {
			return nil
		}
		if err := change(tx, s); err != nil {
			return err
		}
		st = *s
		return tx.AccountPut(a)
	})
	if errors.Is(err, store.ErrNotFound) {
		return st, false, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return st, false, fmt.Errorf("gmail: full sync of account %s: record its progress: %w", accountID, err)
	}
	return st, ok, nil
}

// finishFullSync records the full sync in progress complete, in one
// transaction with the task's ack: the messages it did not store (not
// listed, or gone when fetched) that are no newer than its start become
// tombstones, the watermark goes to its start's history id, a history sync
// and the user's rules are scheduled over the account, run is recorded
// (from the full sync's start, with its counts), and when another full
// sync was requested meanwhile its first run is recorded.
func (p *Pipeline) finishFullSync(t *queue.Task, accountID string, run *store.SyncRun) error {
	err := p.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		st := a.FullSyncStart
		if st == nil {
			return t.Ack(tx) // finished by another delivery of the task
		}
		if err := tombstoneUnlisted(tx, accountID, st.HistoryID); err != nil {
			return err
		}
		a.HistoryID = max(a.HistoryID, st.HistoryID, st.LiveHistoryID)
		a.FullSyncCompleted = max(a.FullSyncCompleted, st.Requested)
		a.FullSyncStart = nil
		if a.HistoryID != a.StaleHistoryID {
			a.StaleHistoryID = 0
		}
		if err := tx.FullSyncForget(accountID); err != nil {
			return err
		}
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		run.StartedAt, run.FinishedAt, run.ToHistoryID = st.At, p.now(), st.HistoryID
		run.Messages, run.Resumed = st.Fetched, st.Resumed
		if err := tx.SyncRunAdd(accountID, *run); err != nil {
			return err
		}
		// The history since the watermark (changes the history sync beside
		// it has not read yet) and the account's ready state.
		if err := p.enqueueSync(tx, a.ID, triggerFull); err != nil {
			return err
		}
		// The mail just mirrored never passed message-added: the user's
		// rules reach it through a reclassify.
		if err := p.rules.ReclassifyAccount(tx, a.UserID, a.ID); err != nil {
			return err
		}
		if err := t.Ack(tx); err != nil {
			return err
		}
		if needsFullSync(a) {
			return p.enqueueFullSync(tx, a.ID, triggerResync)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return fmt.Errorf("gmail: finish full sync of account %s: %w", accountID, err)
	}
	return nil
}

// tombstoneUnlisted makes a tombstone, at profileHID, of every live
// message no newer than profileHID that the full sync in progress did not
// store: Gmail did not list it, or it was gone when fetched.
func tombstoneUnlisted(tx *store.Tx, accountID string, profileHID uint64) error {
	var ids []string
	err := tx.EachMessage(accountID, func(m store.Message) error {
		if !m.Deleted && m.HistoryID <= profileHID {
			ids = append(ids, m.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	stored, err := tx.FullSyncFetched(accountID, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if stored[id] {
			continue
		}
		m, err := tx.MessageGet(accountID, id)
		if err != nil {
			return err
		}
		m.ApplyDelete(profileHID)
		if err := tx.MessagePut(accountID, m); err != nil {
			return err
		}
	}
	return nil
}

// fullSyncProjectWait is the longest one Gmail call of a full sync waits
// in its task while the project's window is spent
// (google.ErrProjectQuotaWait): no account's full sync could run
// meanwhile, and a run handed back would come back after the runs of
// other accounts that were enqueued behind it, so its account would lose
// its turn. Other quota waits hand the run back as every task does.
const fullSyncProjectWait = 2 * time.Minute

// bulkCall runs fn, a Gmail call of a full sync, again after each wait for
// the project's window, up to fullSyncProjectWait.
func bulkCall(ctx context.Context, fn func() error) error {
	waited := time.Duration(0)
	for {
		err := googleerr.ToQueue(fn())
		wait, limited := queue.RetryAfter(err)
		if !limited || !errors.Is(err, google.ErrProjectQuotaWait) || waited+wait > fullSyncProjectWait {
			return err
		}
		if err := queue.Wait(ctx, wait); err != nil {
			return err
		}
		waited += wait
	}
}

// storeChunk is how many fetched messages a full sync stores in one
// transaction while it fetches more.
const storeChunk = 25

// fetchAndStore fetches the messages of groups not stored yet, each group
// of two or more with one threads.get and a lone message with
// messages.get, FullSyncWorkers groups in parallel, and stores them as
// they come, about storeChunk messages in a transaction that also drops
// their groups. An error (a run handed back for quota among them) stops
// further fetches, lets those in flight end and stores every group fetched
// before it returns, so a later run fetches none of them again. Messages
// deleted meanwhile (404, or missing from their thread) are left out; the
// messages a threads.get answers that the listing did not name are kept
// (see the full sync's description above). n is how many messages it
// fetched. While a rule of the user reads bodies, each message is read
// with its body (a messages.get of format full) and stored with the
// verdicts of those rules (store.Message.BodyVerdicts): the label pass
// after the full sync then reads no body again (a metadata read and a
// body read were two reads of each message, 80 units at the 2026 prices
// against 60).
func (p *Pipeline) fetchAndStore(ctx context.Context, gm *google.Gmail, accountID string, requested uint64, groups []store.FullSyncGroup) (n int, err error) {
	body, err := p.rules.BodyRules(ctx, accountID)
	if err != nil {
		return 0, fmt.Errorf("gmail: full sync of account %s: %w", accountID, err)
	}
	var ids []string
	for _, g := range groups {
		ids = append(ids, g.IDs...)
	}
	var stored map[string]bool
	if err := p.db.View(func(tx *store.Tx) (err error) { stored, err = tx.FullSyncFetched(accountID, ids); return err }); err != nil {
		return 0, err
	}
	type result struct {
		seq     uint64
		msgs    []google.Message
		resumed int
		err     error
	}
	results := make(chan result, len(groups)) // workers never wait for the store
	next := make(chan store.FullSyncGroup)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(p.cfg.FullSyncWorkers, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range next {
				todo := slices.DeleteFunc(slices.Clone(g.IDs), func(id string) bool { return stored[id] })
				msgs, err := p.fetchGroup(ctx, gm, accountID, g.ThreadID, todo, body != nil)
				if err != nil {
					failed.Store(true)
				}
				results <- result{g.Seq, msgs, len(g.IDs) - len(todo), err}
			}
		}()
	}
	go func() {
		defer close(next)
		for _, g := range groups {
			if failed.Load() || ctx.Err() != nil {
				return
			}
			next <- g
		}
	}()
	go func() { wg.Wait(); close(results) }()
	var fetchErr, storeErr error
	var batch []google.Message
	var done []uint64
	resumed := 0
	flush := func() {
		if storeErr == nil && len(done) > 0 {
			if storeErr = p.storeFetched(accountID, requested, snapshots(batch, body), done, resumed); storeErr != nil {
				failed.Store(true)
			}
		}
		batch, done, resumed = batch[:0], done[:0], 0
	}
	for r := range results {
		if r.err != nil {
			if fetchErr == nil {
				fetchErr = r.err
			}
			continue
		}
		batch, done, resumed = append(batch, r.msgs...), append(done, r.seq), resumed+r.resumed
		n += len(r.msgs)
		if len(batch) >= storeChunk {
			flush()
		}
	}
	flush()
	if storeErr != nil {
		return n, storeErr
	}
	if fetchErr == nil {
		// Cancelled: the groups not sent stay for the next run.
		fetchErr = ctx.Err()
	}
	return n, fetchErr
}

// fetchGroup fetches the listed messages ids of a thread (threadID empty:
// not known), leaving out those gone: with one threads.get where that costs
// no more than a messages.get of each at the prices in force
// (google.Prices.UseThread: two or more at both lists, a tie at two under
// 2026's), each else with messages.get. A threads.get's answer is kept
// whole: the thread's messages that came after the listing too. withBody:
// each with a messages.get of its body (Google's table prices a body read
// by messages.get only, so no threads.get is taken to cost less).
func (p *Pipeline) fetchGroup(ctx context.Context, gm *google.Gmail, accountID, threadID string, ids []string, withBody bool) ([]google.Message, error) {
	var out []google.Message
	if threadID != "" && !withBody && p.google.Prices().UseThread(len(ids)) {
		err := bulkCall(ctx, func() (err error) { out, err = gm.GetThread(ctx, threadID); return err })
		if errors.Is(err, google.ErrNotFound) {
			return nil, nil // the whole thread was deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		p.metrics.fetched.Add(float64(len(out)))
		return out, nil
	}
	for _, id := range ids {
		var m google.Message
		err := bulkCall(ctx, func() (err error) { m, err = p.fetch(ctx, gm, accountID, id, withBody); return err })
		if errors.Is(err, google.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// fetch gets one message under the account's quota.
func (p *Pipeline) fetch(ctx context.Context, gm *google.Gmail, accountID, id string, withBody bool) (google.Message, error) {
	m, err := gm.GetMessage(ctx, id, withBody)
	if err == nil {
		p.metrics.fetched.Inc()
	}
	return m, googleerr.ToQueue(err)
}

// errNewerFullSync: a newer full sync began while a run of an older one
// fetched (its records are not the older one's to change).
var errNewerFullSync = errors.New("gmail: a newer full sync began")

// storeFetched merges fetched snapshots into the stored messages and, when
// the full sync serving request requested is still the one in progress,
// notes them as fetched, drops their groups (done) and counts those of
// their messages an earlier run had stored (resumed), in one transaction.
// Else it merges them only and answers errNewerFullSync: the newer full
// sync's start is later than these snapshots, so it fetches them again
// (the merge is safe either way: the newer attribute wins).
func (p *Pipeline) storeFetched(accountID string, requested uint64, msgs []store.Message, done []uint64, resumed int) error {
	current := false
	err := p.db.Update(func(tx *store.Tx) error {
		ids := make([]string, 0, len(msgs))
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		s := a.FullSyncStart
		current = s != nil && s.Requested == requested
		if current {
			s.Fetched += len(msgs)
			s.Resumed += resumed
			if err := tx.AccountPut(a); err != nil {
				return err
			}
		}
		for _, f := range msgs {
			m, err := tx.MessageGet(accountID, f.ID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if m.MergeFetched(f) {
				if err := tx.MessagePut(accountID, m); err != nil {
					return err
				}
			}
			ids = append(ids, f.ID)
		}
		if !current {
			return nil
		}
		if err := tx.FullSyncNoteFetched(accountID, ids); err != nil {
			return err
		}
		return tx.FullSyncGroupsDone(accountID, done)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err == nil && !current {
		return errNewerFullSync
	}
	return err
}

// beginFullSync returns where the full sync serving request requested
// began: recorded by an earlier, interrupted run, or now, at historyID.
func (p *Pipeline) beginFullSync(accountID string, requested uint64, prof google.Profile) (store.FullSyncStart, error) {
	var start store.FullSyncStart
	err := p.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		if s := a.FullSyncStart; s != nil && s.Requested == requested {
			start = *s
			return nil
		}
		if err := tx.FullSyncForget(accountID); err != nil {
			return err
		}
		start = store.FullSyncStart{Requested: requested, HistoryID: prof.HistoryID, At: p.now().UTC(), Messages: prof.MessagesTotal, Grouped: true}
		// The history sync recorded this far already (beside an older
		// full sync, or from the account's watermark until this one began).
		start.LiveHistoryID = a.HistoryID
		if old := a.FullSyncStart; old != nil {
			start.LiveHistoryID = max(start.LiveHistoryID, old.LiveHistoryID)
		}
		a.FullSyncStart = &start
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		if a.WantedHistoryID > max(start.HistoryID, start.LiveHistoryID) {
			// Pushes came while no full sync start was there to read from.
			return p.enqueueSync(tx, a.ID, triggerPush)
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return start, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return start, fmt.Errorf("gmail: begin full sync of account %s: %w", accountID, err)
	}
	if start.HistoryID != prof.HistoryID {
		p.log.Info("resuming an interrupted full sync", "account_id", accountID, "started_at", start.At, "history_id", start.HistoryID)
	}
	return start, nil
}

// notFetchedYet returns the refs the full sync in progress has not stored.
func (p *Pipeline) notFetchedYet(accountID string, refs []google.MessageRef) ([]google.MessageRef, error) {
	ids := make([]string, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	var done map[string]bool
	if err := p.db.View(func(tx *store.Tx) (err error) { done, err = tx.FullSyncFetched(accountID, ids); return err }); err != nil {
		return nil, err
	}
	if len(done) == 0 {
		return refs, nil
	}
	todo := make([]google.MessageRef, 0, len(refs)-len(done))
	for _, r := range refs {
		if !done[r.ID] {
			todo = append(todo, r)
		}
	}
	return todo, nil
}

// snapshots are the fetched messages as the mirror stores them, each with
// the verdicts of the rules that read bodies when body is set (their
// bodies were read for them).
func snapshots(fetched []google.Message, body *rules.BodyRules) []store.Message {
	out := make([]store.Message, len(fetched))
	for i, f := range fetched {
		out[i] = snapshot(f)
		if body != nil {
			out[i].BodyVerdicts = body.Decide(out[i], f.Body)
		}
	}
	return out
}

// snapshot converts a fetched message to the store's model.
func snapshot(f google.Message) store.Message {
	return store.Message{
		ID: f.ID, ThreadID: f.ThreadID, From: f.From, To: f.To, Cc: f.Cc, Subject: f.Subject,
		Snippet: f.Snippet, Date: f.Date, LabelIDs: f.LabelIDs, HistoryID: f.HistoryID,
	}
}

// fullSyncDead is the full sync's dead-letter hook: the account goes to
// status error, saying why and what to do, in the transaction that moves
// the task (an account left "syncing" with nothing queued would hide it).
func (p *Pipeline) fullSyncDead(tx *store.Tx, t *queue.Task) error {
	var pl syncPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return nil // a payload that names no account
	}
	acc, err := tx.AccountGet(pl.AccountID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil || !active(acc) {
		return err
	}
	cause := queue.Truncate(acc.LastError, 300)
	if cause == "" {
		cause = "not recorded"
	}
	acc.Status, acc.FullSyncDead = store.AccountError, true
	acc.StatusReason = "The full sync failed and went to the dead letters (last error: " +
		cause + "). Fix the cause, then resync the account or redrive the full sync from the dead letters."
	return tx.AccountPut(acc)
}

// revive takes an account whose full sync went to the dead letters back to
// syncing (a resync, or the full sync's redrive, starts it again).
func revive(acc *store.Account) {
	if acc.FullSyncDead {
		acc.Status, acc.StatusReason, acc.FullSyncDead = store.AccountSyncing, "", false
	}
}

// reviveAccount revives the account in its own transaction.
func (p *Pipeline) reviveAccount(id string) error {
	return p.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(id)
		if errors.Is(err, store.ErrNotFound) || err == nil && !acc.FullSyncDead {
			return nil // deleted meanwhile (the full sync finds it gone) or revived
		}
		if err != nil {
			return err
		}
		revive(&acc)
		return tx.AccountPut(acc)
	})
}
