package gmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// maxSyncPasses bounds the history passes of one sync task that keeps
// finding a push newer than what Gmail reported; after them the wanted id
// is left to a follow-up sync.
const maxSyncPasses = 5

// listPageSize is messages.list's page size during a full sync.
const listPageSize = 500

// followUpDelay is the wait before a follow-up sync when Gmail's history
// lagged behind a push.
const followUpDelay = 2 * time.Second

// handleSync is gmail:sync: history since the watermark (or a full sync),
// classified into event tasks, until the watermark reaches what pushes
// announced. The task's completion commits with the final check of the
// wanted history id, so a push that arrives during the sync is never lost:
// it either sees this task's record (and this task sees its id) or records
// a new sync.
func (p *Pipeline) handleSync(ctx context.Context, t *queue.Task) error {
	var pl syncPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return queue.Permanent(fmt.Errorf("gmail: sync: bad payload: %w", err))
	}
	acc, err := p.account(pl.AccountID)
	if err != nil {
		return err
	}
	if !active(acc) {
		return queue.Stale("account " + acc.ID + " is " + acc.Status)
	}
	log := p.log.With("account_id", acc.ID, "task_id", t.ID, "attempt", t.Attempt)
	gm, err := p.client(ctx, acc)
	if err != nil {
		return p.syncFailed(acc.ID, store.SyncRun{Kind: "history", Trigger: pl.Trigger, StartedAt: p.now()}, err)
	}
	trigger := pl.Trigger
	for pass := 1; ; pass++ {
		run := store.SyncRun{Trigger: trigger, StartedAt: p.now(), FromHistoryID: acc.HistoryID}
		if needsFullSync(acc) {
			run.Kind = "full"
			err = p.fullSync(google.WithPriority(ctx, google.PriorityBulk), gm, acc, &run)
		} else {
			run.Kind = "history"
			err = p.historySync(google.WithPriority(ctx, google.PriorityLive), gm, acc, &run)
			if errors.Is(err, google.ErrHistoryTooOld) {
				log.Info("history too old; doing a full sync", "from_history_id", acc.HistoryID)
				p.metrics.syncs.WithLabelValues(run.Kind, "too_old").Inc()
				run.FinishedAt, run.Error = p.now(), "history too old: a full sync follows"
				if acc, err = p.requestFullSync(acc.ID, run); err != nil {
					return err
				}
				trigger = "too_old"
				continue
			}
		}
		if err != nil {
			return p.syncFailed(acc.ID, run, err)
		}
		done, next, err := p.finishSync(t, acc.ID, run, pass)
		if err != nil {
			return err
		}
		p.metrics.syncs.WithLabelValues(run.Kind, "ok").Inc()
		log.Debug("sync pass done", "kind", run.Kind, "records", run.Records, "events", run.Events,
			"messages", run.Messages, "history_id", run.ToHistoryID, "done", done)
		if done {
			return nil
		}
		acc, trigger = next, triggerPush
	}
}

func (p *Pipeline) now() time.Time { return p.cfg.Now().UTC() }

// account loads an account for a task; a missing one is a permanent error.
func (p *Pipeline) account(id string) (store.Account, error) {
	var acc store.Account
	err := p.db.View(func(tx *store.Tx) (err error) {
		acc, err = tx.AccountGet(id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return acc, queue.Permanent(fmt.Errorf("%w: %w", ErrAccountGone, err))
	}
	return acc, err
}

func needsFullSync(acc store.Account) bool {
	return acc.HistoryID == 0 || acc.FullSyncRequested > acc.FullSyncCompleted
}

// requestFullSync marks the account for a full sync, records the run that
// found history too old, and returns the account.
func (p *Pipeline) requestFullSync(id string, run store.SyncRun) (store.Account, error) {
	var acc store.Account
	err := p.db.Update(func(tx *store.Tx) (err error) {
		if acc, err = tx.AccountGet(id); err != nil {
			return err
		}
		acc.FullSyncRequested++
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		return tx.SyncRunAdd(id, run)
	})
	if errors.Is(err, store.ErrNotFound) {
		return acc, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, id))
	}
	return acc, err
}

// syncFailed records a failed run on the account and returns err for the
// queue (a revoked grant also marks the account as needing the user).
func (p *Pipeline) syncFailed(accountID string, run store.SyncRun, cause error) error {
	if errors.Is(cause, context.Canceled) {
		return cause
	}
	if _, limited := queue.RetryAfter(cause); limited {
		return cause
	}
	p.metrics.syncs.WithLabelValues(run.Kind, "error").Inc()
	now := p.now()
	run.FinishedAt, run.Error = now, cause.Error()
	err := p.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		acc.LastError, acc.LastErrorAt = cause.Error(), now
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		return tx.SyncRunAdd(accountID, run)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		p.log.Error("record failed sync", "account_id", accountID, "err", err)
	}
	return cause
}

// finishSync ends a pass in one transaction: when no push asked for more
// (and no full sync was requested meanwhile) the task is acked with the
// run recorded and the account ready; otherwise it returns the account for
// another pass. After maxSyncPasses the wanted id is left to a follow-up
// sync a little later (Gmail's history may lag behind its pushes).
func (p *Pipeline) finishSync(t *queue.Task, accountID string, run store.SyncRun, pass int) (done bool, acc store.Account, err error) {
	run.FinishedAt = p.now()
	err = p.db.Update(func(tx *store.Tx) error {
		done = false
		var err error
		if acc, err = tx.AccountGet(accountID); err != nil {
			return err
		}
		behind := acc.WantedHistoryID > acc.HistoryID || needsFullSync(acc)
		if behind && pass < maxSyncPasses {
			return tx.SyncRunAdd(acc.ID, run)
		}
		done = true
		acc.Status, acc.StatusReason = store.AccountReady, ""
		acc.LastSyncAt, acc.LastError = run.FinishedAt, ""
		acc.WantedHistoryID = min(acc.WantedHistoryID, acc.HistoryID)
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		if err := tx.SyncRunAdd(acc.ID, run); err != nil {
			return err
		}
		if err := t.Ack(tx); err != nil {
			return err
		}
		if !behind {
			return nil
		}
		_, _, err = p.queue.Enqueue(tx, queue.TypeGmailSync, syncPayload{AccountID: acc.ID, Trigger: triggerPush},
			queue.Key(syncKey(acc.ID)), queue.RunAt(p.now().Add(followUpDelay)))
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, acc, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	return done, acc, err
}

// historySync reads history pages from the watermark. Each page's events
// and the watermark after it commit in one transaction, so a crash loses
// nothing and repeats at most one page.
func (p *Pipeline) historySync(ctx context.Context, gm *google.Gmail, acc store.Account, run *store.SyncRun) error {
	start, token := acc.HistoryID, ""
	for {
		page, err := gm.History(ctx, start, token, p.cfg.HistoryPageSize)
		if err != nil {
			return err
		}
		// The last page ends at the mailbox's history id; an earlier one at
		// its last record (an empty one moves nothing).
		mark := page.HistoryID
		if page.NextPageToken != "" {
			mark = start
			if n := len(page.Records); n > 0 {
				mark = page.Records[n-1].ID
			}
		}
		events := classify(acc.ID, page.Records)
		if err := p.record(acc.ID, events, mark); err != nil {
			return err
		}
		p.metrics.records.Add(float64(len(page.Records)))
		run.Records += len(page.Records)
		run.Events += len(events)
		run.ToHistoryID = max(run.ToHistoryID, mark, start)
		if page.NextPageToken == "" {
			return nil
		}
		token = page.NextPageToken
	}
}

// record writes events into the outbox and moves the watermark to mark, in
// one transaction.
func (p *Pipeline) record(accountID string, events []typedEvent, mark uint64) error {
	now := p.now().UnixMilli()
	err := p.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		for _, te := range events {
			te.Event.RecordedAt = now
			if _, _, err := p.queue.Enqueue(tx, te.Type, te.Event); err != nil {
				return err
			}
		}
		if mark <= acc.HistoryID {
			return nil
		}
		acc.HistoryID = mark
		return tx.AccountPut(acc)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return fmt.Errorf("gmail: record %d events of account %s: %w", len(events), accountID, err)
	}
	for _, te := range events {
		p.metrics.recorded.WithLabelValues(te.Type).Inc()
	}
	return nil
}

// fullSync mirrors the whole mailbox: the labels, the profile's history
// id, every message id (messages.list), each message's metadata
// (messages.get, in parallel under the account's quota), stored in batches;
// messages no longer listed become tombstones; the watermark goes to the
// profile's history id, taken before the listing, so that history from it
// replays whatever changed during the sync (harmless: every change carries
// its history id). The transaction that records it complete also schedules
// the user's label rules over the account (RuleApplier.ReclassifyAccount).
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
	email, profileHID, err := gm.Profile(ctx)
	if err != nil {
		return err
	}
	if !sameAddress(email, acc.Email) {
		return queue.Permanent(fmt.Errorf("gmail: the token of account %s is for %s, not %s", acc.ID, email, acc.Email))
	}
	start, err := p.beginFullSync(acc.ID, requested, profileHID)
	if err != nil {
		return err
	}
	profileHID = start.HistoryID
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
		a.FullSyncCompleted = max(a.FullSyncCompleted, requested)
		a.FullSyncStart = nil
		if err := tx.FullSyncForget(accountID); err != nil {
			return err
		}
		if err := tx.AccountPut(a); err != nil {
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
		if _, err := tx.AccountGet(accountID); err != nil {
			return err
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
func (p *Pipeline) beginFullSync(accountID string, requested, historyID uint64) (store.FullSyncStart, error) {
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
		start = store.FullSyncStart{Requested: requested, HistoryID: historyID, At: p.now().UTC()}
		a.FullSyncStart = &start
		return tx.AccountPut(a)
	})
	if errors.Is(err, store.ErrNotFound) {
		return start, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return start, fmt.Errorf("gmail: begin full sync of account %s: %w", accountID, err)
	}
	if start.HistoryID != historyID {
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
