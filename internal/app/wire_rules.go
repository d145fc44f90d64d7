package app

import (
	"context"

	"mailroom/queue"
	"mailroom/queue/rules"
	"mailroom/web"
)

// wireRules builds the rules pipeline: its handler in the task table, its
// publisher loop, the gmail pipeline's rule applier and its web extension.
// It runs after wireGmail, whose pipeline opens the accounts' Gmail.
func (a *App) wireRules(ctx context.Context) error {
	cfg := a.cfg
	gm := a.gmail
	p, err := rules.New(rules.Config{
		Debounce:   cfg.ReclassifyDebounce,
		MaxWait:    cfg.ReclassifyMaxWait,
		Tick:       cfg.ReclassifyTick,
		BatchSize:  cfg.ReclassifyBatch,
		SaveLimit:  cfg.RuleSaveLimit,
		SaveWindow: cfg.RuleSaveWindow,
		Logger:     a.log,
		Registerer: a.registry,
	}, a.db, a.broker.Client(), func(ctx context.Context, accountID string) (rules.Gmail, error) {
		return gm.Gmail(ctx, accountID)
	})
	if err != nil {
		return err
	}
	if err := a.table.Handle(queue.TypeRulesReclassifyBatch, p.HandleBatch); err != nil {
		return err
	}
	if err := a.table.OnDead(queue.TypeRulesReclassifyBatch, p.BatchDead); err != nil {
		return err
	}
	gm.SetRuleApplier(p)
	a.rules = p
	// The queue is built after the pipelines: appQueue reaches it lazily.
	a.loops = append(a.loops, p.Publisher(appQueue{a}))
	a.extensions = append(a.extensions, web.Rules(p))
	return nil
}
