package sheets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/store"
)

// waitEnv is an env whose forms in error are checked again quickly.
func waitEnv(t *testing.T) *env {
	return newEnv(t, envOptions{cfg: Config{FlushDelay: 150 * time.Millisecond, RecheckMax: 2 * time.Second}})
}

// submitN submits n rows (answers "<prefix><i>") one by one.
func (e *env) submitN(formID, prefix string, n int) []store.Submission {
	e.t.Helper()
	out := make([]store.Submission, 0, n)
	for i := range n {
		out = append(out, e.submit(formID, map[string]string{"q": fmt.Sprint(prefix, i)}))
	}
	return out
}

// sheetRows returns the text of a sheet's rows (none when it is gone).
func (e *env) sheetRows(spreadsheetID, sheet string) [][]string {
	rows, err := e.fake.Sheets.Rows(spreadsheetID, sheet)
	if err != nil {
		return nil
	}
	return rows
}

// checkOnceInOrder asserts that the rows, read in order from the given
// parts (sheets), are exactly the submissions, each once, in submission
// order.
func checkOnceInOrder(t *testing.T, subs []store.Submission, parts ...[][]string) {
	t.Helper()
	subs = slices.Clone(subs)
	slices.SortFunc(subs, func(a, b store.Submission) int { return strings.Compare(a.ID, b.ID) })
	var got [][]string
	for _, p := range parts {
		got = append(got, p...)
	}
	if len(got) != len(subs) {
		t.Fatalf("%d rows in the sheets, want %d", len(got), len(subs))
	}
	for i, s := range subs {
		if !slices.Equal(got[i], row(s)) {
			t.Fatalf("row %d: got %q, want %q", i, got[i], row(s))
		}
	}
}

func (e *env) waitState(formID, state string) FormView {
	e.t.Helper()
	var v FormView
	testkit.Eventually(e.t, 10*time.Second, "form "+state, func() bool { v = e.formView(formID); return v.State == state })
	return v
}

func (e *env) noDeadLetters() {
	e.t.Helper()
	if n := e.metric("mailroom_tasks_dead_lettered_total"); n != 0 {
		e.t.Errorf("%v flushes dead-lettered", n)
	}
	if n := e.metric("mailroom_tasks_failed_total"); n != 0 {
		e.t.Errorf("%v failed attempts; a form in error waits, it does not fail", n)
	}
}

// TestFormSpreadsheetDeletedThenRepointed: the spreadsheet is deleted mid
// stream; the form goes to error with one sentence and one alert, keeps
// accepting rows, dead-letters nothing, and once pointed at a new sheet
// (PUT) every accepted row not yet written lands there once, in order.
func TestFormSpreadsheetDeletedThenRepointed(t *testing.T) {
	t.Parallel()
	e := waitEnv(t)
	a := e.account("gone@example.com")
	f := e.form(a, "q")
	subs := e.submitN(f.ID, "a", 5)
	testkit.Eventually(t, 10*time.Second, "first rows", func() bool { return e.formView(f.ID).RowsWritten == 5 })
	before := e.sheetRows(f.SpreadsheetID, f.Sheet)

	if err := e.fake.Sheets.DeleteSpreadsheet(f.SpreadsheetID); err != nil {
		t.Fatal(err)
	}
	subs = append(subs, e.submitN(f.ID, "b", 4)...)
	v := e.waitState(f.ID, "error")
	if !strings.Contains(v.LastError, "does not exist") || !strings.Contains(v.LastError, "point the form at another sheet") {
		t.Errorf("lastError %q does not say what happened and how to fix it", v.LastError)
	}
	// Still accepted while in error, and a few checks later still one alert.
	subs = append(subs, e.submitN(f.ID, "c", 3)...)
	testkit.Eventually(t, 10*time.Second, "a second check", func() bool { return e.metric("mailroom_sheets_form_errors_total") >= 2 })
	if n := e.alerts.list(); len(n) != 1 || !strings.HasPrefix(n[0], f.ID+": ") {
		t.Errorf("alerts %q, want one for the form", n)
	}
	if v := e.formView(f.ID); v.Buffered != 7 || v.State != "error" {
		t.Errorf("buffered %d state %s, want 7 waiting in error", v.Buffered, v.State)
	}

	book, err := e.fake.Sheets.CreateSpreadsheet(a.Email, "New home", "Responses")
	if err != nil {
		t.Fatal(err)
	}
	moved, err := e.p.Repoint(context.Background(), f.ID, FormTarget{SpreadsheetID: book, Sheet: "responses"})
	if err != nil {
		t.Fatal(err)
	}
	if moved.State != "ok" || moved.Sheet != "Responses" || moved.StartRow != 1 || moved.LastError != "" {
		t.Errorf("after PUT: %+v", moved)
	}
	// The new spreadsheet's title is kept, for the admin page.
	if f.Title != "Survey" || moved.Title != "New home" || e.formView(f.ID).Title != "New home" {
		t.Errorf("titles: at creation %q, after PUT %q, read back %q; want Survey, New home, New home", f.Title, moved.Title, e.formView(f.ID).Title)
	}
	subs = append(subs, e.submitN(f.ID, "d", 2)...)
	testkit.Eventually(t, 10*time.Second, "every row written", func() bool { return e.formView(f.ID).RowsWritten == len(subs) })
	checkOnceInOrder(t, subs, before, e.sheetRows(book, "Responses"))
	e.noDeadLetters()
}

// TestFormAccessRevokedAndRestored: access taken away, rows wait; shared
// again and "Retry now": the same sheet gets every row once, in order.
func TestFormAccessRevokedAndRestored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 150 * time.Millisecond, RecheckMax: time.Hour}})
	a := e.account("shared@example.com")
	f := e.form(a, "q")
	subs := e.submitN(f.ID, "a", 3)
	testkit.Eventually(t, 10*time.Second, "first rows", func() bool { return e.formView(f.ID).RowsWritten == 3 })

	if err := e.fake.Sheets.Unshare(f.SpreadsheetID, a.Email); err != nil {
		t.Fatal(err)
	}
	subs = append(subs, e.submitN(f.ID, "b", 4)...)
	v := e.waitState(f.ID, "error")
	if !strings.Contains(v.LastError, "share it with that account again") {
		t.Errorf("lastError %q", v.LastError)
	}
	if err := e.fake.Sheets.Share(f.SpreadsheetID, a.Email); err != nil {
		t.Fatal(err)
	}
	// The next check is 3 minutes away (RecheckMax/20); Retry now checks at once.
	if _, err := e.p.Retry(f.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "rows written after the retry", func() bool { return e.formView(f.ID).RowsWritten == 7 })
	if v := e.formView(f.ID); v.State != "ok" || v.LastError != "" {
		t.Errorf("after the fix: state %s, error %q", v.State, v.LastError)
	}
	checkOnceInOrder(t, subs, e.sheetRows(f.SpreadsheetID, f.Sheet))
	e.noDeadLetters()
	if _, err := e.p.Retry("nope"); !errors.Is(err, ErrFormNotFound) {
		t.Errorf("retry of an unknown form: %v", err)
	}
}

// TestFormTabRenamedAndFull: a renamed tab and a full spreadsheet wait too,
// and are checked again with backoff until fixed.
func TestFormTabRenamedAndFull(t *testing.T) {
	t.Parallel()
	e := waitEnv(t)
	a := e.account("tab@example.com")
	f := e.form(a, "q")
	if err := e.fake.Sheets.RenameSheet(f.SpreadsheetID, f.Sheet, "Renamed"); err != nil {
		t.Fatal(err)
	}
	subs := e.submitN(f.ID, "a", 3)
	v := e.waitState(f.ID, "error")
	if !strings.Contains(v.LastError, "no sheet named") {
		t.Errorf("lastError %q", v.LastError)
	}
	if err := e.fake.Sheets.RenameSheet(f.SpreadsheetID, "Renamed", f.Sheet); err != nil {
		t.Fatal(err)
	}
	// Fixed: the backoff's next check (within RecheckMax) writes the rows.
	testkit.Eventually(t, 10*time.Second, "rows written after the fix", func() bool { return e.formView(f.ID).RowsWritten == 3 })
	checkOnceInOrder(t, subs, e.sheetRows(f.SpreadsheetID, f.Sheet))
	e.noDeadLetters()
}

// TestRepointInput: PUT's bad input is a clear error naming the field.
func TestRepointInput(t *testing.T) {
	t.Parallel()
	e := waitEnv(t)
	a := e.account("put@example.com")
	f := e.form(a, "q")
	other := e.form(a, "q")
	var in *InputError
	for _, tc := range []struct {
		target FormTarget
		field  string
	}{
		{FormTarget{}, "spreadsheetId"},
		{FormTarget{SpreadsheetID: "bad id!"}, "spreadsheetId"},
		{FormTarget{SpreadsheetID: f.SpreadsheetID, Sheet: "Nope"}, "sheet"},
		{FormTarget{SpreadsheetID: "unknownSpreadsheet"}, "spreadsheetId"},
	} {
		_, err := e.p.Repoint(context.Background(), f.ID, tc.target)
		if !errors.As(err, &in) || in.Field != tc.field {
			t.Errorf("%+v: %v, want an input error on %s", tc.target, err, tc.field)
		}
	}
	if _, err := e.p.Repoint(context.Background(), f.ID, FormTarget{SpreadsheetID: other.SpreadsheetID}); !errors.Is(err, ErrSheetTaken) {
		t.Errorf("a sheet another form writes: %v", err)
	}
	if _, err := e.p.Repoint(context.Background(), "nope", FormTarget{SpreadsheetID: f.SpreadsheetID}); !errors.Is(err, ErrFormNotFound) {
		t.Errorf("unknown form: %v", err)
	}
}
