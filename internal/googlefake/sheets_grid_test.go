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

// apiErr returns the *googleapi.Error of err, with its status read from
// the body.
func apiErr(t *testing.T, err error) *googleapi.Error {
	t.Helper()
	var gerr *googleapi.Error
	if !errors.As(err, &gerr) {
		t.Fatalf("want a *googleapi.Error, got %T: %v", err, err)
	}
	return gerr
}

func wantAPIError(t *testing.T, what string, err error, code int, status, message string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %d %s", what, code, status)
	}
	g := apiErr(t, err)
	if g.Code != code || !strings.Contains(g.Body, `"status":"`+status+`"`) || (message != "" && g.Message != message) {
		t.Errorf("%s: %d %q (body %s), want %d %s %q", what, g.Code, g.Message, g.Body, code, status, message)
	}
}

func gridSize(t *testing.T, e *env, id, sheet string) (int, int) {
	t.Helper()
	rows, cols, err := e.srv.Sheets.GridSize(id, sheet)
	check(t, err)
	return rows, cols
}

// A new sheet is 1,000 x 26; values.update and values.batchUpdate past it
// are refused with Google's message and change nothing; values.get with a
// cell past it is refused too, one with an open end reads to the edge.
func TestSheetsGridRefusesOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Grid"))
	vals := e.sheets.Spreadsheets.Values
	ss, err := e.sheets.Spreadsheets.Get(id).Do()
	check(t, err)
	if gp := ss.Sheets[0].Properties.GridProperties; gp.RowCount != 1000 || gp.ColumnCount != 26 {
		t.Fatalf("new sheet grid = %dx%d, want 1000x26", gp.RowCount, gp.ColumnCount)
	}
	five := &sheets.ValueRange{Values: [][]any{row("a", "b", "c", "d", "e")}}

	_, err = vals.Update(id, "Sheet1!A1000:E1000", five).ValueInputOption("RAW").Do()
	check(t, err)
	_, err = vals.Update(id, "Sheet1!A1001:E1001", five).ValueInputOption("RAW").Do()
	wantAPIError(t, "update past the rows", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!A1001:E1001) exceeds grid limits. Max rows: 1000, max columns: 26")
	_, err = vals.Update(id, "Sheet1!A999:A", &sheets.ValueRange{Values: [][]any{row("x"), row("y"), row("z")}}).ValueInputOption("RAW").Do()
	wantAPIError(t, "update whose values run past the rows", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!A999:A1001) exceeds grid limits. Max rows: 1000, max columns: 26")
	_, err = vals.Update(id, "Sheet1!X1:1", five).ValueInputOption("RAW").Do()
	wantAPIError(t, "update past the columns", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!X1:AB1) exceeds grid limits. Max rows: 1000, max columns: 26")

	_, err = vals.BatchUpdate(id, &sheets.BatchUpdateValuesRequest{ValueInputOption: "RAW", Data: []*sheets.ValueRange{
		{Range: "Sheet1!A1", Values: [][]any{row("in the grid")}},
		{Range: "Sheet1!A1001", Values: [][]any{row("past it")}},
	}}).Do()
	wantAPIError(t, "batchUpdate with one range past the grid", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!A1001:A1001) exceeds grid limits. Max rows: 1000, max columns: 26")
	if rows := must[[][]string](t)(e.srv.Sheets.Rows(id, "Sheet1")); rows[0] != nil && len(rows[0]) > 0 {
		t.Errorf("a refused batchUpdate wrote row 1: %q", rows[0])
	}

	_, err = vals.Get(id, "Sheet1!A1001:E1001").Do()
	wantAPIError(t, "get past the grid", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!A1001:E1001) exceeds grid limits. Max rows: 1000, max columns: 26")
	_, err = vals.Get(id, "Sheet1!A990:E2000").Do()
	wantAPIError(t, "get across the rows' edge", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!A990:E2000) exceeds grid limits. Max rows: 1000, max columns: 26")
	_, err = vals.Get(id, "Sheet1!Y1:AB2").Do()
	wantAPIError(t, "get across the columns' edge", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!Y1:AB2) exceeds grid limits. Max rows: 1000, max columns: 26")
	// An open end reads to the edge.
	for _, r := range []string{"Sheet1!A990:E", "Sheet1!A990:1000", "Sheet1"} {
		got, err := vals.Get(id, r).Do()
		check(t, err)
		if last := got.Values[len(got.Values)-1]; len(last) != 5 || last[4] != "e" {
			t.Errorf("get %s = %s %q, want it to end with row 1000", r, got.Range, got.Values)
		}
	}
	got, err := vals.Get(id, "Sheet1!A990:E1000").Do()
	check(t, err)
	if got.Range != "Sheet1!A990:E1000" || len(got.Values) != 11 || got.Values[10][4] != "e" {
		t.Errorf("get up to the edge = %s %q, want Sheet1!A990:E1000 ending in row 1000", got.Range, got.Values)
	}
	if r, c := gridSize(t, e, id, "Sheet1"); r != 1000 || c != 26 {
		t.Errorf("grid after refused writes = %dx%d, want 1000x26", r, c)
	}
}

// values.append is the one values call that grows the grid.
func TestSheetsAppendGrowsGrid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{SheetsGridRows: 3, SheetsGridColumns: 2})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Append"))
	resp, err := e.sheets.Spreadsheets.Values.Append(id, "Sheet1!A1", &sheets.ValueRange{Values: [][]any{
		row(1, 2, 3), row(4), row(5), row(6), row(7),
	}}).ValueInputOption("RAW").Do()
	check(t, err)
	if resp.Updates.UpdatedRange != "Sheet1!A1:C5" {
		t.Errorf("append = %s, want Sheet1!A1:C5", resp.Updates.UpdatedRange)
	}
	if r, c := gridSize(t, e, id, "Sheet1"); r != 5 || c != 3 {
		t.Errorf("grid after append = %dx%d, want 5x3", r, c)
	}
	_, err = e.sheets.Spreadsheets.Values.Update(id, "Sheet1!A6", &sheets.ValueRange{Values: [][]any{row("x")}}).ValueInputOption("RAW").Do()
	wantAPIError(t, "update below the grown grid", err, 400, "INVALID_ARGUMENT",
		"Range ('Sheet1'!A6:A6) exceeds grid limits. Max rows: 5, max columns: 3")
}

// spreadsheets.batchUpdate grows and shrinks grids with appendDimension,
// insertDimension and updateSheetProperties (with its field mask), all or
// nothing per call.
func TestSheetsBatchUpdateGrid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Grow", "Sheet1", "Other"))
	other := must[*sheets.Spreadsheet](t)(e.sheets.Spreadsheets.Get(id).Do()).Sheets[1].Properties.SheetId
	batch := func(reqs ...*sheets.Request) error {
		_, err := e.sheets.Spreadsheets.BatchUpdate(id, &sheets.BatchUpdateSpreadsheetRequest{Requests: reqs}).Do()
		return err
	}
	appendDim := func(sheetID int64, dim string, n int64) *sheets.Request {
		return &sheets.Request{AppendDimension: &sheets.AppendDimensionRequest{SheetId: sheetID, Dimension: dim, Length: n}}
	}

	check(t, batch(appendDim(0, "ROWS", 1500), appendDim(0, "COLUMNS", 4)))
	if r, c := gridSize(t, e, id, "Sheet1"); r != 2500 || c != 30 {
		t.Fatalf("grid after appendDimension = %dx%d, want 2500x30", r, c)
	}
	_, err := e.sheets.Spreadsheets.Values.Update(id, "Sheet1!AD2500", &sheets.ValueRange{Values: [][]any{row("corner")}}).ValueInputOption("RAW").Do()
	check(t, err)

	// insertDimension shifts the cells below.
	_, err = e.sheets.Spreadsheets.Values.Update(id, "Other!A1:A2", &sheets.ValueRange{Values: [][]any{row("one"), row("two")}}).ValueInputOption("RAW").Do()
	check(t, err)
	check(t, batch(&sheets.Request{InsertDimension: &sheets.InsertDimensionRequest{
		Range: &sheets.DimensionRange{SheetId: other, Dimension: "ROWS", StartIndex: 1, EndIndex: 3}, InheritFromBefore: true,
	}}))
	if diff := cmp.Diff([][]string{{"one"}, {}, {}, {"two"}}, must[[][]string](t)(e.srv.Sheets.Rows(id, "Other"))); diff != "" {
		t.Errorf("rows after insertDimension (-want +got):\n%s", diff)
	}
	if r, _ := gridSize(t, e, id, "Other"); r != 1002 {
		t.Errorf("rows after inserting 2 = %d, want 1002", r)
	}

	// updateSheetProperties sets what its mask names, only that.
	check(t, batch(&sheets.Request{UpdateSheetProperties: &sheets.UpdateSheetPropertiesRequest{
		Properties: &sheets.SheetProperties{SheetId: other, Title: "ignored", GridProperties: &sheets.GridProperties{RowCount: 4000, ColumnCount: 3}},
		Fields:     "gridProperties.rowCount",
	}}))
	if r, c := gridSize(t, e, id, "Other"); r != 4000 || c != 26 {
		t.Errorf("grid after rowCount 4000 = %dx%d, want 4000x26 (columns not in the mask)", r, c)
	}
	err = batch(&sheets.Request{UpdateSheetProperties: &sheets.UpdateSheetPropertiesRequest{
		Properties: &sheets.SheetProperties{SheetId: other, GridProperties: &sheets.GridProperties{RowCount: 5000}},
	}})
	wantAPIError(t, "updateSheetProperties without a mask", err, 400, "INVALID_ARGUMENT", "")

	// All or nothing: a bad second request leaves the first unapplied.
	err = batch(appendDim(0, "ROWS", 100), appendDim(987654, "ROWS", 100))
	wantAPIError(t, "batch with an unknown sheet", err, 400, "INVALID_ARGUMENT", "Invalid requests[1].appendDimension: No grid with id: 987654")
	if r, _ := gridSize(t, e, id, "Sheet1"); r != 2500 {
		t.Errorf("rows after a refused batch = %d, want 2500 (nothing applied)", r)
	}
	err = batch(appendDim(0, "ROWS", 0))
	wantAPIError(t, "appendDimension of 0", err, 400, "INVALID_ARGUMENT", "")
	err = batch(&sheets.Request{AddSheet: &sheets.AddSheetRequest{}})
	wantAPIError(t, "a request the emulator does not serve", err, 400, "INVALID_ARGUMENT", "")

	st := e.srv.Sheets.Stats()
	if st.GridGrows != 3 {
		t.Errorf("grid grows = %d, want 3 (appendDimension, insertDimension, rowCount)", st.GridGrows)
	}
}

// A spreadsheet holds at most 10,000,000 cells over all its sheets: a grow
// past it, by batchUpdate or by append, is refused and changes nothing.
func TestSheetsCellCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Full", "Sheet1", "Small"))
	// 9,974,000 + 26,000 (Small) = 10,000,000 cells: full.
	check(t, e.srv.Sheets.SetGridSize(id, "Sheet1", 383_615, 26))
	const capMsg = "This action would increase the number of cells in the workbook above the limit of 10000000 cells."
	_, err := e.sheets.Spreadsheets.BatchUpdate(id, &sheets.BatchUpdateSpreadsheetRequest{Requests: []*sheets.Request{
		{AppendDimension: &sheets.AppendDimensionRequest{SheetId: 0, Dimension: "ROWS", Length: 1}},
	}}).Do()
	wantAPIError(t, "appendDimension past the cap", err, 400, "INVALID_ARGUMENT", capMsg)
	_, err = e.sheets.Spreadsheets.Values.Append(id, "Small!A1000", &sheets.ValueRange{Values: [][]any{row("x"), row("y")}}).ValueInputOption("RAW").Do()
	wantAPIError(t, "append past the cap", err, 400, "INVALID_ARGUMENT", capMsg)
	if r, _ := gridSize(t, e, id, "Sheet1"); r != 383_615 {
		t.Errorf("rows after refused grow = %d", r)
	}
	// Shrinking one sheet makes room in another.
	_, err = e.sheets.Spreadsheets.BatchUpdate(id, &sheets.BatchUpdateSpreadsheetRequest{Requests: []*sheets.Request{
		{UpdateSheetProperties: &sheets.UpdateSheetPropertiesRequest{
			Properties: &sheets.SheetProperties{SheetId: 0, GridProperties: &sheets.GridProperties{RowCount: 383_000}},
			Fields:     "gridProperties.rowCount"}},
		{AppendDimension: &sheets.AppendDimensionRequest{SheetId: 0, Dimension: "ROWS", Length: 615}},
	}}).Do()
	check(t, err)
}

// Google counts read and write requests apart, per user and per project
// (60/60 and 300/300 a minute), and answers 429 RESOURCE_EXHAUSTED over
// either.
func TestSheetsReadAndProjectQuotas(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now, SheetsReadLimit: 3, SheetsWriteLimit: 3,
		SheetsProjectReadLimit: 4, SheetsProjectWriteLimit: 5, SheetsWindow: time.Second})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Quota"))
	_, bobSheets := e.clients(t, e.srv.AddAccount(bob))
	check(t, e.srv.Sheets.Share(id, bob))
	read := func(s *sheets.Service) error {
		_, err := s.Spreadsheets.Values.Get(id, "Sheet1!A1").Do()
		return err
	}
	write := func(s *sheets.Service) error {
		_, err := s.Spreadsheets.Values.Update(id, "Sheet1!A1", &sheets.ValueRange{Values: [][]any{row("x")}}).ValueInputOption("RAW").Do()
		return err
	}
	for range 3 {
		check(t, read(e.sheets))
	}
	wantAPIError(t, "4th read of a user", read(e.sheets), 429, "RESOURCE_EXHAUSTED",
		"Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute per user' of service 'sheets.googleapis.com' for consumer 'project_number:000000000000'.")
	// spreadsheets.get is a read too.
	_, err := e.sheets.Spreadsheets.Get(id).Do()
	wantAPIError(t, "spreadsheets.get over the read quota", err, 429, "RESOURCE_EXHAUSTED", "")
	// Writes have their own budget.
	for range 3 {
		check(t, write(e.sheets))
	}
	// Refused requests count too, against the project as well: Ann's two
	// refused reads make four in the project's window, so Bob's first read
	// is over the project's limit.
	wantAPIError(t, "a read of the project after another user's refusals", read(bobSheets), 429, "RESOURCE_EXHAUSTED",
		"Quota exceeded for quota metric 'Read requests' and limit 'Read requests per minute' of service 'sheets.googleapis.com' for consumer 'project_number:000000000000'.")
	check(t, write(bobSheets))
	check(t, write(bobSheets))
	wantAPIError(t, "6th write of the project", write(bobSheets), 429, "RESOURCE_EXHAUSTED", "")
	clk.Advance(time.Second)
	check(t, read(bobSheets))
	check(t, write(e.sheets))
	st := e.srv.Sheets.Stats()
	if st.ProjectMaxReadsInWindow != 3 || st.ProjectMaxWritesInWindow != 5 || st.MaxReadsInWindow != 3 || st.MaxWritesInWindow != 3 {
		t.Errorf("stats = %+v", st)
	}
	if e.srv.Sheets.MaxReadsInWindow(bob) != 1 || e.srv.Sheets.MaxWritesInWindow(bob) != 2 {
		t.Errorf("bob's max in window: reads %d writes %d, want 1 and 2", e.srv.Sheets.MaxReadsInWindow(bob), e.srv.Sheets.MaxWritesInWindow(bob))
	}
}

// A spreadsheet deleted answers 404, a tab renamed or deleted 400 "Unable
// to parse range", access taken away 403 PERMISSION_DENIED until shared
// again.
func TestSheetsGoneMissingTabAndRevoked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Sheets.CreateSpreadsheet(ann, "Changes", "Responses", "Other"))
	get := func(rng string) error {
		_, err := e.sheets.Spreadsheets.Values.Get(id, rng).Do()
		return err
	}
	check(t, get("Responses!A1:C3"))

	check(t, e.srv.Sheets.RenameSheet(id, "Responses", "Answers"))
	wantAPIError(t, "renamed tab", get("Responses!A1:C3"), 400, "INVALID_ARGUMENT", "Unable to parse range: Responses!A1:C3")
	check(t, e.srv.Sheets.RenameSheet(id, "Answers", "Responses"))
	check(t, get("Responses!A1:C3"))
	check(t, e.srv.Sheets.RenameSheet(id, "Other", ""))
	wantAPIError(t, "deleted tab", get("Other!A1"), 400, "INVALID_ARGUMENT", "Unable to parse range: Other!A1")

	check(t, e.srv.Sheets.Unshare(id, ann))
	wantAPIError(t, "unshared", get("Responses!A1:C3"), 403, "PERMISSION_DENIED", "The caller does not have permission")
	_, err := e.sheets.Spreadsheets.Values.Update(id, "Responses!A1", &sheets.ValueRange{Values: [][]any{row("x")}}).ValueInputOption("RAW").Do()
	wantAPIError(t, "unshared write", err, 403, "PERMISSION_DENIED", "")
	check(t, e.srv.Sheets.Share(id, ann))
	check(t, get("Responses!A1:C3"))

	check(t, e.srv.Sheets.DeleteSpreadsheet(id))
	wantAPIError(t, "deleted spreadsheet", get("Responses!A1:C3"), 404, "NOT_FOUND", "Requested entity was not found.")
	_, err = e.sheets.Spreadsheets.Get(id).Do()
	wantAPIError(t, "deleted spreadsheet get", err, 404, "NOT_FOUND", "")
}

// Fill (a test control: a sheet in use) puts rows below a tab's data
// without spending quota, and refuses rows past the grid as Google's grid
// does.
func TestSheetsFill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{SheetsGridRows: 5, SheetsGridColumns: 3, SheetsWriteLimit: 1})
	id, err := e.srv.Sheets.CreateSpreadsheet("fill@example.com", "In use")
	check(t, err)
	first, err := e.srv.Sheets.Fill(id, "Sheet1", [][]string{{"a", "1"}, {"b", "2"}})
	if err != nil || first != 1 {
		t.Fatalf("fill: first row %d, %v", first, err)
	}
	if first, err = e.srv.Sheets.Fill(id, "Sheet1", [][]string{{"c"}, {"d"}, {"e"}}); err != nil || first != 3 {
		t.Fatalf("second fill: first row %d, %v", first, err)
	}
	if _, err := e.srv.Sheets.Fill(id, "Sheet1", [][]string{{"f"}}); err == nil {
		t.Error("a sixth row filled into a 5-row grid")
	}
	if _, err := e.srv.Sheets.Fill(id, "Sheet1", [][]string{{"a", "b", "c", "d"}}); err == nil {
		t.Error("a 4-cell row filled into a 3-column grid")
	}
	rows, err := e.srv.Sheets.Rows(id, "Sheet1")
	check(t, err)
	if diff := cmp.Diff([][]string{{"a", "1"}, {"b", "2"}, {"c"}, {"d"}, {"e"}}, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	if st := e.srv.Sheets.Stats(); st.WriteCalls != 0 || st.RowsWritten != 0 {
		t.Errorf("fill counted as calls: %+v", st)
	}
}
