package app

import (
	"context"

	"mailroom/queue"
	"mailroom/queue/sheets"
)

// wireSheets builds the sheets pipeline: its handlers in the task table, its loops
// (web reaches it through buildWeb).
func (a *App) wireSheets(ctx context.Context) error {
	p, err := sheets.New(sheets.Config{
		FlushDelay:      a.cfg.SheetsFlushDelay,
		Threshold:       a.cfg.SheetsFlushThreshold,
		WritesPerMinute: a.cfg.SheetsWritesPerMinute,
		QuotaWindow:     a.cfg.SheetsQuotaWindow,
		Retention:       a.cfg.SheetsRetention,
		Logger:          a.log,
		Registerer:      a.registry,

		ReadsPerMinute:         a.cfg.SheetsReadsPerMinute,
		ProjectWritesPerMinute: a.cfg.SheetsProjectWritesPerMinute,
		ProjectReadsPerMinute:  a.cfg.SheetsProjectReadsPerMinute,
		RecheckMax:             a.cfg.SheetsRecheckMax,
		MaxWaiting:             a.cfg.SheetsMaxWaiting,
		SubmitsPerForm:         a.cfg.SubmissionsPerForm,
		SubmitsPerUser:         a.cfg.SubmissionsPerUser,
		SubmitWindow:           a.cfg.SubmissionsWindow,
		// Windows the broker lost resume as if fully spent.
		SpentUntil: a.watch.SpentUntil,
	}, sheets.Deps{DB: a.db, Queue: a.queue, Broker: a.broker.Client(), Clients: accountSheets{a.accounts}, Alerts: a.alerts})
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
	return nil
}
