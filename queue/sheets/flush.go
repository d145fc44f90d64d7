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

	f := &flush{p: p, t: t, log: log}
	for {
		oldest, hasOldest, err := f.load(pl.FormID)
		if err != nil {
			return err
		}
		if f.w.Pending != nil {
			break
		}
		if f.w.Buffered == 0 || !hasOldest {
			return p.ackEmpty(t, f.form.ID)
		}
		due, now := oldest.Add(p.cfg.FlushDelay), p.cfg.Now()
		if f.w.Buffered >= p.cfg.Threshold || !now.Before(due) {
			break
		}
		// Early: the flush is handed to the broker a tick before it is due
		// (scheduleFlush), and the broker's whole seconds may make it up to
		// a second earlier still. A short wait is waited here, to the
		// millisecond; a longer one goes back to the broker, early by a
		// tick again so that it is never late.
		if wait := due.Sub(now); wait > p.shortWait() {
			return queue.RateLimited(errNotDue, wait-p.cfg.BrokerTick)
		}
		if err := queue.Wait(ctx, due.Sub(now)); err != nil {
			return err
		}
	}

	var err error
	f.client, err = p.clients.Sheets(ctx, f.form.AccountID)
	if err != nil {
		return p.failed(ctx, log, t, f.form, fmt.Errorf("sheets: flush %s: client of account %s: %w", f.form.ID, f.form.AccountID, err))
	}
	if done, err := f.planGrown(); done {
		return err
	}
	if done, err := f.readBack(ctx); done {
		return err
	}
	if done, err := f.growGrid(ctx); done {
		return err
	}

	g, err := p.acquire(ctx, log, f.form)
	if err != nil {
		return err
	}
	subs, done, err := f.plan()
	if done {
		return err
	}
	return f.write(ctx, g, subs)
}

// acquire asks for the form's write quota. A refusal that lifts within
// shortWait is waited in the task and asked again: through the broker, the
// wait would end up to a second and a tick late (see Config.BrokerTick).
// A longer one hands the task back (rate limited) until then; the form
// keeps its place in the waiting lines meanwhile.
func (p *Pipeline) acquire(ctx context.Context, log *slog.Logger, form store.Form) (Grant, error) {
	for {
		g, err := p.quota.Acquire(ctx, form.AccountID, form.ID)
		if err != nil || g.OK {
			return g, err
		}
		p.metrics.quotaWaits.Inc()
		log.Debug("waiting for the write quota", "account_id", form.AccountID, "wait", g.Wait)
		if g.Wait > p.shortWait() {
			return g, queue.RateLimited(fmt.Errorf("sheets: flush %s: %w", form.ID, ErrQuota), g.Wait)
		}
		if err := queue.Wait(ctx, g.Wait); err != nil {
			return g, err
		}
	}
}

// flush is one run of a form's flush task: what its steps share. Each step
// that may end the run returns done, and then the run's result err.
type flush struct {
	p      *Pipeline
	t      *queue.Task
	log    *slog.Logger
	form   store.Form
	w      store.SheetWrites // as last loaded or planned
	client SheetsClient
}

// fits reports whether a write ending at lastRow fits the grid last known.
func (f *flush) fits(lastRow int) bool {
	return lastRow <= f.w.GridRows && width(f.form) <= f.w.GridCols
}

// load reads the form and its writes, and when its oldest buffered row
// came, in one read transaction.
func (f *flush) load(formID string) (oldest time.Time, hasOldest bool, err error) {
	err = f.p.db.View(func(tx *store.Tx) error {
		var err error
		if f.form, err = tx.FormGet(formID); err != nil {
			return err
		}
		if f.w, err = tx.SheetWrites(formID); err != nil {
			return err
		}
		oldest, hasOldest, err = tx.SheetOldestWaiting(formID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return oldest, hasOldest, queue.Stale("form " + formID + " is gone")
	}
	if err != nil {
		return oldest, hasOldest, fmt.Errorf("sheets: flush %s: load: %w", formID, err)
	}
	return oldest, hasOldest, nil
}

// planGrown plans the next write before any call when it needs a larger
// grid (step 1, first case).
func (f *flush) planGrown() (done bool, err error) {
	p, form := f.p, f.form
	if f.w.Pending == nil && !f.fits(f.w.NextRow+min(p.cfg.Threshold, f.w.Buffered)-1) {
		// The next write needs a larger grid: plan it, and the grow, before
		// any call. (A write that fits is planned once its quota is
		// granted, so it takes every row buffered by then.)
		err := p.db.Update(func(tx *store.Tx) error {
			var err error
			f.w, err = tx.SheetPlanWrite(form.ID, p.cfg.Threshold, p.cfg.Now(), store.GridPlan{Cols: width(form), Step: p.cfg.GrowStep})
			return err
		})
		if err != nil {
			return true, fmt.Errorf("sheets: flush %s: plan: %w", form.ID, err)
		}
		if f.w.Pending == nil {
			return true, p.ackEmpty(f.t, form.ID)
		}
	}
	return false, nil
}

// readBack reads the pending write's range back when an attempt of it may
// have landed, and commits it if it did.
func (f *flush) readBack(ctx context.Context) (done bool, err error) {
	p, form := f.p, f.form
	if pw := f.w.Pending; pw != nil && pw.Attempts > pw.Verified {
		landed, err := p.landed(ctx, f.client, form, *pw)
		if err != nil {
			return true, p.failed(ctx, f.log, f.t, form, err)
		}
		if landed {
			f.log.Info("pending write found in the sheet; recording it", "row", pw.Row, "rows", pw.Count, "attempts", pw.Attempts)
			return true, p.commit(f.log, f.t, form, *pw, false)
		}
		if err := p.db.Update(func(tx *store.Tx) error { return tx.SheetVerified(form.ID, *pw) }); err != nil {
			return true, fmt.Errorf("sheets: flush %s: record read-back: %w", form.ID, err)
		}
	}
	return false, nil
}

// growGrid grows the sheet's grid when the pending write passes it.
func (f *flush) growGrid(ctx context.Context) (done bool, err error) {
	p := f.p
	if pw := f.w.Pending; pw != nil && !f.fits(pw.LastRow()) {
		if err := p.grow(ctx, f.log, f.client, f.form, f.w); err != nil {
			return true, p.failed(ctx, f.log, f.t, f.form, err)
		}
		if p.afterGrow != nil {
			if err := p.afterGrow(); err != nil {
				return true, err
			}
		}
	}
	return false, nil
}

// plan plans the write if it is not yet (step 1, second case) and counts
// the attempt about to start, in one transaction; it returns the pending
// write's rows.
func (f *flush) plan() (subs []store.Submission, done bool, err error) {
	p, form := f.p, f.form
	err = p.db.Update(func(tx *store.Tx) error {
		var err error
		if f.w.Pending == nil {
			// Planned now, within the grid known: the rows that came
			// since the load and would pass it wait for the next write.
			if _, err := tx.SheetPlanWrite(form.ID, p.cfg.Threshold, p.cfg.Now(), store.GridPlan{MaxRow: f.w.GridRows}); err != nil {
				return err
			}
		}
		f.w, subs, err = tx.SheetAttempt(form.ID, p.cfg.Threshold)
		return err
	})
	if err != nil {
		return subs, true, fmt.Errorf("sheets: flush %s: plan: %w", form.ID, err)
	}
	if f.w.Pending == nil {
		return subs, true, p.ackEmpty(f.t, form.ID)
	}
	return subs, false, nil
}

// write writes the pending write's rows subs under the quota grant g
// (step 2), and commits it (step 3) if the write succeeded.
func (f *flush) write(ctx context.Context, g Grant, subs []store.Submission) error {
	p, form, log := f.p, f.form, f.log
	pw := *f.w.Pending
	rows := make([][]string, len(subs))
	for i, s := range subs {
		rows[i] = row(s)
	}
	a1 := writeRange(form, pw)
	// The call must end before its quota slot could leave the window (see
	// Quota), so it is also bounded by most of the window.
	cctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, p.cfg.QuotaWindow*9/10))
	start := time.Now()
	err := f.client.WriteRange(cctx, form.SpreadsheetID, a1, rows)
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
		return p.failed(ctx, log, f.t, form, err)
	}
	log.Debug("rows written", "range", a1, "rows", len(rows), "attempt_of_write", pw.Attempts, "took", time.Since(start))
	return p.commit(log, f.t, form, pw, true)
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
	err := p.spend(ctx, p.reads, form.AccountID, form.ID, p.shortWait(), func(ctx context.Context) (err error) {
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
