package sheets

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"mailroom/queue/google"
	"mailroom/store"
)

// grow makes the grid of the form's sheet hold the pending write before it
// is made. Google refuses a values.update past a sheet's grid (a new sheet
// is 1,000 x 26) and only values.append grows it, which mailroom never
// uses (it is not idempotent). So:
//
//  1. Read the grid (spreadsheets.get: one read request). When it already
//     holds the write (the owner grew it, or an earlier grow of this plan
//     landed but was not recorded), record it and stop.
//  2. Otherwise grow it to the size planned with the write (its last row
//     plus GrowStep rows, so one grow serves many writes; the form's
//     width in columns) in one spreadsheets.batchUpdate of appendDimension
//     requests, from the account's write quota. When that size would pass
//     Google's 10,000,000 cells, only to what the write needs; when even
//     that passes it, the form waits (google.ErrCellLimit).
//  3. Record the new grid in bbolt.
//
// appendDimension is not idempotent, so a grow is never repeated blindly:
// after a crash, a timeout or a lost answer between 2 and 3, the next run
// starts again at 1, finds the grid grown and only records it. Exactly one
// grow lands per plan that needs one.
func (p *Pipeline) grow(ctx context.Context, log *slog.Logger, client SheetsClient, form store.Form, w store.SheetWrites) error {
	pw := *w.Pending
	var tabs []google.Tab
	err := p.spend(ctx, p.reads, form.AccountID, form.ID, p.shortWait(), func(ctx context.Context) (err error) {
		tabs, err = client.Tabs(ctx, form.SpreadsheetID)
		return err
	})
	if err != nil {
		return fmt.Errorf("sheets: flush %s: read the grid: %w", form.ID, err)
	}
	i := slices.IndexFunc(tabs, func(t google.Tab) bool { return t.Title == form.Sheet })
	if i < 0 {
		i = slices.IndexFunc(tabs, func(t google.Tab) bool { return strings.EqualFold(t.Title, form.Sheet) })
	}
	if i < 0 {
		return fmt.Errorf("sheets: flush %s: sheet %q: %w", form.ID, form.Sheet, google.ErrSheetMissing)
	}
	tab := tabs[i]
	needRows, needCols := pw.LastRow(), width(form)
	if tab.Rows >= needRows && tab.Cols >= needCols {
		return p.recordGrid(form.ID, tab.Rows, tab.Cols, false)
	}
	rows := max(tab.Rows, needRows, pw.GrowRows)
	if pw.GrowRows == 0 { // planned while the grid was unknown
		rows = max(tab.Rows, needRows+p.cfg.GrowStep)
	}
	cols := max(tab.Cols, needCols, pw.GrowCols)
	cells := 0
	for _, t := range tabs {
		cells += t.Rows * t.Cols
	}
	others := cells - tab.Rows*tab.Cols
	if others+rows*cols > google.MaxCells {
		rows = max(tab.Rows, needRows)
		if others+rows*cols > google.MaxCells {
			return fmt.Errorf("sheets: flush %s: %d more rows: %w", form.ID, rows-tab.Rows, google.ErrCellLimit)
		}
	}

	start := time.Now()
	err = p.spend(ctx, p.quota, form.AccountID, form.ID, p.shortWait(), func(ctx context.Context) error {
		return client.Grow(ctx, form.SpreadsheetID, tab.ID, rows-tab.Rows, cols-tab.Cols)
	})
	if err != nil {
		return fmt.Errorf("sheets: flush %s: grow: %w", form.ID, err)
	}
	p.metrics.grows.Inc()
	log.Info("grid grown", "sheet", form.Sheet, "rows", rows, "cols", cols, "from_rows", tab.Rows, "from_cols", tab.Cols, "took", time.Since(start))
	return p.recordGrid(form.ID, rows, cols, true)
}

func (p *Pipeline) recordGrid(formID string, rows, cols int, grown bool) error {
	if err := p.db.Update(func(tx *store.Tx) error { return tx.SheetGrid(formID, rows, cols, grown) }); err != nil {
		return fmt.Errorf("sheets: flush %s: record the grid: %w", formID, err)
	}
	return nil
}
