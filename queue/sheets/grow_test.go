package sheets

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/store"
)

// submitMany submits n rows to the form from a few goroutines and returns
// the accepted submissions.
func (e *env) submitMany(formID string, n int, answers func(i int) map[string]string) []store.Submission {
	e.t.Helper()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		subs []store.Submission
	)
	const workers = 10
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				s := e.submit(formID, answers(i))
				mu.Lock()
				subs = append(subs, s)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return subs
}

// TestGrow2500RowsIntoFreshSheet: 2,500 rows into a new sheet of 1,000
// rows land once and in order; the grid is grown once, before the first
// write past row 1,000, in one generous step; the grow spends a write of
// the quota but is not a values write.
func TestGrow2500RowsIntoFreshSheet(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 20 * time.Second}})
	a := e.account("grid@example.com")
	f := e.form(a, "name", "email")
	if rows, cols, err := e.fake.Sheets.GridSize(f.SpreadsheetID, f.Sheet); err != nil || rows != 1000 || cols != 26 {
		t.Fatalf("fresh sheet grid %dx%d %v, want Google's 1000x26", rows, cols, err)
	}
	subs := e.submitMany(f.ID, 2500, func(i int) map[string]string { return map[string]string{"name": fmt.Sprint("n", i)} })
	testkit.Eventually(t, 30*time.Second, "2500 rows written", func() bool { return e.formView(f.ID).RowsWritten == 2500 })
	e.checkRows(f, subs)
	if n := e.fake.Calls(googlefake.MethodValuesUpdate); n != 5 {
		t.Errorf("%d values.update calls, want 5 (500 rows each)", n)
	}
	if n := e.fake.Calls(googlefake.MethodSpreadsheetsBatchUpdate); n != 1 {
		t.Errorf("%d spreadsheets.batchUpdate calls, want 1 grow", n)
	}
	rows, _, err := e.fake.Sheets.GridSize(f.SpreadsheetID, f.Sheet)
	if err != nil || rows != 1500+2000 {
		t.Errorf("grid rows %d %v, want 3500 (row 1500 plus the step of 4 x 500)", rows, err)
	}
	v := e.formView(f.ID)
	if v.GridGrows != 1 || v.WriteCalls != 5 || v.LastError != "" {
		t.Errorf("form view: %d grows, %d write calls, error %q; want 1, 5, none", v.GridGrows, v.WriteCalls, v.LastError)
	}
	if g := e.metric("mailroom_sheets_grid_grows_total"); g != 1 {
		t.Errorf("grows metric %v, want 1", g)
	}
	if st := e.fake.Sheets.Stats(); st.RejectedWrites != 0 || st.WriteCalls != 6 {
		t.Errorf("emulator: %d writes (%d refused), want 6 (5 values + 1 grow), none refused", st.WriteCalls, st.RejectedWrites)
	}
}

// TestGrowThirtyColumns: a form of 28 answers (30 cells a row with the
// time and the id) is wider than a new sheet's 26 columns: its first write
// is preceded by a grow of the columns, and every row lands whole.
func TestGrowThirtyColumns(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 200 * time.Millisecond}})
	a := e.account("wide@example.com")
	cols := make([]string, 28)
	for i := range cols {
		cols[i] = fmt.Sprint("q", i+1)
	}
	f := e.form(a, cols...)
	subs := e.submitMany(f.ID, 12, func(i int) map[string]string {
		m := map[string]string{}
		for _, c := range cols {
			m[c] = fmt.Sprint(c, "-", i)
		}
		return m
	})
	testkit.Eventually(t, 10*time.Second, "12 rows written", func() bool { return e.formView(f.ID).RowsWritten == 12 })
	e.checkRows(f, subs)
	got := e.rows(f)
	if len(got[0]) != 30 || !strings.HasPrefix(got[0][29], "") || got[0][28] != "q28-"+strings.TrimPrefix(got[0][1], "q1-") {
		t.Errorf("first row %q: want 30 cells, q28 in AC", got[0])
	}
	if _, c, _ := e.fake.Sheets.GridSize(f.SpreadsheetID, f.Sheet); c != 30 {
		t.Errorf("grid columns %d, want 30", c)
	}
	if v := e.formView(f.ID); v.GridGrows != 1 {
		t.Errorf("%d grows, want 1", v.GridGrows)
	}
}

// TestGrowUnknownOutcomes: a crash between the grow and its record, and a
// grow whose answer is lost after it landed: the next run reads the grid,
// finds it grown and does not grow again; every row lands once, in order.
func TestGrowUnknownOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault *googlefake.Fault
		crash bool
	}{
		{"crash between the grow and the write", nil, true},
		{"500 after the grow landed", &googlefake.Fault{Method: googlefake.MethodSpreadsheetsBatchUpdate, Code: 500, AfterWrite: true, Times: 1}, false},
		{"connection dropped after the grow landed", &googlefake.Fault{Method: googlefake.MethodSpreadsheetsBatchUpdate, Drop: true, AfterWrite: true, Times: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{cfg: Config{FlushDelay: 200 * time.Millisecond, Threshold: 20, GrowStep: 30}, fake: googlefake.Options{SheetsGridRows: 25}})
			if tc.crash {
				crashed := false
				e.p.afterGrow = func() error {
					if !crashed {
						crashed = true
						return errors.New("simulated crash after the grow")
					}
					return nil
				}
			}
			a := e.account("grow@example.com")
			f := e.form(a, "q")
			if tc.fault != nil {
				if _, err := e.fake.InjectFault(*tc.fault); err != nil {
					t.Fatal(err)
				}
			}
			subs := e.submitMany(f.ID, 40, func(i int) map[string]string { return map[string]string{"q": fmt.Sprint(i)} })
			testkit.Eventually(t, 15*time.Second, "40 rows written", func() bool { return e.formView(f.ID).RowsWritten == 40 })
			e.checkRows(f, subs)
			// Rows 21-40 need the grid past 25: one grow to 40 + 30.
			if rows, _, _ := e.fake.Sheets.GridSize(f.SpreadsheetID, f.Sheet); rows != 70 {
				t.Errorf("grid rows %d, want 70 (one grow)", rows)
			}
			if g := e.fake.Sheets.Stats().GridGrows; g != 1 {
				t.Errorf("%d grows landed, want 1", g)
			}
		})
	}
}

// TestGrowPastCellCap: a spreadsheet at Google's 10,000,000 cells cannot
// grow; the write is not attempted and the error says so.
func TestGrowPastCellCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: 100 * time.Millisecond}})
	a := e.account("full@example.com")
	f := e.form(a, "q")
	if err := e.fake.Sheets.SetGridSize(f.SpreadsheetID, f.Sheet, 2, 26); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.Sheets.AddSheet(f.SpreadsheetID, "Big"); err != nil {
		t.Fatal(err)
	}
	if err := e.fake.Sheets.SetGridSize(f.SpreadsheetID, "Big", 384_613, 26); err != nil { // 9,999,938 + 52: 3 more rows pass the cap
		t.Fatal(err)
	}
	// Forget the grid the form learnt at creation, as if the owner had
	// just shrunk it.
	if err := e.db.Update(func(tx *store.Tx) error { return tx.SheetGrid(f.ID, 0, 0, false) }); err != nil {
		t.Fatal(err)
	}
	e.submitMany(f.ID, 5, func(i int) map[string]string { return map[string]string{"q": fmt.Sprint(i)} })
	testkit.Eventually(t, 10*time.Second, "the cap reported", func() bool {
		return strings.Contains(e.formView(f.ID).LastError, "10,000,000 cells")
	})
	if n := e.fake.Calls(googlefake.MethodValuesUpdate); n != 0 {
		t.Errorf("%d writes past a full grid", n)
	}
	if g := e.fake.Sheets.Stats().GridGrows; g != 0 {
		t.Errorf("%d grows", g)
	}
}
