package sheets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// HandleFlush is the sheets:flush handler: it writes the next batch of one
// form's buffered rows to its sheet.
//
// # Exactly once, in order
//
// values.append is not idempotent: when its answer is lost (a 500 after the
// write landed, a timeout, a crash), appending again adds the rows twice,
// and not appending may lose them. So mailroom never appends. Each form owns
// its rows of the sheet, from StartRow down, and keeps NextRow, the row its
// next write starts at, in bbolt. A flush goes like this:
//
//  1. Plan, in one bbolt transaction before any call: the pending write
//     (store.SheetWrite) is the first n ≤ Threshold buffered ids, in
//     submission order, bound to rows NextRow..NextRow+n-1, and the attempt
//     about to start is counted. A plan never changes until its write is
//     known to have landed; a retry reuses it as it is.
//     When the write would pass the sheet's grid as last known (Google
//     refuses a values.update past it), it is planned first, with the grid
//     it needs, and the grid is grown before the write (grow.go), from the
//     read and write quotas; otherwise it is planned once the write's
//     quota is granted, so it takes every row buffered by then.
//  2. Write those rows with values.update to that explicit range, RAW.
//     Writing the same values to the same cells twice leaves the sheet as
//     one write does, so a retry of an unknown outcome cannot double a row,
//     however many times the call landed, and in whatever order late
//     duplicates arrive: ranges of different plans never overlap.
//  3. Commit, in one bbolt transaction: the rows leave the buffer, NextRow
//     moves past them, the counters grow, the task's outbox record is acked
//     and, if rows remain, the next flush is put in the outbox under the
//     same key. The local effect and the task's completion commit together.
//
// Where it can stop, and what happens then (the flush's outbox record lives
// until step 3 commits, so the task always runs again):
//
//   - kill -9 before step 1 commits: nothing was planned; the next run plans.
//   - after a grow landed, before it was recorded: the next run reads the
//     grid, finds it grown and records it; it never grows twice.
//   - after step 1, before or during step 2 (crash, timeout, 5xx, or a 500
//     after the write landed): the pending write has more attempts than
//     verifications, so the next run first reads the range back
//     (values.get). If it holds exactly the planned rows, the write landed:
//     commit without writing again (saving a write call of the quota).
//     Otherwise write the same plan again; any earlier attempt that lands
//     late writes the same cells with the same values.
//   - after step 2, before step 3 commits: the same; the read-back finds
//     the rows and commits.
//   - after step 3: done; a duplicate run of the task finds its plan gone
//     (SheetCommit is a no-op for a plan that is not pending) and the
//     buffer handled by the next flush.
//
// Order: plans take the buffer's oldest ids, ids enter the buffer in commit
// order, and plan k+1 is made only after plan k committed, at the rows
// after it. So the sheet holds the rows in submission order.
//
// The read-back is an optimization, not what makes it safe: safety comes
// from the fixed range. It is done once per attempt that may have landed
// (Attempts > Verified), and skipped after a clean run.
//
// Nothing else writes the form's cells: one form per sheet (store
// form_sheets), one flush task per form (outbox key), and the form's rows
// start below whatever the sheet held in its columns when it was created.
func (p *Pipeline) HandleFlush(ctx context.Context, t *queue.Task) error {
	var pl flushPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil || pl.FormID == "" {
		return queue.Permanent(fmt.Errorf("sheets: flush: bad payload %q", t.Payload))
	}
	log := p.log.With("task_id", t.ID, "type", t.Type, "form_id", pl.FormID, "attempt", t.Attempt)
	now := p.cfg.Now()

	var (
		form      store.Form
		w         store.SheetWrites
		oldest    time.Time
		hasOldest bool
	)
	err := p.db.View(func(tx *store.Tx) error {
		var err error
		if form, err = tx.FormGet(pl.FormID); err != nil {
			return err
		}
		if w, err = tx.SheetWrites(pl.FormID); err != nil {
			return err
		}
		oldest, hasOldest, err = tx.SheetOldestWaiting(pl.FormID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Stale("form " + pl.FormID + " is gone")
	}
	if err != nil {
		return fmt.Errorf("sheets: flush %s: load: %w", pl.FormID, err)
	}

	if w.Pending == nil {
		if w.Buffered == 0 || !hasOldest {
			return p.ackEmpty(t, form.ID)
		}
		if due := oldest.Add(p.cfg.FlushDelay); w.Buffered < p.cfg.Threshold && now.Before(due) {
			return queue.RateLimited(errNotDue, due.Sub(now))
		}
	}

	client, err := p.clients.Sheets(ctx, form.AccountID)
	if err != nil {
		return p.failed(ctx, log, t, form, fmt.Errorf("sheets: flush %s: client of account %s: %w", form.ID, form.AccountID, err))
	}

	fits := func(lastRow int) bool { return lastRow <= w.GridRows && width(form) <= w.GridCols }
	if w.Pending == nil && !fits(w.NextRow+min(p.cfg.Threshold, w.Buffered)-1) {
		// The next write needs a larger grid: plan it, and the grow, before
		// any call. (A write that fits is planned once its quota is
		// granted, so it takes every row buffered by then.)
		err := p.db.Update(func(tx *store.Tx) error {
			var err error
			w, err = tx.SheetPlanWrite(form.ID, p.cfg.Threshold, p.cfg.Now(), store.GridPlan{Cols: width(form), Step: p.cfg.GrowStep})
			return err
		})
		if err != nil {
			return fmt.Errorf("sheets: flush %s: plan: %w", form.ID, err)
		}
		if w.Pending == nil {
			return p.ackEmpty(t, form.ID)
		}
	}

	if pw := w.Pending; pw != nil && pw.Attempts > pw.Verified {
		landed, err := p.landed(ctx, client, form, *pw)
		if err != nil {
			return p.failed(ctx, log, t, form, err)
		}
		if landed {
			log.Info("pending write found in the sheet; recording it", "row", pw.Row, "rows", pw.Count, "attempts", pw.Attempts)
			return p.commit(log, t, form, *pw, false)
		}
		if err := p.db.Update(func(tx *store.Tx) error { return tx.SheetVerified(form.ID, *pw) }); err != nil {
			return fmt.Errorf("sheets: flush %s: record read-back: %w", form.ID, err)
		}
	}

	if pw := w.Pending; pw != nil && !fits(pw.LastRow()) {
		if err := p.grow(ctx, log, client, form, w); err != nil {
			return p.failed(ctx, log, t, form, err)
		}
		if p.afterGrow != nil {
			if err := p.afterGrow(); err != nil {
				return err
			}
		}
	}

	g, err := p.quota.Acquire(ctx, form.AccountID, form.ID)
	if err != nil {
		return err
	}
	if !g.OK {
		p.metrics.quotaWaits.Inc()
		log.Debug("waiting for the account's write quota", "account_id", form.AccountID, "wait", g.Wait)
		return queue.RateLimited(fmt.Errorf("sheets: flush %s: %w", form.ID, ErrQuota), g.Wait)
	}

	var subs []store.Submission
	err = p.db.Update(func(tx *store.Tx) error {
		var err error
		if w.Pending == nil {
			// Planned now, within the grid known: the rows that came
			// since the load and would pass it wait for the next write.
			if _, err := tx.SheetPlanWrite(form.ID, p.cfg.Threshold, p.cfg.Now(), store.GridPlan{MaxRow: w.GridRows}); err != nil {
				return err
			}
		}
		w, subs, err = tx.SheetAttempt(form.ID, p.cfg.Threshold)
		return err
	})
	if err != nil {
		return fmt.Errorf("sheets: flush %s: plan: %w", form.ID, err)
	}
	if w.Pending == nil {
		return p.ackEmpty(t, form.ID)
	}
	pw := *w.Pending
	rows := make([][]string, len(subs))
	for i, s := range subs {
		rows[i] = row(s)
	}
	a1 := writeRange(form, pw)
	// The call must end before its quota slot could leave the window (see
	// Quota), so it is also bounded by most of the window.
	cctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, p.cfg.QuotaWindow*9/10))
	start := time.Now()
	err = client.WriteRange(cctx, form.SpreadsheetID, a1, rows)
	cancel()
	if serr := p.quota.Settle(context.WithoutCancel(ctx), form.AccountID, g); serr != nil {
		log.Warn("settle quota slot", "err", serr)
	}
	p.metrics.calls.Inc()
	p.metrics.callTime.Observe(time.Since(start).Seconds())
	if err == nil && p.afterWrite != nil {
		err = p.afterWrite()
	}
	if _, limited := queue.RetryAfter(err); limited {
		// Google refused the call for its quota (429): it did not land,
		// so the next run needs no read-back.
		if verr := p.db.Update(func(tx *store.Tx) error { return tx.SheetVerified(form.ID, pw) }); verr != nil {
			log.Warn("record a refused write", "err", verr)
		}
	}
	if errors.Is(err, google.ErrGridLimit) {
		// The grid is smaller than mailroom knew (the owner shrank it):
		// forget it, so the next run reads it and grows it again.
		if gerr := p.db.Update(func(tx *store.Tx) error { return tx.SheetGrid(form.ID, 0, 0, false) }); gerr != nil {
			log.Warn("forget the grid", "err", gerr)
		}
		log.Info("the sheet's grid is smaller than known; reading it again", "err", err)
		return queue.RateLimited(fmt.Errorf("sheets: flush %s: %w", form.ID, errGridChanged), 0)
	}
	if err != nil {
		return p.failed(ctx, log, t, form, err)
	}
	log.Debug("rows written", "range", a1, "rows", len(rows), "attempt_of_write", pw.Attempts, "took", time.Since(start))
	return p.commit(log, t, form, pw, true)
}

// landed reports whether the pending write's range holds exactly its rows.
func (p *Pipeline) landed(ctx context.Context, client SheetsClient, form store.Form, pw store.SheetWrite) (bool, error) {
	var subs []store.Submission
	if err := p.db.View(func(tx *store.Tx) error {
		var err error
		subs, err = tx.SheetPendingRows(form.ID)
		return err
	}); err != nil {
		return false, fmt.Errorf("sheets: flush %s: load pending rows: %w", form.ID, err)
	}
	want := make([][]string, len(subs))
	for i, s := range subs {
		want[i] = row(s)
	}
	var got [][]string
	err := p.spend(ctx, p.reads, form.AccountID, form.ID, 0, func(ctx context.Context) (err error) {
		got, err = client.ReadRange(ctx, form.SpreadsheetID, writeRange(form, pw))
		return err
	})
	if _, limited := queue.RetryAfter(err); limited {
		return false, err
	}
	if errors.Is(err, google.ErrGridLimit) {
		return false, nil // the range is past the grid: the rows cannot be there
	}
	if err != nil {
		return false, fmt.Errorf("sheets: flush %s: read back: %w", form.ID, err)
	}
	return sameRows(got, want), nil
}

// commit records the pending write pw as landed, acks the task and
// schedules the next flush if rows remain, in one transaction.
func (p *Pipeline) commit(log *slog.Logger, t *queue.Task, form store.Form, pw store.SheetWrite, wrote bool) error {
	q := p.queue
	now := p.cfg.Now()
	var (
		times     []time.Time
		after     store.SheetWrites
		committed bool
	)
	err := p.db.Update(func(tx *store.Tx) error {
		subs, err := tx.SheetPendingRows(form.ID)
		if err != nil {
			return err
		}
		after, committed, err = tx.SheetCommit(form.ID, pw, now)
		if err != nil {
			return err
		}
		times = times[:0]
		if committed {
			for _, s := range subs {
				times = append(times, s.SubmittedAt)
			}
		}
		if err := t.Ack(tx); err != nil {
			return err
		}
		return p.scheduleFlush(tx, q, form.ID, after, now)
	})
	if err != nil {
		return fmt.Errorf("sheets: flush %s: record write of rows %d-%d: %w", form.ID, pw.Row, pw.Row+pw.Count-1, err)
	}
	if !committed {
		log.Info("write already recorded by another run", "row", pw.Row)
		return nil
	}
	p.metrics.written.Add(float64(pw.Count))
	p.metrics.perMinute.add(now, pw.Count)
	for _, at := range times {
		p.metrics.latency.Observe(now.Sub(at).Seconds())
	}
	log.Info("flushed", "account_id", form.AccountID, "rows", pw.Count, "row", pw.Row, "wrote", wrote, "buffered", after.Buffered)
	return nil
}

// ackEmpty finishes a flush that found nothing to write.
func (p *Pipeline) ackEmpty(t *queue.Task, formID string) error {
	q := p.queue
	return p.db.Update(func(tx *store.Tx) error {
		if err := t.Ack(tx); err != nil {
			return err
		}
		// A row may have come in since the read: schedule its flush.
		w, err := tx.SheetWrites(formID)
		if err != nil {
			return err
		}
		return p.scheduleFlush(tx, q, formID, w, p.cfg.Now())
	})
}

// failed records a flush error on the form and classes it for the queue:
// Google's rate limits wait (and count as quota waits); a sheet that is
// gone, unshared, missing its tab or full puts the form in the error state
// and checks it again later (wait); an unknown or revoked account is
// permanent; the rest is retried.
func (p *Pipeline) failed(ctx context.Context, log *slog.Logger, t *queue.Task, form store.Form, err error) error {
	if ctx.Err() != nil {
		return err
	}
	if _, limited := queue.RetryAfter(err); limited {
		p.metrics.quotaWaits.Inc()
		log.Info("Google rate-limited the flush", "err", err)
		return err
	}
	if msg, ok := p.sheetProblem(form, err); ok {
		return p.wait(ctx, log, t, form, msg, err)
	}
	if !queue.IsPermanent(err) && (errors.Is(err, google.ErrSpreadsheetNotFound) || errors.Is(err, google.ErrSpreadsheetForbidden) ||
		errors.Is(err, google.ErrRevoked) || errors.Is(err, store.ErrNotFound)) {
		err = queue.Permanent(err)
	}
	if rerr := p.db.Update(func(tx *store.Tx) error { return tx.SheetFailed(form.ID, err.Error(), p.cfg.Now()) }); rerr != nil {
		log.Warn("record flush error", "err", rerr)
	}
	return err
}
