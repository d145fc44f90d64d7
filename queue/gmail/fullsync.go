package gmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// handleFullSync is gmail:full-sync: the account's full sync at bulk
// priority, in its own task and queue so that the history sync (gmail:sync)
// goes on beside it: pushes that come during a full sync have their history
// read and their events run at live priority, from the history id the full
// sync started at. Both write the mirror with per-attribute history ids,
// so whatever the interleaving the newer state of each attribute wins. A
// full sync requested while one runs (a resync, history too old) is done
// by another pass of the same task.
func (p *Pipeline) handleFullSync(ctx context.Context, t *queue.Task) error {
	var pl syncPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return queue.Permanent(fmt.Errorf("gmail: full sync: bad payload: %w", err))
	}
	acc, err := p.account(pl.AccountID)
	if err != nil {
		return err
	}
	if !active(acc) {
		return queue.Stale("account " + acc.ID + " is " + acc.Status)
	}
	acc, done, err := p.fullSyncRan(t, acc.ID, nil)
	if err != nil || done {
		return err // no full sync is due (one that ran took this request)
	}
	ctx = google.WithPriority(ctx, google.PriorityBulk)
	trigger := pl.Trigger
	for {
		run := store.SyncRun{Kind: "full", Trigger: trigger, StartedAt: p.now(), FromHistoryID: acc.HistoryID}
		gm, err := p.client(ctx, acc)
		if err == nil {
			err = p.fullSync(ctx, gm, acc, &run)
		}
		if err != nil {
			return p.syncFailed(acc.ID, run, err)
		}
		p.metrics.syncs.WithLabelValues(run.Kind, "ok").Inc()
		p.log.Debug("full sync done", "account_id", acc.ID, "task_id", t.ID, "messages", run.Messages,
			"resumed", run.Resumed, "history_id", run.ToHistoryID)
		run.FinishedAt = p.now()
		if acc, done, err = p.fullSyncRan(t, acc.ID, &run); err != nil || done {
			return err
		}
		trigger = triggerResync
	}
}

// fullSyncRan records a finished full sync run (nil: none ran) and, in the
// same transaction, acks the task unless another full sync is due (a
// request that came meanwhile found this task and left the pass to it).
func (p *Pipeline) fullSyncRan(t *queue.Task, accountID string, run *store.SyncRun) (acc store.Account, done bool, err error) {
	err = p.db.Update(func(tx *store.Tx) (err error) {
		if acc, err = tx.AccountGet(accountID); err != nil {
			return err
		}
		if run != nil {
			if err := tx.SyncRunAdd(accountID, *run); err != nil {
				return err
			}
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

// fullSyncKey keys an account's one gmail:full-sync task.
func fullSyncKey(accountID string) string { return "gmail:full-sync:" + accountID }

// enqueueFullSync records the account's full sync unless one is waiting
// (or running: it does the next pass when it sees the new request).
func (p *Pipeline) enqueueFullSync(tx *store.Tx, accountID, trigger string) error {
	_, _, err := p.queue.Enqueue(tx, queue.TypeGmailFullSync, syncPayload{AccountID: accountID, Trigger: trigger},
		queue.Key(fullSyncKey(accountID)))
	return err
}

// fullSync mirrors the whole mailbox: the labels, the profile's history
// id, every message id (messages.list), each message's metadata
// (messages.get, in parallel under the account's quota), stored in batches;
// messages no longer listed become tombstones; the watermark goes to the
// profile's history id, taken before the listing (or as far as the history
// sync beside it read from there). The history sync reads from that id
// while the full sync runs, so whatever changed during it reaches the
// mirror as events (each change carries its history id: a fetched snapshot
// never overwrites a newer change, nor a change a newer snapshot). The
// transaction that records it complete also schedules the user's label
// rules over the account (RuleApplier.ReclassifyAccount) and a history
// sync from the new watermark.
//
// An interrupted full sync (a restart, an error) goes on where it stopped:
// the run that resumes it keeps the first run's history id and fetches
// only the messages no run of it stored yet (it still lists them all, for
// the tombstones). A new request (resync) starts afresh.
func (p *Pipeline) fullSync(ctx context.Context, gm *google.Gmail, acc store.Account, run *store.SyncRun) error {
	requested := acc.FullSyncRequested
	if err := p.refreshLabels(ctx, gm, acc.ID); err != nil {
		return err
	}
	prof, err := gm.ProfileInfo(ctx)
	if err != nil {
		return err
	}
	if !sameAddress(prof.Email, acc.Email) {
		return queue.Permanent(fmt.Errorf("gmail: the token of account %s is for %s, not %s", acc.ID, prof.Email, acc.Email))
	}
	start, err := p.beginFullSync(acc.ID, requested, prof)
	if err != nil {
		return err
	}
	profileHID := start.HistoryID
	seen, err := p.listAndFetch(ctx, gm, acc.ID, run)
	if err != nil {
		return err
	}
	if err := p.finishFullSync(acc.ID, requested, profileHID, seen); err != nil {
		return err
	}
	run.ToHistoryID = profileHID
	return nil
}

// listAndFetch lists every message id of the mailbox, page by page, and
// fetches and stores the messages no run of the full sync stored yet,
// counting them in run. It returns the ids listed.
func (p *Pipeline) listAndFetch(ctx context.Context, gm *google.Gmail, accountID string, run *store.SyncRun) (map[string]bool, error) {
	seen := map[string]bool{}
	token := ""
	for {
		refs, next, err := gm.ListMessages(ctx, token, listPageSize)
		if err != nil {
			return nil, err
		}
		todo, err := p.notFetchedYet(accountID, refs)
		if err != nil {
			return nil, err
		}
		msgs, err := p.fetchAll(ctx, gm, accountID, todo)
		if err != nil {
			return nil, err
		}
		if err := p.storeFetched(accountID, msgs); err != nil {
			return nil, err
		}
		for _, r := range refs {
			seen[r.ID] = true
		}
		run.Messages += len(msgs)
		run.Resumed += len(refs) - len(todo)
		if next == "" {
			break
		}
		token = next
	}
	return seen, nil
}

// finishFullSync records the full sync serving request requested complete,
// in one transaction: the messages not listed (seen) that are no newer
// than profileHID become tombstones, the watermark goes to profileHID, and
// the user's rules are scheduled over the account.
func (p *Pipeline) finishFullSync(accountID string, requested, profileHID uint64, seen map[string]bool) error {
	err := p.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		var gone []store.Message
		err = tx.EachMessage(accountID, func(m store.Message) error {
			if !seen[m.ID] && !m.Deleted && m.HistoryID <= profileHID {
				gone = append(gone, m)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, m := range gone {
			m.ApplyDelete(profileHID)
			if err := tx.MessagePut(accountID, m); err != nil {
				return err
			}
		}
		a.HistoryID = max(a.HistoryID, profileHID)
		if st := a.FullSyncStart; st != nil {
			a.HistoryID = max(a.HistoryID, st.LiveHistoryID)
		}
		a.FullSyncCompleted = max(a.FullSyncCompleted, requested)
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
		// The history since the watermark (changes the history sync beside
		// it has not read yet) and the account's ready state.
		if err := p.enqueueSync(tx, a.ID, triggerFull); err != nil {
			return err
		}
		// The mail just mirrored never passed message-added: the user's
		// rules reach it through a reclassify.
		return p.rules.ReclassifyAccount(tx, a.UserID, a.ID)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return fmt.Errorf("gmail: finish full sync of account %s: %w", accountID, err)
	}
	return nil
}

// fetchAll gets the metadata of refs with FullSyncWorkers in parallel.
// Messages deleted meanwhile (404) are left out.
func (p *Pipeline) fetchAll(ctx context.Context, gm *google.Gmail, accountID string, refs []google.MessageRef) ([]google.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := make([]google.Message, len(refs))
	ok := make([]bool, len(refs))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	next := make(chan int)
	for range min(p.cfg.FullSyncWorkers, len(refs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				m, err := p.fetch(ctx, gm, accountID, refs[i].ID, false)
				switch {
				case err == nil:
					out[i], ok[i] = m, true
				case errors.Is(err, google.ErrNotFound):
				default:
					mu.Lock()
					if firstErr == nil {
						firstErr = err
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range refs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	msgs := make([]google.Message, 0, len(refs))
	for i := range out {
		if ok[i] {
			msgs = append(msgs, out[i])
		}
	}
	return msgs, nil
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
