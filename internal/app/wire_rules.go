package app

import (
	"context"

	"mailroom/queue"
	"mailroom/queue/rules"
)

// wireRules builds the rules pipeline: its handler in the task table, its
// publisher loop (web reaches it through buildWeb). It runs before wireGmail, whose
// pipeline applies these rules to new mail; both open the accounts' Gmail
// through the accounts service.
func (a *App) wireRules(ctx context.Context) error {
	cfg := a.cfg
	acc := a.accounts
	p, err := rules.New(rules.Config{
		Debounce:   cfg.ReclassifyDebounce,
		MaxWait:    cfg.ReclassifyMaxWait,
		Tick:       cfg.ReclassifyTick,
		BatchSize:  cfg.ReclassifyBatch,
		SaveLimit:  cfg.RuleSaveLimit,
		SaveWindow: cfg.RuleSaveWindow,
		SpentUntil: a.watch.SpentUntil,
		Logger:     a.log,
		Registerer: a.registry,
	}, a.db, a.broker.Client(), func(ctx context.Context, accountID string) (rules.Gmail, error) {
		return acc.Gmail(ctx, accountID)
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
	a.rules = p
	a.loops = append(a.loops, p.Publisher(a.queue))
	return nil
}
