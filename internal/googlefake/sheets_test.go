package googlefake_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/sheets/v4"

	"mailroom/internal/googlefake"
)

func row(vals ...any) []any { return vals }

func TestSheetsGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Survey", "Sheet1", "My Responses"))
	ss, err := e.sheets.Spreadsheets.Get(id).Do()
	check(t, err)
	if ss.SpreadsheetId != id || ss.Properties.Title != "Survey" || len(ss.Sheets) != 2 ||
		ss.Sheets[0].Properties.Title != "Sheet1" || ss.Sheets[1].Properties.Title != "My Responses" ||
		ss.Sheets[0].Properties.SheetId != 0 || ss.Sheets[1].Properties.SheetId == 0 {
		t.Errorf("spreadsheet = %+v", ss)
	}

	_, err = e.sheets.Spreadsheets.Get("no-such-sheet").Do()
	if code, _ := apiCode(t, err); code != 404 {
		t.Errorf("unknown spreadsheet: %d, want 404", code)
	}
	e.srv.AddAccount(bob)
	_, bobSheets := e.clients(t, e.srv.AddAccount(bob))
	_, err = bobSheets.Spreadsheets.Get(id).Do()
	if code, _ := apiCode(t, err); code != 403 {
		t.Errorf("other account: %d, want 403", code)
	}
	check(t, e.srv.Sheets.Share(id, bob))
	_, err = bobSheets.Spreadsheets.Get(id).Do()
	check(t, err)
}

func TestSheetsValues(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Survey", "Sheet1", "My Responses"))
	vals := e.sheets.Spreadsheets.Values

	resp, err := vals.Append(id, "Sheet1!A1:Z", &sheets.ValueRange{Values: [][]any{
		row("2025-01-01T10:00:00Z", "Ann", "s1"), row("2025-01-01T10:01:00Z", "Bob", "s2"),
	}}).ValueInputOption("RAW").InsertDataOption("INSERT_ROWS").Do()
	check(t, err)
	if resp.Updates.UpdatedRange != "Sheet1!A1:C2" || resp.Updates.UpdatedRows != 2 || resp.TableRange != "" {
		t.Errorf("first append = %+v / %+v", resp, resp.Updates)
	}
	resp, err = vals.Append(id, "Sheet1!A1:Z", &sheets.ValueRange{Values: [][]any{
		row("2025-01-01T10:02:00Z", "=1+1", 42.5, true),
	}}).ValueInputOption("RAW").Do()
	check(t, err)
	if resp.Updates.UpdatedRange != "Sheet1!A3:D3" || resp.TableRange != "Sheet1!A1:C2" {
		t.Errorf("second append = %+v / %+v", resp, resp.Updates)
	}
	_, err = vals.Append(id, "'My Responses'!A:C", &sheets.ValueRange{Values: [][]any{
		row("=SUM(1,2)", "'=quoted"),
	}}).ValueInputOption("USER_ENTERED").Do()
	check(t, err)

	got, err := vals.Get(id, "Sheet1!A1:Z").Do()
	check(t, err)
	want := [][]any{
		row("2025-01-01T10:00:00Z", "Ann", "s1"), row("2025-01-01T10:01:00Z", "Bob", "s2"),
		row("2025-01-01T10:02:00Z", "=1+1", "42.5", "TRUE"),
	}
	// INSERT_ROWS inserted two rows into the grid: 1,002 now.
	if diff := cmp.Diff(want, got.Values); diff != "" || got.Range != "Sheet1!A1:Z1002" {
		t.Errorf("values.get %s (-want +got):\n%s", got.Range, diff)
	}
	got, err = vals.Get(id, "Sheet1!B2:C9").Do()
	check(t, err)
	if diff := cmp.Diff([][]any{row("Bob", "s2"), row("=1+1", "42.5")}, got.Values); diff != "" {
		t.Errorf("values.get B2:C9 (-want +got):\n%s", diff)
	}
	cells := must[[][]googlefake.Cell](t)(e.srv.Sheets.Cells(id, "My Responses"))
	if diff := cmp.Diff([][]googlefake.Cell{{{Value: "=SUM(1,2)", Formula: true}, {Value: "=quoted"}}}, cells); diff != "" {
		t.Errorf("USER_ENTERED cells (-want +got):\n%s", diff)
	}
	if c := must[[][]googlefake.Cell](t)(e.srv.Sheets.Cells(id, "Sheet1")); c[2][1].Formula {
		t.Error("RAW text starting with = became a formula")
	}

	// update and batchUpdate overwrite in place.
	up, err := vals.Update(id, "Sheet1!B1:C1", &sheets.ValueRange{Values: [][]any{row("Anna", "s1b")}}).ValueInputOption("RAW").Do()
	check(t, err)
	if up.UpdatedRange != "Sheet1!B1:C1" || up.UpdatedCells != 2 {
		t.Errorf("update = %+v", up)
	}
	_, err = vals.Update(id, "Sheet1!B1:C1", &sheets.ValueRange{Values: [][]any{row("a", "b", "c")}}).ValueInputOption("RAW").Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("update beyond range: %d, want 400", code)
	}
	bu, err := vals.BatchUpdate(id, &sheets.BatchUpdateValuesRequest{ValueInputOption: "RAW", Data: []*sheets.ValueRange{
		{Range: "Sheet1!E1", Values: [][]any{row("note")}},
		{Range: "'My Responses'!A2:B2", Values: [][]any{row("x", "y")}},
	}}).Do()
	check(t, err)
	if bu.TotalUpdatedCells != 3 || bu.TotalUpdatedSheets != 2 {
		t.Errorf("batchUpdate = %+v", bu)
	}
	rows := must[[][]string](t)(e.srv.Sheets.Rows(id, "Sheet1"))
	wantRows := [][]string{
		{"2025-01-01T10:00:00Z", "Anna", "s1b", "", "note"},
		{"2025-01-01T10:01:00Z", "Bob", "s2"},
		{"2025-01-01T10:02:00Z", "=1+1", "42.5", "TRUE"},
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	// Bad input.
	_, err = vals.Append(id, "Sheet1!A1", &sheets.ValueRange{Values: [][]any{row("x")}}).Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("append without valueInputOption: %d, want 400", code)
	}
	_, err = vals.Get(id, "Nope!A1:B2").Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("unknown sheet: %d, want 400", code)
	}
	st := e.srv.Sheets.Stats()
	// Three appends, two updates, one batchUpdate and one append refused
	// for its missing option: Google counts every request against the
	// quota, refused ones too.
	if st.WriteCalls != 7 || st.RowsWritten != 2+1+1+1+2 {
		t.Errorf("stats = %+v, want 7 writes, 7 rows", st)
	}
}

func TestSheetsInsertRows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	vals := e.sheets.Spreadsheets.Values
	for _, tc := range []struct {
		option string
		want   [][]string
	}{
		{"OVERWRITE", [][]string{{"a"}, {"b"}, {"new", "", "", "", "aside"}}},
		{"INSERT_ROWS", [][]string{{"a"}, {"b"}, {"new"}, {"", "", "", "", "aside"}}},
	} {
		id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, tc.option))
		_, err := vals.BatchUpdate(id, &sheets.BatchUpdateValuesRequest{ValueInputOption: "RAW", Data: []*sheets.ValueRange{
			{Range: "Sheet1!A1:A2", Values: [][]any{row("a"), row("b")}},
			{Range: "Sheet1!E3", Values: [][]any{row("aside")}},
		}}).Do()
		check(t, err)
		_, err = vals.Append(id, "Sheet1!A:C", &sheets.ValueRange{Values: [][]any{row("new")}}).
			ValueInputOption("RAW").InsertDataOption(tc.option).Do()
		check(t, err)
		if diff := cmp.Diff(tc.want, must[[][]string](t)(e.srv.Sheets.Rows(id, "Sheet1"))); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.option, diff)
		}
	}
}

func TestSheetsWriteQuota(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, SheetsWriteLimit: 5, SheetsWindow: 600 * time.Millisecond})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Quota"))
	appendRow := func() error {
		_, err := e.sheets.Spreadsheets.Values.Append(id, "Sheet1!A1:Z", &sheets.ValueRange{Values: [][]any{row("x")}}).
			ValueInputOption("RAW").Do()
		return err
	}
	for i := range 5 {
		if err := appendRow(); err != nil {
			t.Fatalf("write %d: %v", i+1, err)
		}
		clk.Advance(100 * time.Millisecond)
	}
	err := appendRow()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) || gerr.Code != 429 || !strings.Contains(gerr.Body, "RESOURCE_EXHAUSTED") {
		t.Fatalf("6th write in the window: %v, want 429 RESOURCE_EXHAUSTED", err)
	}
	// Reads do not count.
	_, err = e.sheets.Spreadsheets.Values.Get(id, "Sheet1").Do()
	check(t, err)
	// Refused calls count too (the stricter reading of "requests per
	// minute"): at t=600ms the write of t=0 has left, but the window holds
	// t=100..400 and the refusal of t=500: a refusal again.
	clk.Advance(100 * time.Millisecond)
	if code, _ := apiCode(t, appendRow()); code != 429 {
		t.Fatalf("write at t=600ms, the refused one still counting: %d, want 429", code)
	}
	// At t=700ms: t=200..400 and the refusals of t=500 and t=600.
	clk.Advance(100 * time.Millisecond)
	if code, _ := apiCode(t, appendRow()); code != 429 {
		t.Fatalf("write at t=700ms: %d, want 429", code)
	}
	// A client that stops calling for a window gets its turn.
	clk.Advance(600 * time.Millisecond)
	check(t, appendRow())
	st := e.srv.Sheets.Stats()
	if st.WriteCalls != 6 || st.RejectedWrites != 3 || st.RowsWritten != 6 || st.MaxWritesInWindow != 5 {
		t.Errorf("stats = %+v", st)
	}
	if got := len(must[[][]string](t)(e.srv.Sheets.Rows(id, "Sheet1"))); got != 6 {
		t.Errorf("rows = %d, want 6 (rejected writes must not land)", got)
	}
	// Another account has its own quota.
	_, bobSheets := e.clients(t, e.srv.AddAccount(bob))
	check(t, e.srv.Sheets.Share(id, bob))
	_, err = bobSheets.Spreadsheets.Values.Append(id, "Sheet1!A1", &sheets.ValueRange{Values: [][]any{row("bob")}}).ValueInputOption("RAW").Do()
	check(t, err)
}

func TestSheetsMaxWritesInWindow(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, SheetsWriteLimit: -1, SheetsWindow: 600 * time.Millisecond})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Burst"))
	burst := func(n int) {
		for range n {
			_, err := e.sheets.Spreadsheets.Values.Update(id, "Sheet1!A1", &sheets.ValueRange{Values: [][]any{row("x")}}).
				ValueInputOption("RAW").Do()
			check(t, err)
		}
	}
	burst(3)                            // t=0
	clk.Advance(400 * time.Millisecond) //
	burst(3)                            // t=400: 6 within 600 ms
	clk.Advance(400 * time.Millisecond) //
	burst(2)                            // t=800: the window (200, 800] holds 5
	if got := e.srv.Sheets.MaxWritesInWindow(ann); got != 6 {
		t.Errorf("max writes in a window = %d, want 6", got)
	}
	if got := e.srv.Sheets.Stats().MaxWritesInWindow; got != 6 {
		t.Errorf("stats max = %d, want 6", got)
	}
}
