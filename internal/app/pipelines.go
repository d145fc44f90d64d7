package app

import (
	"context"
	"slices"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
)

// pipelineTasks are the task rows the pipelines declare (each package's
// Tasks), with cfg's retries and workers: the whole table of serve.
func pipelineTasks(cfg *Config) [][]queue.TaskType {
	return [][]queue.TaskType{
		gmail.Tasks(gmail.TaskConfig{MaxRetries: cfg.MaxRetries, ConcurrencyMessageAdded: cfg.ConcurrencyMessageAdded, ConcurrencyState: cfg.ConcurrencyState}),
		rules.Tasks(cfg.MaxRetries),
		sheets.Tasks(cfg.MaxRetries),
		webhooks.Tasks(),
	}
}

// taskTable assembles the app's task table: the pipelines' rows, the
// debug type with --debug-tasks, and the caller's own (Deps.Tasks), laid
// out again by Deps.TaskLayout when set. The handlers come with
// buildPipelines.
func taskTable(cfg *Config, deps Deps) (*queue.Table, error) {
	rows := slices.Concat(pipelineTasks(cfg)...)
	if cfg.DebugTasks {
		rows = append(rows, debugTaskRow(cfg.MaxRetries))
	}
	if deps.TaskLayout != nil {
		deps.TaskLayout(rows)
	}
	return queue.NewTable(rows, deps.Tasks)
}

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
		if err := a.table.Handle(TypeDebugRecord, d.handle); err != nil {
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
