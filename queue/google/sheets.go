package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
	sheetsapi "google.golang.org/api/sheets/v4"
)

// Sheets errors, besides the classes Classify gives.
var (
	// ErrSpreadsheetNotFound: the spreadsheet does not exist (404).
	ErrSpreadsheetNotFound = errors.New("spreadsheet not found")
	// ErrSpreadsheetForbidden: the account may not open the spreadsheet
	// (403 other than a rate limit): it is not shared with it.
	ErrSpreadsheetForbidden = errors.New("the account has no access to the spreadsheet")
	// ErrSheetMissing: the range names a tab the spreadsheet does not have
	// (400 "Unable to parse range"): it was renamed or deleted.
	ErrSheetMissing = errors.New("the spreadsheet has no such sheet")
	// ErrGridLimit: the range lies past its sheet's grid (400 "exceeds
	// grid limits"); the grid must grow first.
	ErrGridLimit = errors.New("the range exceeds the sheet's grid")
	// ErrCellLimit: a grow would take the spreadsheet past Google's
	// 10,000,000 cells (400).
	ErrCellLimit = errors.New("the spreadsheet is at Google's limit of 10,000,000 cells")
)

// MaxCells is the most cells a spreadsheet holds over all its sheets
// (Google Sheets help, "Spreadsheets limits").
const MaxCells = 10_000_000

// Tab is one sheet of a spreadsheet: its id, title and grid.
type Tab struct {
	ID         int64
	Title      string
	Rows, Cols int
	// Spreadsheet is the title of the spreadsheet the tab is in (the same
	// for every tab; Tabs reads it in the same call).
	Spreadsheet string
}

// Tabs returns a spreadsheet's sheets with their grids, in order
// (spreadsheets.get, one read request). ErrSpreadsheetNotFound or
// ErrSpreadsheetForbidden say why it cannot be opened.
func (s *Sheets) Tabs(ctx context.Context, spreadsheetID string) ([]Tab, error) {
	var book *sheetsapi.Spreadsheet
	err := call(ctx, s.c, s.ts, apiSheets, true, func() (err error) {
		book, err = s.svc.Spreadsheets.Get(spreadsheetID).
			Fields("properties.title,sheets.properties(sheetId,title,gridProperties(rowCount,columnCount))").Context(ctx).Do()
		return err
	})
	if err != nil {
		return nil, s.fail("spreadsheets.get "+spreadsheetID, err)
	}
	tabs := make([]Tab, 0, len(book.Sheets))
	for _, sh := range book.Sheets {
		if sh == nil || sh.Properties == nil {
			continue
		}
		t := Tab{ID: sh.Properties.SheetId, Title: sh.Properties.Title}
		if book.Properties != nil {
			t.Spreadsheet = book.Properties.Title
		}
		if g := sh.Properties.GridProperties; g != nil {
			t.Rows, t.Cols = int(g.RowCount), int(g.ColumnCount)
		}
		tabs = append(tabs, t)
	}
	return tabs, nil
}

// Grow appends rows and columns to the end of one sheet's grid in one
// spreadsheets.batchUpdate (appendDimension; one write request, applied
// whole or not at all). It is not idempotent: read the grid (Tabs) before
// growing again after an unknown outcome. ErrCellLimit when the
// spreadsheet would pass Google's cell cap.
func (s *Sheets) Grow(ctx context.Context, spreadsheetID string, sheetID int64, rows, cols int) error {
	var reqs []*sheetsapi.Request
	if rows > 0 {
		reqs = append(reqs, &sheetsapi.Request{AppendDimension: &sheetsapi.AppendDimensionRequest{SheetId: sheetID, Dimension: "ROWS", Length: int64(rows)}})
	}
	if cols > 0 {
		reqs = append(reqs, &sheetsapi.Request{AppendDimension: &sheetsapi.AppendDimensionRequest{SheetId: sheetID, Dimension: "COLUMNS", Length: int64(cols)}})
	}
	if len(reqs) == 0 {
		return nil
	}
	body := &sheetsapi.BatchUpdateSpreadsheetRequest{Requests: reqs}
	err := call(ctx, s.c, s.ts, apiSheets, false, func() error {
		_, err := s.svc.Spreadsheets.BatchUpdate(spreadsheetID, body).Fields("spreadsheetId").Context(ctx).Do()
		return err
	})
	if err != nil {
		return s.fail(fmt.Sprintf("spreadsheets.batchUpdate appendDimension %d rows %d columns", rows, cols), err)
	}
	return nil
}

// Sheets is the Sheets v4 adapter of one account. Cell values always go in
// as RAW (a submitted "=HYPERLINK(...)" stays text) and only ever to an
// explicit range with values.update, never with values.append: append is
// not idempotent, and a retry after a lost answer would add the rows twice.
type Sheets struct {
	c   *Client
	svc *sheetsapi.Service
	ts  *TokenSource
}

// Sheets returns the Sheets adapter of the account whose token source is
// ts.
func (c *Client) Sheets(ctx context.Context, ts *TokenSource) (*Sheets, error) {
	opts := []option.ClientOption{option.WithHTTPClient(c.httpClient(ts))}
	if c.cfg.APIURL != "" {
		opts = append(opts, option.WithEndpoint(c.cfg.APIURL))
	}
	svc, err := sheetsapi.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("google: sheets client: %w", err)
	}
	return &Sheets{c: c, svc: svc, ts: ts}, nil
}

// ReadRange returns the formatted text of the cells of an A1 range, row by
// row, as values.get gives them (trailing empty cells and rows left out).
func (s *Sheets) ReadRange(ctx context.Context, spreadsheetID, a1 string) ([][]string, error) {
	var vr *sheetsapi.ValueRange
	err := call(ctx, s.c, s.ts, apiSheets, true, func() (err error) {
		vr, err = s.svc.Spreadsheets.Values.Get(spreadsheetID, a1).MajorDimension("ROWS").Context(ctx).Do()
		return err
	})
	if err != nil {
		return nil, s.fail("values.get "+a1, err)
	}
	out := make([][]string, len(vr.Values))
	for i, row := range vr.Values {
		out[i] = make([]string, len(row))
		for j, v := range row {
			switch v := v.(type) {
			case string:
				out[i][j] = v
			case nil:
			default:
				out[i][j] = fmt.Sprint(v)
			}
		}
	}
	return out, nil
}

// WriteRange writes rows to the explicit A1 range (values.update, RAW).
// Writing the same rows to the same range twice leaves the sheet as one
// write does.
func (s *Sheets) WriteRange(ctx context.Context, spreadsheetID, a1 string, rows [][]string) error {
	values := make([][]any, len(rows))
	for i, row := range rows {
		values[i] = make([]any, len(row))
		for j, v := range row {
			values[i][j] = v
		}
	}
	vr := &sheetsapi.ValueRange{Range: a1, MajorDimension: "ROWS", Values: values}
	err := call(ctx, s.c, s.ts, apiSheets, false, func() error {
		_, err := s.svc.Spreadsheets.Values.Update(spreadsheetID, a1, vr).ValueInputOption("RAW").Fields("updatedRange").Context(ctx).Do()
		return err
	})
	if err != nil {
		return s.fail("values.update "+a1, err)
	}
	return nil
}

// fail wraps a Sheets error with what was called, its class (Classify) and
// the spreadsheet sentinels.
func (s *Sheets) fail(what string, err error) error {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		switch {
		case gerr.Code == http.StatusNotFound:
			return fmt.Errorf("google: sheets %s: %w: %w", what, ErrSpreadsheetNotFound, Classify(err))
		case gerr.Code == http.StatusForbidden && !rateLimitReason(gerr):
			return fmt.Errorf("google: sheets %s: %w: %w", what, ErrSpreadsheetForbidden, Classify(err))
		case gerr.Code == http.StatusBadRequest && strings.HasPrefix(gerr.Message, "Unable to parse range"):
			return fmt.Errorf("google: sheets %s: %w: %w", what, ErrSheetMissing, Classify(err))
		case gerr.Code == http.StatusBadRequest && strings.Contains(gerr.Message, "exceeds grid limits"):
			return fmt.Errorf("google: sheets %s: %w: %w", what, ErrGridLimit, Classify(err))
		case gerr.Code == http.StatusBadRequest && strings.Contains(gerr.Message, "above the limit of"):
			return fmt.Errorf("google: sheets %s: %w: %w", what, ErrCellLimit, Classify(err))
		}
	}
	return fmt.Errorf("google: sheets %s: %w", what, Classify(err))
}
