package app

import (
	"context"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
)

// pipeline is the one shape of every pipeline (and of the Google-accounts
// service they share): built by its New(Config, Deps), it gives the task
// table its own task types' handlers and dead-letter hooks, and lists its
// loops.
type pipeline interface {
	Register(*queue.Table) error
	Services() []lifecycle.Service
}

// buildPipelines builds the pipelines over the queue's enqueue side; each
// registers its handlers on the table and adds its loops to the app's
// services (web gets the pipelines in buildWeb). The Google accounts come
// first, the rules before Gmail (which applies them to new mail). Each
// pipeline's config and deps are made in its own wire_*.go file.
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
	for _, build := range []func(context.Context) (pipeline, error){a.wireAccounts, a.wireRules, a.wireGmail, a.wireSheets, a.wireEvents} {
		p, err := build(ctx)
		if err != nil {
			return err
		}
		if err := p.Register(a.table); err != nil {
			return err
		}
		a.services = append(a.services, p.Services()...)
	}
	return nil
}
