package bench

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"mailroom/internal/googlefake"
)

// sheetsGridRows is how many rows go into one fresh sheet of 1,000 rows:
// the write that passes row 1,000 needs the grid grown first.
const sheetsGridRows = 2500

// benchSheetsGrid sends 2,500 submissions to one form on a fresh sheet
// (Google's 1,000 x 26 grid) as fast as the API takes them, at serve's
// Sheets settings in real time (flush delay 10s, threshold 500, Google's
// quotas by the real minute: no compression, which would stretch the
// burst against the flush delay), and adds its figures to r: values
// writes and grows apart against their targets, reads, the time to the
// last row, and whether every row landed once and in order.
func benchSheetsGrid(ctx context.Context, r *Result) error {
	fake, err := startSheetsTimedFake(googlefake.Options{}) // the strict emulator, Google's quotas
	if err != nil {
		return err
	}
	defer fake.Close()
	_, api, diff, stop, err := startSheetsBenchApp(ctx, fake.url, nil)
	if err != nil {
		return err
	}
	defer stop()
	const email = "grid@example.com"
	forms, err := sheetsBenchForms(ctx, api, fake.Server, email, 1, nil)
	if err != nil {
		return err
	}
	fake.ResetCounters()
	start := time.Now()
	if _, err := sheetsSubmitMany(ctx, api, forms, sheetsGridRows, 32); err != nil {
		return err
	}
	landed, err := fake.waitLanded(ctx, sheetsGridRows, 10*time.Minute)
	if err != nil {
		return err
	}
	var last time.Time
	for _, at := range landed {
		if at.After(last) {
			last = at
		}
	}
	var run sheetsRun
	if err := fake.figures(&run, email); err != nil {
		return err
	}
	if err := sheetsGridCheck(ctx, api, fake.Server, forms[0]); err != nil {
		return err
	}
	need := (sheetsGridRows + sheetsStoryThreshold - 1) / sheetsStoryThreshold
	r.Notes = append(r.Notes,
		fmt.Sprintf("the 2,500-row figures: %d submissions to one form on a fresh sheet (1,000 x 26, the strict emulator with Google's quotas) from 32 clients as fast as the API takes them, in real time (no compression; serve's flush delay, threshold and quotas); every row is checked in the sheet, once and in submission order", sheetsGridRows),
		settingsNote("the 2,500-row run's app", diff))
	r.addTarget("2,500 rows into a fresh sheet: write calls (values writes)", float64(run.calls), "calls", float64(need+1), false)
	r.addTarget("2,500 rows into a fresh sheet: grid grows", float64(run.grows), "calls", 1, false)
	r.add("2,500 rows into a fresh sheet: read calls (the grid read before the grow, read-backs)", float64(run.reads), "calls")
	r.add("2,500 rows into a fresh sheet: time from the first submission to the last row", last.Sub(start).Seconds(), "s")
	r.addTarget("2,500 rows into a fresh sheet: most write calls in any minute (grows included)", float64(run.maxInWindow), "calls", sheetsStoryWrites, false)
	return nil
}

// sheetsGridCheck checks that the form's sheet holds each of its written
// rows once, in submission order (ids grow in commit order), and nothing
// else.
func sheetsGridCheck(ctx context.Context, api sheetsAPI, fake *googlefake.Server, formID string) error {
	var f struct {
		SpreadsheetID string `json:"spreadsheetId"`
		Sheet         string `json:"sheet"`
		RowsWritten   int    `json:"rowsWritten"`
	}
	// The rows are in the sheet; their bookkeeping commits a moment later.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := api.do(ctx, http.MethodGet, "/api/v1/forms/"+formID, nil, http.StatusOK, &f); err != nil {
			return err
		}
		if f.RowsWritten >= sheetsGridRows || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	rows, err := fake.Sheets.Rows(f.SpreadsheetID, f.Sheet)
	if err != nil {
		return err
	}
	if len(rows) != sheetsGridRows || f.RowsWritten != sheetsGridRows {
		return fmt.Errorf("the sheet holds %d rows and the form counts %d written, want %d", len(rows), f.RowsWritten, sheetsGridRows)
	}
	prev := ""
	for i, row := range rows {
		id := row[len(row)-1]
		if id <= prev {
			return fmt.Errorf("row %d: submission %s after %s: out of order or twice", i+1, id, prev)
		}
		prev = id
	}
	return nil
}
