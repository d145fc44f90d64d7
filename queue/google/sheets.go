package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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
)

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

// SheetTitles returns the titles of a spreadsheet's sheets, in order
// (spreadsheets.get). ErrSpreadsheetNotFound or ErrSpreadsheetForbidden
// say why it cannot be opened.
func (s *Sheets) SheetTitles(ctx context.Context, spreadsheetID string) ([]string, error) {
	var book *sheetsapi.Spreadsheet
	err := call(ctx, s.c, s.ts, true, func() (err error) {
		book, err = s.svc.Spreadsheets.Get(spreadsheetID).Fields("sheets.properties.title").Context(ctx).Do()
		return err
	})
	if err != nil {
		return nil, s.fail("spreadsheets.get "+spreadsheetID, err)
	}
	titles := make([]string, 0, len(book.Sheets))
	for _, sh := range book.Sheets {
		if sh != nil && sh.Properties != nil {
			titles = append(titles, sh.Properties.Title)
		}
	}
	return titles, nil
}

// ReadRange returns the formatted text of the cells of an A1 range, row by
// row, as values.get gives them (trailing empty cells and rows left out).
func (s *Sheets) ReadRange(ctx context.Context, spreadsheetID, a1 string) ([][]string, error) {
	var vr *sheetsapi.ValueRange
	err := call(ctx, s.c, s.ts, true, func() (err error) {
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
	err := call(ctx, s.c, s.ts, false, func() error {
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
		}
	}
	return fmt.Errorf("google: sheets %s: %w", what, Classify(err))
}
