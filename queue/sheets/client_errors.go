package sheets

import (
	"context"

	"mailroom/queue/google"
	"mailroom/queue/googleerr"
)

// queueClients is the pipeline's boundary with the Google adapter: the
// clients it gives, and each of their calls, answer with errors in the
// queue's classes (googleerr.ToQueue), so that a flush and a form's check
// class them as the queue does.
type queueClients struct{ c Clients }

func (q queueClients) Sheets(ctx context.Context, accountID string) (SheetsClient, error) {
	s, err := q.c.Sheets(ctx, accountID)
	if err != nil {
		return nil, googleerr.ToQueue(err)
	}
	return queueSheets{s}, nil
}

// queueSheets is a SheetsClient whose errors are in the queue's classes.
type queueSheets struct{ s SheetsClient }

func (q queueSheets) Tabs(ctx context.Context, spreadsheetID string) ([]google.Tab, error) {
	tabs, err := q.s.Tabs(ctx, spreadsheetID)
	return tabs, googleerr.ToQueue(err)
}

func (q queueSheets) ReadRange(ctx context.Context, spreadsheetID, a1 string) ([][]string, error) {
	rows, err := q.s.ReadRange(ctx, spreadsheetID, a1)
	return rows, googleerr.ToQueue(err)
}

func (q queueSheets) WriteRange(ctx context.Context, spreadsheetID, a1 string, rows [][]string) error {
	return googleerr.ToQueue(q.s.WriteRange(ctx, spreadsheetID, a1, rows))
}

func (q queueSheets) Grow(ctx context.Context, spreadsheetID string, sheetID int64, rows, cols int) error {
	return googleerr.ToQueue(q.s.Grow(ctx, spreadsheetID, sheetID, rows, cols))
}
