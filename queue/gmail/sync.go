package gmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/googleerr"
	"mailroom/store"
)

// maxSyncPasses bounds the history passes of one sync task that keeps
// finding a push newer than what Gmail reported; after them the wanted id
// is left to a follow-up sync.
const maxSyncPasses = 5

// listPageSize is messages.list's page size during a full sync.
const listPageSize = 500

// When Gmail answers a history read below the id a push announced (its
// history lags its push: reported for one to three seconds), the sync
// reads again after a wait that grows with the time since the push, half
// of it, from lagStepMin up to lagStepMax, until history reaches the push
// or historyCatchUpLimit has passed (the change is then left to the next
// trailing read or poll). So a change is in the mirror at most about the
// lag plus lagStepMax after its push.
const (
	lagStepMin          = 250 * time.Millisecond
	lagStepMax          = 2 * time.Second
	historyCatchUpLimit = 2 * time.Minute
)

// lagDelay is the wait before the next read of a history that lags a push
// that came waited ago.
func lagDelay(waited time.Duration) time.Duration {
	return min(max(waited/2, lagStepMin), lagStepMax)
}

// handleSync is gmail:sync, the history sync: history since the live
// watermark, classified into event tasks (run at live priority), until the
// watermark reaches what pushes announced. It runs beside the account's
// full sync (gmail:full-sync, its own task and queue): while one is due the
// watermark it reads from is the full sync's start (liveFrom), so live
// changes are never held behind a full sync. The task's completion commits
// with the final check of the wanted history id, so a push that arrives
// during the sync is never lost: it either sees this task's record (and
// this task sees its id) or records a new sync.
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
	ctx = google.WithPriority(ctx, google.PriorityLive)
	log := p.log.With("account_id", acc.ID, "task_id", t.ID, "attempt", t.Attempt)
	trigger, records := pl.Trigger, 0
	for pass := 1; ; pass++ {
		run := store.SyncRun{Kind: "history", Trigger: trigger, StartedAt: p.now()}
		if from, ok := liveFrom(acc); ok {
			run.FromHistoryID = from
			if err := p.historyPass(ctx, acc, from, &run); err != nil {
				return err
			}
		}
		records += run.Records
		done, next, err := p.finishSync(t, acc.ID, run, syncEnd{pass: pass, trigger: pl.Trigger, records: records})
		if err != nil {
			return err
		}
		p.metrics.syncs.WithLabelValues(run.Kind, "ok").Inc()
		log.Debug("sync pass done", "records", run.Records, "events", run.Events,
			"history_id", run.ToHistoryID, "done", done)
		if done {
			return nil
		}
		acc, trigger = next, triggerPush
	}
}

// historyPass reads the history from from into run; history too old for
// Gmail requests a full sync (and the pass ends, recorded as such).
func (p *Pipeline) historyPass(ctx context.Context, acc store.Account, from uint64, run *store.SyncRun) error {
	gm, err := p.client(ctx, acc)
	if err == nil {
		err = p.historySync(ctx, gm, acc.ID, from, run)
	}
	if !errors.Is(err, google.ErrHistoryTooOld) {
		if err != nil {
			return p.syncFailed(acc.ID, *run, err)
		}
		return nil
	}
	p.log.Info("history too old; a full sync follows", "account_id", acc.ID, "from_history_id", from)
	p.metrics.syncs.WithLabelValues(run.Kind, "too_old").Inc()
	run.Error = "history too old: a full sync follows"
	return p.requestFullSync(acc.ID, from)
}

// liveFrom returns the watermark the history sync reads from: the
// account's, or while a full sync is due, how far the history since the
// start of the full sync in progress is recorded (the account's until one
// began). ok is false when there is none to read from: a first full sync
// that has not begun (its start will cover every change before it), or a
// watermark Gmail called too old.
func liveFrom(acc store.Account) (from uint64, ok bool) {
	from = acc.HistoryID
	if s := acc.FullSyncStart; s != nil && needsFullSync(acc) {
		from = max(s.HistoryID, s.LiveHistoryID)
	}
	if from == 0 || (from == acc.StaleHistoryID && needsFullSync(acc)) {
		return 0, false
	}
	return from, true
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

// requestFullSync marks the watermark from as too old for Gmail (the
// history sync stops reading from it) and makes sure a full sync is due
// and its task recorded: a new request unless one is due that has not
// begun, or began after from was the watermark.
func (p *Pipeline) requestFullSync(id string, from uint64) error {
	err := p.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(id)
		if err != nil {
			return err
		}
		if cur, ok := liveFrom(acc); !ok || cur != from {
			return nil // the watermark moved meanwhile
		}
		acc.StaleHistoryID = from
		s := acc.FullSyncStart
		if !needsFullSync(acc) || (s != nil && s.Requested == acc.FullSyncRequested) {
			acc.FullSyncRequested++
		}
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		return p.enqueueFullSync(tx, id, triggerTooOld)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, id))
	}
	return err
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

// syncEnd is what finishSync needs to know of the sync task's passes.
type syncEnd struct {
	pass    int
	trigger string // the task's
	records int    // history records read by every pass so far
}

// finishSync ends a pass in one transaction: when no push asked for more
// the task is acked with the run recorded (and the account ready unless a
// full sync is due: that full sync's task is then made sure of);
// otherwise it returns the account for another pass. A push that came
// during the pass is read again at once, up to maxSyncPasses; a history
// that Gmail answered below the pushed id (it lags its push) is read again
// a little later (lagDelay), keeping the wanted id. A sync after pushes
// that found changes is followed by a trailing read TrailingRead later,
// which catches a change whose own push Gmail dropped (at most one a
// second per user), and so on until a trailing read finds none.
func (p *Pipeline) finishSync(t *queue.Task, accountID string, run store.SyncRun, end syncEnd) (done bool, acc store.Account, err error) {
	run.FinishedAt = p.now()
	err = p.db.Update(func(tx *store.Tx) error {
		done = false
		var err error
		if acc, err = tx.AccountGet(accountID); err != nil {
			return err
		}
		from, ok := liveFrom(acc)
		behind := ok && acc.WantedHistoryID > from
		run.ShortRead = behind && run.ToHistoryID < acc.WantedHistoryID
		if behind && !run.ShortRead && end.pass < maxSyncPasses {
			return tx.SyncRunAdd(acc.ID, run)
		}
		done = true
		acc.LastSyncAt = run.FinishedAt
		behind = p.catchUp(&acc, &run, behind)
		// A poll that read changes past every pushed id found changes no
		// push announced (a push that came meanwhile, and whose sync the
		// poll's task became, raised the wanted id over them).
		if end.trigger == triggerPoll && end.records > 0 && run.ToHistoryID > acc.WantedHistoryID {
			acc.UnannouncedAt = run.FinishedAt
			p.metrics.unannounced.Inc()
		}
		if needsFullSync(acc) {
			if err := p.enqueueFullSync(tx, acc.ID, triggerResync); err != nil {
				return err
			}
		} else {
			acc.Status, acc.StatusReason, acc.LastError = store.AccountReady, "", ""
			if !behind {
				acc.WantedHistoryID = min(acc.WantedHistoryID, acc.HistoryID)
			}
		}
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		if err := tx.SyncRunAdd(acc.ID, run); err != nil {
			return err
		}
		if err := t.Ack(tx); err != nil {
			return err
		}
		return p.enqueueNextRead(tx, acc, behind, end)
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, acc, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	return done, acc, err
}

// catchUp keeps the account's record of a push that history has not
// reached: it reports whether the sync must read again for it (false once
// history reached it, or after historyCatchUpLimit, when the wait is given
// up), and records on run how long history took when it lagged.
func (p *Pipeline) catchUp(acc *store.Account, run *store.SyncRun, behind bool) bool {
	now := run.FinishedAt
	if run.ShortRead {
		acc.ShortReads++
		p.metrics.shortReads.Inc()
	}
	if behind && acc.WantedAt.IsZero() {
		acc.WantedAt = now
	}
	if behind && now.Sub(acc.WantedAt) < historyCatchUpLimit {
		return true
	}
	if behind {
		p.log.Warn("Gmail's history did not reach a pushed change in time; the next read takes it", "account_id", acc.ID,
			"wanted_history_id", acc.WantedHistoryID, "history_id", run.ToHistoryID, "waited", now.Sub(acc.WantedAt).Round(time.Millisecond))
		p.metrics.lagGivenUp.Inc()
	} else if acc.ShortReads > 0 && !acc.WantedAt.IsZero() {
		lag := now.Sub(acc.WantedAt)
		run.HistoryLagMs = lag.Milliseconds()
		p.metrics.historyLag.Observe(lag.Seconds())
	}
	acc.WantedAt, acc.ShortReads = time.Time{}, 0
	return false
}

// enqueueNextRead records the account's next history read, if one is due:
// again for a push that history has not reached, or a trailing read after
// pushes that brought changes.
func (p *Pipeline) enqueueNextRead(tx *store.Tx, acc store.Account, behind bool, end syncEnd) error {
	var (
		trigger string
		at      time.Time
	)
	switch {
	case behind:
		trigger, at = triggerLag, p.now().Add(lagDelay(p.now().Sub(acc.WantedAt)))
	case end.records > 0 && (end.trigger == triggerPush || end.trigger == triggerLag || end.trigger == triggerTrailing):
		// A trailing read that found changes is followed by another (a
		// push brings a waiting trailing read forward, and it runs as
		// one): the chain ends with a read that finds nothing.
		trigger, at = triggerTrailing, p.now().Add(p.cfg.TrailingRead)
	default:
		return nil
	}
	_, _, err := p.queue.Enqueue(tx, TypeSync, syncPayload{AccountID: acc.ID, Trigger: trigger},
		queue.Key(syncKey(acc.ID)), queue.RunAt(at))
	return err
}

// historySync reads history pages from the watermark from. Each page's
// events and the watermark after it commit in one transaction, so a crash
// loses nothing and repeats at most one page.
func (p *Pipeline) historySync(ctx context.Context, gm *google.Gmail, accountID string, from uint64, run *store.SyncRun) error {
	start, token := from, ""
	for {
		page, err := gm.History(ctx, start, token, p.cfg.HistoryPageSize)
		if err != nil {
			return googleerr.ToQueue(err)
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
		events := classify(accountID, page.Records)
		if err := p.record(accountID, events, mark); err != nil {
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

// record writes the events' tasks into the outbox (tasksOf: state changes
// of a type grouped) and moves the watermark to mark, in
// one transaction: the live watermark of the full sync in progress when
// there is one (the account's watermark says what is all recorded, and a
// full sync has not recorded all yet), else the account's.
func (p *Pipeline) record(accountID string, events []typedEvent, mark uint64) error {
	now := p.now().UnixMilli()
	for i := range events {
		events[i].Event.RecordedAt = now
	}
	tasks := tasksOf(accountID, events)
	err := p.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		for _, task := range tasks {
			var opts []queue.Option
			if task.Type == TypeMessageAdded {
				// Counted per account for the quota backlog (a
				// messages.get each).
				opts = append(opts, queue.Group(accountID, 1))
			}
			if _, _, err := p.queue.Enqueue(tx, task.Type, task.Payload, opts...); err != nil {
				return err
			}
		}
		switch s := acc.FullSyncStart; {
		case s != nil && mark > s.LiveHistoryID:
			s.LiveHistoryID = mark
		case s == nil && mark > acc.HistoryID:
			acc.HistoryID = mark
		default:
			return nil
		}
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
