package google

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"mailroom/internal/googlefake"
)

// The Sheets adapter shares the Gmail adapter's call rules: a 401 refreshes
// the token and tries again, a second 401 reports the grant revoked.
func TestSheetsRefreshesThenReportsARevokedGrant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	book, err := fake.Sheets.CreateSpreadsheet(ann, "Forms", "Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1})
	ts := c.TokenSource(Token{RefreshToken: refresh}, nil)
	var revoked atomic.Int32
	ts.OnRevoked(func(error) { revoked.Add(1) })
	sh, err := c.Sheets(ctx, ts)
	if err != nil {
		t.Fatal(err)
	}
	row := [][]string{{"a", "b"}}

	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 401, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := sh.WriteRange(ctx, book, "Sheet1!A1:B1", row); err != nil || revoked.Load() != 0 {
		t.Fatalf("after one 401: %v, %d revoked reports; want the write through a new token", err, revoked.Load())
	}

	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodValuesUpdate, Code: 401, Times: 2}); err != nil {
		t.Fatal(err)
	}
	err = sh.WriteRange(ctx, book, "Sheet1!A2:B2", row)
	if !errors.Is(err, ErrRevoked) || !IsPermanent(err) {
		t.Errorf("after two 401s: %v, want permanent ErrRevoked", err)
	}
	if n := revoked.Load(); n != 1 {
		t.Errorf("%d revoked reports, want 1", n)
	}
}

// Tabs reads the grids, Grow appends to one, and Google's answers map to
// the sentinels the pipeline acts on: a range past the grid, a missing tab,
// the cell cap, a deleted spreadsheet and access taken away.
func TestSheetsGridAndSentinels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	book, err := fake.Sheets.CreateSpreadsheet(ann, "Forms", "Sheet1", "Big")
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1})
	sh, err := c.Sheets(ctx, c.TokenSource(Token{RefreshToken: refresh}, nil))
	if err != nil {
		t.Fatal(err)
	}
	tabs, err := sh.Tabs(ctx, book)
	if err != nil || len(tabs) != 2 || tabs[0] != (Tab{ID: 0, Title: "Sheet1", Rows: 1000, Cols: 26, Spreadsheet: "Forms"}) || tabs[1].Title != "Big" || tabs[1].ID == 0 {
		t.Fatalf("tabs %+v %v", tabs, err)
	}
	if err := sh.WriteRange(ctx, book, "'Sheet1'!A1001:B1001", [][]string{{"a", "b"}}); !errors.Is(err, ErrGridLimit) {
		t.Errorf("write past the grid: %v, want ErrGridLimit", err)
	}
	if err := sh.Grow(ctx, book, 0, 500, 4); err != nil {
		t.Fatal(err)
	}
	if tabs, _ := sh.Tabs(ctx, book); tabs[0].Rows != 1500 || tabs[0].Cols != 30 {
		t.Errorf("after Grow: %+v, want 1500x30", tabs[0])
	}
	if err := sh.WriteRange(ctx, book, "'Sheet1'!A1500:AD1500", [][]string{make([]string, 30)}); err != nil {
		t.Errorf("write in the grown grid: %v", err)
	}
	if _, err := sh.ReadRange(ctx, book, "'Nope'!A1:B2"); !errors.Is(err, ErrSheetMissing) {
		t.Errorf("missing tab: %v, want ErrSheetMissing", err)
	}
	if err := fake.Sheets.SetGridSize(book, "Big", 382_000, 26); err != nil {
		t.Fatal(err)
	}
	if err := sh.Grow(ctx, book, tabs[1].ID, 10_000, 0); !errors.Is(err, ErrCellLimit) {
		t.Errorf("grow past the cap: %v, want ErrCellLimit", err)
	}
	if err := fake.Sheets.Unshare(book, ann); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.Tabs(ctx, book); !errors.Is(err, ErrSpreadsheetForbidden) {
		t.Errorf("unshared: %v, want ErrSpreadsheetForbidden", err)
	}
	if err := fake.Sheets.DeleteSpreadsheet(book); err != nil {
		t.Fatal(err)
	}
	if _, err := sh.ReadRange(ctx, book, "'Sheet1'!A1"); !errors.Is(err, ErrSpreadsheetNotFound) {
		t.Errorf("deleted: %v, want ErrSpreadsheetNotFound", err)
	}
}
