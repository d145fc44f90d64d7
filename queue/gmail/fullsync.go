package gmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
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
	_, _, err := p.queue.Enqueue(tx, queue.TypeGmailFullSync, syncPayload{AccountID: accountID, Trigger: trigger},
		queue.Key(fullSyncKey(accountID)))
	return err
}

// A full sync mirrors the whole mailbox: the labels, the profile's history
// id, every message id (messages.list), each message's metadata
// (messages.get, in parallel under the account's quota), stored as they
// come; messages no longer listed become tombstones; the watermark goes to
// the profile's history id, taken before the listing (or as far as the
// history sync beside it read from there). The history sync reads from
// that id while the full sync runs, so whatever changed during it reaches
// the mirror as events (each change carries its history id: a fetched
// snapshot never overwrites a newer change, nor a change a newer
// snapshot). The transaction that records it complete also schedules the
// user's label rules over the account (RuleApplier.ReclassifyAccount) and
// a history sync from the new watermark.
//
// It runs in slices (runs of gmail:full-sync): the first begins it
// (startFullSync); each goes on from the list page the last one ended at
// (FullSyncStart.PageToken) and fetches only the messages no run of it
// stored yet (FullSyncFetched), so neither a slice's end nor a run handed
// back for quota, an error or a restart fetches a message twice. A new
// request (resync) starts afresh.

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
		return store.FullSyncStart{}, err
	}
	if !sameAddress(prof.Email, acc.Email) {
		return store.FullSyncStart{}, queue.Permanent(fmt.Errorf("gmail: the token of account %s is for %s, not %s", acc.ID, prof.Email, acc.Email))
	}
	return p.beginFullSync(acc.ID, requested, prof)
}

// fullSyncSlice does one run's share of the full sync start: it fetches
// and stores up to FullSyncSlice messages no run stored yet, taking them
// from the page listed last (store's FullSyncListed) and listing the next
// page (of 500 ids, one messages.list) when that is done, until the slice
// is fetched or the last page is done (last). Each chunk done is recorded
// in its own transaction after its messages are stored.
func (p *Pipeline) fullSyncSlice(ctx context.Context, gm *google.Gmail, accountID string, start store.FullSyncStart) (last bool, err error) {
	st, fetched := start, 0
	var listed []string
	if err := p.db.View(func(tx *store.Tx) (err error) { listed, err = tx.FullSyncListed(accountID, st.Requested); return err }); err != nil {
		return false, fmt.Errorf("gmail: full sync of account %s: %w", accountID, err)
	}
	for fetched < p.cfg.FullSyncSlice {
		var ok bool
		if len(listed) == 0 {
			if st.ListedAll {
				return true, nil
			}
			if st, listed, ok, err = p.listPage(ctx, gm, accountID, st); err != nil || !ok {
				return false, err // !ok: a newer full sync began; the next run starts it
			}
			continue
		}
		chunk := listed[:min(len(listed), p.cfg.FullSyncSlice-fetched)]
		todo, err := p.notFetchedYet(accountID, refsOf(chunk))
		if err != nil {
			return false, err
		}
		if err := p.fetchAndStore(ctx, gm, accountID, todo); err != nil {
			return false, err
		}
		if st, listed, ok, err = p.chunkDone(accountID, st.Requested, len(chunk), len(chunk)-len(todo)); err != nil || !ok {
			return false, err
		}
		fetched += len(todo)
	}
	return st.ListedAll && len(listed) == 0, nil
}

func refsOf(ids []string) []google.MessageRef {
	refs := make([]google.MessageRef, len(ids))
	for i, id := range ids {
		refs[i] = google.MessageRef{ID: id}
	}
	return refs
}

// listPage lists the page at st.PageToken and records, in one
// transaction, its ids that no run stored yet as the page to fetch from,
// the next page's token, and how many were stored before (Resumed). ok is
// false when a newer full sync began meanwhile.
func (p *Pipeline) listPage(ctx context.Context, gm *google.Gmail, accountID string, st store.FullSyncStart) (store.FullSyncStart, []string, bool, error) {
	token := st.PageToken
	var refs []google.MessageRef
	var next string
	err := bulkCall(ctx, func() (err error) { refs, next, err = gm.ListMessages(ctx, token, listPageSize); return err })
	if err != nil && token != "" && queue.IsPermanent(err) && !errors.Is(err, google.ErrRevoked) {
		// Gmail no longer takes the token (it expired meanwhile): list
		// again from the first page; stored messages are skipped.
		p.log.Warn("full sync: Gmail refused the saved page token; listing from the first page",
			"account_id", accountID, "err", err)
		refs, next, err = gm.ListMessages(ctx, "", listPageSize)
	}
	if err != nil {
		return st, nil, false, err
	}
	todo, err := p.notFetchedYet(accountID, refs)
	if err != nil {
		return st, nil, false, err
	}
	ids := make([]string, len(todo))
	for i, r := range todo {
		ids[i] = r.ID
	}
	return p.updateStart(accountID, st.Requested, func(s *store.FullSyncStart, listed []string) []string {
		s.PageToken, s.ListedAll = next, next == ""
		s.Resumed += len(refs) - len(todo)
		return ids
	})
}

// chunkDone records the first n ids of the listed page done, resumed of
// them found stored by an earlier run.
func (p *Pipeline) chunkDone(accountID string, requested uint64, n, resumed int) (store.FullSyncStart, []string, bool, error) {
	return p.updateStart(accountID, requested, func(s *store.FullSyncStart, listed []string) []string {
		s.Resumed += resumed
		return listed[min(n, len(listed)):]
	})
}

// updateStart changes the start of the full sync serving request
// requested, and the ids of its page listed last (change returns them), in
// one transaction, and returns both; ok is false when a newer full sync
// began meanwhile (nothing is changed).
func (p *Pipeline) updateStart(accountID string, requested uint64, change func(*store.FullSyncStart, []string) []string) (st store.FullSyncStart, listed []string, ok bool, err error) {
	err = p.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		s := a.FullSyncStart
		if ok = s != nil && s.Requested == requested; !ok {
			return nil
		}
		if listed, err = tx.FullSyncListed(accountID, requested); err != nil {
			return err
		}
		listed = change(s, listed)
		st = *s
		if err := tx.FullSyncListedPut(accountID, requested, listed); err != nil {
			return err
		}
		return tx.AccountPut(a)
	})
	if errors.Is(err, store.ErrNotFound) {
		return st, nil, false, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return st, nil, false, fmt.Errorf("gmail: full sync of account %s: record its progress: %w", accountID, err)
	}
	return st, listed, ok, nil
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
		err := fn()
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

// fetchAndStore gets the metadata of refs with FullSyncWorkers in parallel
// and stores them as they come, storeChunk in a transaction. An error (a
// run handed back for quota among them) stops further fetches, lets those
// in flight end and stores every message fetched before it returns, so a
// later run fetches none of them again. Messages deleted meanwhile (404)
// are left out.
func (p *Pipeline) fetchAndStore(ctx context.Context, gm *google.Gmail, accountID string, refs []google.MessageRef) error {
	type result struct {
		m   google.Message
		err error
	}
	results := make(chan result, len(refs)) // workers never wait for the store
	next := make(chan string)
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range min(p.cfg.FullSyncWorkers, len(refs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				var m google.Message
				err := bulkCall(ctx, func() (err error) { m, err = p.fetch(ctx, gm, accountID, id, false); return err })
				if err != nil && !errors.Is(err, google.ErrNotFound) {
					failed.Store(true)
				}
				results <- result{m, err}
			}
		}()
	}
	go func() {
		defer close(next)
		for _, r := range refs {
			if failed.Load() || ctx.Err() != nil {
				return
			}
			next <- r.ID
		}
	}()
	go func() { wg.Wait(); close(results) }()
	var fetchErr, storeErr error
	batch := make([]google.Message, 0, storeChunk)
	for r := range results {
		switch {
		case r.err == nil:
			batch = append(batch, r.m)
		case errors.Is(r.err, google.ErrNotFound):
		case fetchErr == nil:
			fetchErr = r.err
		}
		if len(batch) == storeChunk && storeErr == nil {
			if storeErr = p.storeFetched(accountID, batch); storeErr != nil {
				failed.Store(true)
			}
			batch = batch[:0]
		}
	}
	if storeErr == nil && len(batch) > 0 {
		storeErr = p.storeFetched(accountID, batch)
	}
	if storeErr != nil {
		return storeErr
	}
	return fetchErr
}

// fetch gets one message under the account's quota.
func (p *Pipeline) fetch(ctx context.Context, gm *google.Gmail, accountID, id string, withBody bool) (google.Message, error) {
	m, err := gm.GetMessage(ctx, id, withBody)
	if err == nil {
		p.metrics.fetched.Inc()
	}
	return m, err
}

// storeFetched merges fetched snapshots into the stored messages and
// notes them as fetched by the full sync in progress, in one transaction.
func (p *Pipeline) storeFetched(accountID string, msgs []google.Message) error {
	err := p.db.Update(func(tx *store.Tx) error {
		ids := make([]string, 0, len(msgs))
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		if s := a.FullSyncStart; s != nil && len(msgs) > 0 {
			s.Fetched += len(msgs)
			if err := tx.AccountPut(a); err != nil {
				return err
			}
		}
		for _, f := range msgs {
			m, err := tx.MessageGet(accountID, f.ID)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			if m.MergeFetched(snapshot(f)) {
				if err := tx.MessagePut(accountID, m); err != nil {
					return err
				}
			}
			ids = append(ids, f.ID)
		}
		return tx.FullSyncNoteFetched(accountID, ids)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
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
		start = store.FullSyncStart{Requested: requested, HistoryID: prof.HistoryID, At: p.now().UTC(), Messages: prof.MessagesTotal}
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
