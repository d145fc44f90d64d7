package app

import (
	"context"
	"errors"

	"mailroom/queue"
	"mailroom/queue/sheets"
	"mailroom/web"
)

// wireSheets builds the sheets pipeline: its handlers in the task table, its loops
// and its web extension.
func (a *App) wireSheets(ctx context.Context) error {
	if a.gmail == nil {
		return errors.New("wire sheets: the gmail pipeline (which holds the accounts' tokens) is not built")
	}
	p, err := sheets.New(sheets.Config{
		FlushDelay:      a.cfg.SheetsFlushDelay,
		Threshold:       a.cfg.SheetsFlushThreshold,
		WritesPerMinute: a.cfg.SheetsWritesPerMinute,
		QuotaWindow:     a.cfg.SheetsQuotaWindow,
		Retention:       a.cfg.SheetsRetention,
		Logger:          a.log,
		Registerer:      a.registry,
	}, sheets.Deps{DB: a.db, Queue: appQueue{a}, Broker: a.broker.Client(), Clients: gmailSheets{a}})
	if err != nil {
		return err
	}
	if err := a.table.Handle(queue.TypeSheetsFlush, p.HandleFlush); err != nil {
		return err
	}
	a.sheets = p
	if pruner := p.Pruner(); pruner != nil {
		a.loops = append(a.loops, pruner)
	}
	a.extensions = append(a.extensions, web.Forms(p))
	return nil
}

// gmailSheets gives the sheets pipeline each account's Sheets client,
// sharing the Gmail pipeline's token source (one refresh, one saved token).
type gmailSheets struct{ a *App }

func (g gmailSheets) Sheets(ctx context.Context, accountID string) (sheets.SheetsClient, error) {
	s, err := g.a.gmail.Sheets(ctx, accountID)
	if err != nil {
		return nil, err
	}
	return s, nil
}
