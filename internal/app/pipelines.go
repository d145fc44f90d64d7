package app

import (
	"context"

	"mailroom/queue"
)

// buildPipelines builds the pipelines over the queue's enqueue side,
// attaches every task type's handler to the table and adds the pipelines'
// loops (web gets the pipelines in buildWeb). The Google accounts come first, the rules
// before Gmail (which applies them to new mail). Each pipeline's wiring
// lives in its own wire_*.go file.
func (a *App) buildPipelines(ctx context.Context) error {
	if a.cfg.DebugTasks {
		d, err := newDebugTasks(a.cfg.DataDir, a.db, a.queue)
		if err != nil {
			return err
		}
		a.debug = d
		a.closed = append(a.closed, d.Close)
		if err := a.table.Handle(queue.TypeDebugRecord, d.handle); err != nil {
			return err
		}
	}
	for _, wire := range []func(context.Context) error{a.wireAccounts, a.wireRules, a.wireGmail, a.wireSheets, a.wireEvents} {
		if err := wire(ctx); err != nil {
			return err
		}
	}
	return nil
}
