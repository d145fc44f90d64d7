package sheets

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/store"
)

func TestFlushAfterDelayOneCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 700 * time.Millisecond}})
	a := e.account("ann@example.com")
	f := e.form(a, "name", "link")
	start := time.Now()
	var subs []store.Submission
	for i := range 5 {
		subs = append(subs, e.submit(f.ID, map[string]string{"name": fmt.Sprint("n", i), "link": `=HYPERLINK("http://evil.example","click")`}))
	}
	if v := e.formView(f.ID); v.Buffered != 5 || v.RowsWritten != 0 {
		t.Fatalf("after submit: %+v", v)
	}
	testkit.Eventually(t, 5*time.Second, "rows written", func() bool { return e.formView(f.ID).RowsWritten == 5 })
	if took := time.Since(start); took < 700*time.Millisecond {
		t.Fatalf("flushed after %s, before the delay", took)
	}
	e.checkRows(f, subs)
	cells, _ := e.fake.Sheets.Cells(f.SpreadsheetID, f.Sheet)
	for _, r := range cells {
		for _, c := range r {
			if c.Formula {
				t.Fatalf("a cell became a formula: %+v", c)
			}
		}
	}
	v := e.formView(f.ID)
	if v.WriteCalls != 1 || v.Buffered != 0 || v.LastFlushAt == "" || v.LastError != "" || v.NextRow != 6 {
		t.Fatalf("bookkeeping %+v", v)
	}
	if n := e.fake.Calls(googlefake.MethodValuesUpdate); n != 1 {
		t.Fatalf("%d values.update calls, want 1", n)
	}
	if n := e.fake.Calls(googlefake.MethodValuesAppend); n != 0 {
		t.Fatalf("values.append used %d times", n)
	}
	testkit.Eventually(t, 2*time.Second, "outbox empty", e.outboxEmpty)
	// The metric is counted just after the commit that the view reads.
	testkit.Eventually(t, 2*time.Second, "rows written metric 5", func() bool { return e.metric("mailroom_sheets_rows_written_total") == 5 })
	if got := e.metric("mailroom_sheets_rows_buffered"); got != 0 {
		t.Fatalf("rows buffered metric %v", got)
	}
}

// TestFlushUnknownOutcomes: a write that lands while the client sees a
// 500, a dropped connection, a timeout, and a crash between the call and
// the bookkeeping: every row once, in order, and no second write when the
// first one landed.
func TestFlushUnknownOutcomes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// fault is injected on values.update; nil: none.
		fault *googlefake.Fault
		// crashes: the afterWrite hook fails this many times.
		crashes int
		// updates is the number of values.update calls expected.
		updates int
	}{
		{"500 after the write landed", &googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 500, AfterWrite: true, Times: 1}, 0, 1},
		{"connection dropped after the write landed", &googlefake.Fault{Method: googlefake.MethodValuesUpdate, Drop: true, AfterWrite: true, Times: 1}, 0, 1},
		{"503 before the write", &googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 503, Times: 2}, 0, 3},
		{"timeout before the write", &googlefake.Fault{Method: googlefake.MethodValuesUpdate, Latency: 2 * time.Second, Times: 1}, 0, 2},
		{"crash between the call and the bookkeeping", nil, 2, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The delay leaves time for the 7 submissions to be one write even on a busy machine.
			e := newEnv(t, envOptions{cfg: Config{FlushDelay: 3 * time.Second, CallTimeout: 500 * time.Millisecond}})
			crashes := tc.crashes
			e.p.afterWrite = func() error {
				if crashes > 0 {
					crashes--
					return errors.New("simulated crash after the write")
				}
				return nil
			}
			a := e.account("bob@example.com")
			f := e.form(a, "q")
			if tc.fault != nil {
				if _, err := e.fake.InjectFault(*tc.fault); err != nil {
					t.Fatal(err)
				}
			}
			var subs []store.Submission
			for i := range 7 {
				subs = append(subs, e.submit(f.ID, map[string]string{"q": fmt.Sprint(i)}))
			}
			testkit.Eventually(t, 10*time.Second, "rows recorded", func() bool { return e.formView(f.ID).RowsWritten == 7 })
			e.checkRows(f, subs)
			if n := e.fake.Calls(googlefake.MethodValuesUpdate); n != tc.updates {
				t.Fatalf("%d values.update calls, want %d", n, tc.updates)
			}
			// More rows after recovery go below, in order.
			for i := range 3 {
				subs = append(subs, e.submit(f.ID, map[string]string{"q": fmt.Sprint("late", i)}))
			}
			testkit.Eventually(t, 10*time.Second, "late rows recorded", func() bool { return e.formView(f.ID).RowsWritten == 10 })
			e.checkRows(f, subs)
			if v := e.formView(f.ID); v.LastError != "" {
				t.Fatalf("last error kept after success: %q", v.LastError)
			}
		})
	}
}

func TestFlushGoogleRateLimitWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 200 * time.Millisecond}})
	a := e.account("cy@example.com")
	f := e.form(a, "q")
	if _, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 429, RetryAfter: time.Second, Times: 2}); err != nil {
		t.Fatal(err)
	}
	var subs []store.Submission
	for i := range 4 {
		subs = append(subs, e.submit(f.ID, map[string]string{"q": fmt.Sprint(i)}))
	}
	testkit.Eventually(t, 15*time.Second, "rows recorded", func() bool { return e.formView(f.ID).RowsWritten == 4 })
	e.checkRows(f, subs)
	if got := e.metric("mailroom_sheets_quota_waits_total"); got < 2 {
		t.Fatalf("quota waits %v, want >= 2", got)
	}
	if got := e.metric("mailroom_tasks_failed_total"); got != 0 {
		t.Fatalf("a 429 counted as a failed attempt (%v)", got)
	}
}

// TestFlushSpreadsheetGoneWaits: a 404 on the write (the spreadsheet is
// gone) is not a dead letter nor a failed attempt: the form waits in
// error with its row buffered, and once the spreadsheet answers again a
// retry writes it.
func TestFlushSpreadsheetGoneWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 200 * time.Millisecond, RecheckMax: time.Hour}})
	a := e.account("dee@example.com")
	f := e.form(a, "q")
	if _, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 404}); err != nil {
		t.Fatal(err)
	}
	subs := []store.Submission{e.submit(f.ID, map[string]string{"q": "x"})}
	v := e.waitState(f.ID, "error")
	if v.LastError == "" || v.Buffered != 1 || v.RowsWritten != 0 {
		t.Fatalf("after a 404: %+v", v)
	}
	e.noDeadLetters()
	e.fake.ClearFaults()
	if _, err := e.p.Retry(f.ID); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, "the row written after the retry", func() bool { return e.formView(f.ID).RowsWritten == 1 })
	e.checkRows(f, subs)
}

func TestCreateFormChecks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	a := e.account("eve@example.com")
	e.fake.AddAccount("stranger@example.com")
	book, err := e.fake.Sheets.CreateSpreadsheet(a.Email, "Book", "Responses", "Other")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := e.fake.Sheets.CreateSpreadsheet("stranger@example.com", "Theirs")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := func(mod func(*FormInput)) FormInput {
		fi := FormInput{UserID: e.user.ID, AccountID: a.ID, SpreadsheetID: book, Sheet: "Responses", Columns: []string{"name", "email"}}
		mod(&fi)
		return fi
	}
	bad := []struct {
		name  string
		in    FormInput
		field string
	}{
		{"no user", in(func(f *FormInput) { f.UserID = "" }), "userId"},
		{"unknown user", in(func(f *FormInput) { f.UserID = "nobody" }), "userId"},
		{"unknown account", in(func(f *FormInput) { f.AccountID = "nope" }), "accountId"},
		{"bad spreadsheet id", in(func(f *FormInput) { f.SpreadsheetID = "../x" }), "spreadsheetId"},
		{"missing spreadsheet", in(func(f *FormInput) { f.SpreadsheetID = "doesNotExist" }), "spreadsheetId"},
		{"not shared", in(func(f *FormInput) { f.SpreadsheetID = foreign }), "spreadsheetId"},
		{"missing sheet", in(func(f *FormInput) { f.Sheet = "Nope" }), "sheet"},
		{"no columns", in(func(f *FormInput) { f.Columns = nil }), "columns"},
		{"blank column", in(func(f *FormInput) { f.Columns = []string{"a", " "} }), "columns[1]"},
		{"duplicate column", in(func(f *FormInput) { f.Columns = []string{"a", "A"} }), "columns[1]"},
	}
	for _, tc := range bad {
		_, err := e.p.CreateForm(ctx, tc.in)
		var ie *InputError
		if !errors.As(err, &ie) || ie.Field != tc.field {
			t.Errorf("%s: error %v, want one naming %s", tc.name, err, tc.field)
		}
	}

	// Existing data in the form's columns: the form starts below it.
	c, err := e.clients.Sheets(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRange(ctx, book, "Responses!A1:D3", [][]string{{"when", "name", "email", "id"}, {"x"}, {"", "", "", "y"}}); err != nil {
		t.Fatal(err)
	}
	f, err := e.p.CreateForm(ctx, in(func(f *FormInput) { f.Sheet = "responses" }))
	if err != nil {
		t.Fatal(err)
	}
	if f.Sheet != "Responses" || f.StartRow != 4 {
		t.Fatalf("form %+v, want sheet Responses from row 4", f)
	}
	sub := e.submit(f.ID, map[string]string{"name": "Zed"})
	testkit.Eventually(t, 5*time.Second, "row written", func() bool { return e.formView(f.ID).RowsWritten == 1 })
	if rows := e.rows(f); len(rows) != 4 || rows[0][0] != "when" || rows[3][3] != sub.ID {
		t.Fatalf("sheet after the first row: %q", rows)
	}
	if _, err := e.p.CreateForm(ctx, in(func(*FormInput) {})); !errors.Is(err, ErrSheetTaken) {
		t.Fatalf("second form on the sheet: %v", err)
	}
	// Default sheet: the first one.
	book2, _ := e.fake.Sheets.CreateSpreadsheet(a.Email, "Two")
	g, err := e.p.CreateForm(ctx, in(func(f *FormInput) { f.SpreadsheetID = book2; f.Sheet = "" }))
	if err != nil || g.Sheet != "Sheet1" {
		t.Fatalf("default sheet: %+v %v", g, err)
	}
}
