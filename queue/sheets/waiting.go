package sheets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// A form whose sheet cannot take its rows waits instead of failing.
//
// Real sheets change under a form: the owner deletes the spreadsheet
// (404), renames or deletes the tab (400 "Unable to parse range"), takes
// the account's access away (403), or fills the spreadsheet to Google's
// 10,000,000 cells. Retrying cannot fix any of these, and dead-lettering
// the flush would only move the rows out of the way: the admin has to act.
// So the form goes into the error state, with one sentence saying what
// happened and how to fix it (GET /api/v1/forms/{id} and the Forms page),
// and one alert on the alert webhook when it enters it; submissions are
// still accepted and buffered; the flush is acknowledged and a new one
// scheduled at a backoff that doubles from RecheckMax/20 up to RecheckMax
// (a check, not a failure: nothing goes to the dead letters). Once the
// owner fixes it, the next check (or Retry now) writes the buffered rows,
// exactly once and in order, as any flush; or the admin points the form
// at another sheet (Repoint), and the rows not yet written go there.

// Alerts announces a form that entered the error state (queue.Alerter);
// notices are grouped with the dead-letter alerts.
type Alerts interface {
	Notice(subject, id, text string)
}

// sheetProblem says, for an error of the form's sheet that only its owner
// can fix, what happened and how to fix it.
func (p *Pipeline) sheetProblem(form store.Form, err error) (string, bool) {
	email := form.AccountID
	_ = p.db.View(func(tx *store.Tx) error {
		if a, err := tx.AccountGet(form.AccountID); err == nil {
			email = a.Email
		}
		return nil
	})
	switch {
	case errors.Is(err, google.ErrSpreadsheetNotFound):
		return fmt.Sprintf("Google says the spreadsheet %s does not exist (deleted, or never shared with %s); restore it from the Drive trash, or point the form at another sheet. Rows wait meanwhile.", form.SpreadsheetID, email), true
	case errors.Is(err, google.ErrSpreadsheetForbidden):
		return fmt.Sprintf("Google refused %s access to the spreadsheet %s; share it with that account again (edit rights), or point the form at another sheet. Rows wait meanwhile.", email, form.SpreadsheetID), true
	case errors.Is(err, google.ErrSheetMissing):
		return fmt.Sprintf("The spreadsheet has no sheet named %q any more (renamed or deleted); give the tab its name back, or point the form at another sheet. Rows wait meanwhile.", form.Sheet), true
	case errors.Is(err, google.ErrCellLimit):
		return "The spreadsheet is full: it is at Google's limit of 10,000,000 cells, so its sheet cannot grow; delete rows or other sheets, or point the form at another spreadsheet. Rows wait meanwhile.", true
	}
	return "", false
}

// recheckWait is the wait before the n-th check (1-based) of a form in
// error: RecheckMax/20, doubling, at most RecheckMax.
func (p *Pipeline) recheckWait(n int) time.Duration {
	d := p.cfg.RecheckMax / 20
	for i := 1; i < n && d < p.cfg.RecheckMax; i++ {
		d *= 2
	}
	return min(d, p.cfg.RecheckMax)
}

// wait puts the form in the error state, acks the flush and schedules the
// next check, in one transaction.
func (p *Pipeline) wait(ctx context.Context, log *slog.Logger, t *queue.Task, form store.Form, msg string, cause error) error {
	q := p.queue
	now := p.cfg.Now()
	var (
		w         store.SheetWrites
		entered   bool
		next      time.Duration
		repointed bool
	)
	err := p.db.Update(func(tx *store.Tx) error {
		// A flush that read the form before it was pointed at another sheet
		// (it waited in its task for its time or for quota meanwhile) failed
		// on the old sheet: the form is not in error; its next flush, now,
		// writes to the new one.
		cur, err := tx.FormGet(form.ID)
		if err != nil {
			return err
		}
		if repointed = cur.SpreadsheetID != form.SpreadsheetID || cur.Sheet != form.Sheet; repointed {
			if err := t.Ack(tx); err != nil {
				return err
			}
			_, _, err = q.Enqueue(tx, TypeFlush, flushPayload{FormID: form.ID}, queue.Key(flushKey(form.ID)), queue.RunAt(now))
			return err
		}
		if w, entered, err = tx.SheetWaiting(form.ID, msg, now); err != nil {
			return err
		}
		if err := t.Ack(tx); err != nil {
			return err
		}
		next = p.recheckWait(w.ErrorChecks)
		_, _, err = q.Enqueue(tx, TypeFlush, flushPayload{FormID: form.ID}, queue.Key(flushKey(form.ID)), queue.RunAt(now.Add(next)))
		return err
	})
	if err != nil {
		return fmt.Errorf("sheets: flush %s: record the error state (%w): %w", form.ID, cause, err)
	}
	if repointed {
		log.Info("a flush to the form's old sheet failed after the form was pointed at another; flushing to the new one", "err", cause)
		return nil
	}
	p.metrics.waiting.Inc()
	if entered {
		log.Warn("form in error: its sheet cannot take rows", "err", cause, "buffered", w.Buffered)
		if p.alerts != nil {
			p.alerts.Notice("sheets form", form.ID, msg)
		}
	} else {
		log.Info("form still in error", "err", cause, "checks", w.ErrorChecks, "next_check", next)
	}
	return nil
}

// Retry checks a form at once: its flush runs now (brought forward from
// the backoff of a form in error). Forms that are ok flush as usual.
func (p *Pipeline) Retry(formID string) (FormView, error) {
	q := p.queue
	var v FormView
	err := p.db.Update(func(tx *store.Tx) error {
		f, err := tx.FormGet(formID)
		if err != nil {
			return err
		}
		w, err := tx.SheetWrites(formID)
		if err != nil {
			return err
		}
		v = view(f, w)
		if w.Buffered == 0 {
			return nil
		}
		_, _, err = q.Enqueue(tx, TypeFlush, flushPayload{FormID: formID},
			queue.Key(flushKey(formID)), queue.RunAt(p.cfg.Now()), queue.BringForward())
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return v, fmt.Errorf("sheets: form %q: %w", formID, ErrFormNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("sheets: retry form %s: %w", formID, err)
	}
	return v, nil
}

// FormTarget is where PUT /api/v1/forms/{id} points a form.
type FormTarget struct {
	SpreadsheetID string `json:"spreadsheetId"`
	// Sheet is the tab's title; empty: the spreadsheet's first sheet.
	Sheet string `json:"sheet"`
}

// Repoint points a form at another sheet (or the same one again, say
// after its tab was recreated): the spreadsheet and tab are checked as at
// creation, the form's rows start below what the new sheet holds in its
// columns, and every row not yet written goes there, in order, from now
// on; the rows already written stay where they are. A form in error is ok
// again and flushed at once. (A write of the old sheet still in flight
// while this commits may land there too: its rows are then in both.)
func (p *Pipeline) Repoint(ctx context.Context, formID string, in FormTarget) (FormView, error) {
	in.SpreadsheetID = strings.TrimSpace(in.SpreadsheetID)
	switch {
	case in.SpreadsheetID == "":
		return FormView{}, inputErr("spreadsheetId", "required", "Give the spreadsheet's id (the long part of its URL after /d/).")
	case !spreadsheetIDPattern.MatchString(in.SpreadsheetID):
		return FormView{}, inputErr("spreadsheetId", "invalid", "A spreadsheet id holds only letters, digits, - and _ (the part of its URL after /d/).")
	case utf8.RuneCountInString(in.Sheet) > maxSheetName:
		return FormView{}, inputErr("sheet", "invalid", "A sheet name has at most %d characters.", maxSheetName)
	case strings.ContainsFunc(in.Sheet, unicode.IsControl):
		return FormView{}, inputErr("sheet", "invalid", "A sheet name cannot hold control characters.")
	}
	var (
		form store.Form
		acct store.Account
	)
	err := p.db.View(func(tx *store.Tx) error {
		var err error
		if form, err = tx.FormGet(formID); err != nil {
			return err
		}
		acct, err = tx.AccountGet(form.AccountID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) && form.ID == "" {
		return FormView{}, fmt.Errorf("sheets: form %q: %w", formID, ErrFormNotFound)
	}
	if err != nil {
		return FormView{}, fmt.Errorf("sheets: repoint form %s: %w", formID, err)
	}
	fin := FormInput{UserID: form.UserID, AccountID: form.AccountID, SpreadsheetID: in.SpreadsheetID, Sheet: in.Sheet, Columns: form.Columns}
	tab, startRow, err := p.checkSheet(ctx, acct, fin)
	if err != nil {
		return FormView{}, err
	}
	q := p.queue
	var (
		f store.Form
		w store.SheetWrites
	)
	err = p.db.Update(func(tx *store.Tx) error {
		var err error
		if f, w, err = tx.FormRepoint(formID, in.SpreadsheetID, tab.Title, startRow, tab.Rows, tab.Cols); err != nil {
			return err
		}
		if f, err = tx.FormSetTitle(formID, tab.Spreadsheet); err != nil {
			return err
		}
		if w.Buffered == 0 {
			return nil
		}
		_, _, err = q.Enqueue(tx, TypeFlush, flushPayload{FormID: formID},
			queue.Key(flushKey(formID)), queue.RunAt(p.cfg.Now()), queue.BringForward())
		return err
	})
	switch {
	case errors.Is(err, store.ErrConflict):
		return FormView{}, fmt.Errorf("sheets: sheet %q of %s: %w", tab.Title, in.SpreadsheetID, ErrSheetTaken)
	case errors.Is(err, store.ErrNotFound):
		return FormView{}, fmt.Errorf("sheets: form %q: %w", formID, ErrFormNotFound)
	case err != nil:
		return FormView{}, fmt.Errorf("sheets: repoint form %s: %w", formID, err)
	}
	p.forms.Store(f.ID, f)
	p.log.Info("form pointed at another sheet", "form_id", f.ID, "spreadsheet_id", f.SpreadsheetID, "sheet", f.Sheet, "start_row", f.StartRow, "buffered", w.Buffered)
	return view(f, w), nil
}

// checkSheet checks, for a form being created or repointed, that the
// spreadsheet and its tab exist and the account may open them, and finds
// the first row below any data in the form's columns. A person waits on
// it: it waits for the read quota a little, and answers 429 with the wait
// beyond that.
func (p *Pipeline) checkSheet(ctx context.Context, acct store.Account, in FormInput) (google.Tab, int, error) {
	client, err := p.clients.Sheets(ctx, acct.ID)
	if err != nil {
		return google.Tab{}, 0, p.googleInputErr(acct, in, err)
	}
	const waitUpTo = 5 * time.Second
	var tabs []google.Tab
	err = p.spend(ctx, p.reads, acct.ID, "check:"+in.SpreadsheetID, waitUpTo, func(ctx context.Context) (err error) {
		tabs, err = client.Tabs(ctx, in.SpreadsheetID)
		return err
	})
	if err != nil {
		return google.Tab{}, 0, p.googleInputErr(acct, in, err)
	}
	var tab google.Tab
	switch i := slices.IndexFunc(tabs, func(t google.Tab) bool { return strings.EqualFold(t.Title, in.Sheet) }); {
	case in.Sheet == "" && len(tabs) > 0:
		tab = tabs[0]
	case i >= 0:
		tab = tabs[i]
	default:
		titles := make([]string, len(tabs))
		for i, t := range tabs {
			titles[i] = t.Title
		}
		return google.Tab{}, 0, inputErr("sheet", "not_found", "The spreadsheet has no sheet named %q; its sheets are %q.", in.Sheet, titles)
	}
	var used [][]string
	err = p.spend(ctx, p.reads, acct.ID, "check:"+in.SpreadsheetID, waitUpTo, func(ctx context.Context) (err error) {
		used, err = client.ReadRange(ctx, in.SpreadsheetID, columnsRange(tab.Title, len(in.Columns), tab.Cols))
		return err
	})
	if err != nil {
		return google.Tab{}, 0, p.googleInputErr(acct, in, err)
	}
	return tab, len(used) + 1, nil
}
