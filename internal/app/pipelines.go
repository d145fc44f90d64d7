package app

import (
	"context"

	"mailroom/queue"
)

// buildPipelines attaches every task type's handler to the table and adds
// the pipelines' loops and web extensions. Each pipeline's wiring lives in
// its own wire_*.go file.
func (a *App) buildPipelines(ctx context.Context, opts []Option) error {
	if a.cfg.DebugTasks {
		d, err := newDebugTasks(a.cfg.DataDir)
		if err != nil {
			return err
		}
		a.debug = d
		a.closed = append(a.closed, d.Close)
		if err := a.table.Handle(queue.TypeDebugRecord, d.handle); err != nil {
			return err
		}
	}
	b := &Builder{a: a}
	for _, o := range opts {
		if err := o(ctx, b); err != nil {
			return err
		}
	}
	for _, wire := range []func(context.Context) error{a.wireGmail, a.wireRules, a.wireSheets} {
		if err := wire(ctx); err != nil {
			return err
		}
	}
	return nil
}
