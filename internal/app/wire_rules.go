package app

import (
	"context"

	"mailroom/queue/rules"
)

// wireRules builds the rules pipeline (web reaches it through buildWeb).
// It runs before wireGmail, whose pipeline applies these rules to new
// mail; both open the accounts' Gmail through the accounts service.
func (a *App) wireRules(context.Context) (pipeline, error) {
	cfg := a.cfg
	acc := a.accounts
	p, err := rules.New(rules.Config{
		Debounce:   cfg.ReclassifyDebounce,
		MaxWait:    cfg.ReclassifyMaxWait,
		Tick:       cfg.ReclassifyTick,
		BatchSize:  cfg.ReclassifyBatch,
		WriteDelay: cfg.ReclassifyWriteDelay,
		SaveLimit:  cfg.RuleSaveLimit,
		SaveWindow: cfg.RuleSaveWindow,
		SpentUntil: a.watch.SpentUntil,
		Logger:     a.log,
		Registerer: a.registry,
	}, rules.Deps{
		DB:     a.db,
		Broker: a.broker.Client(),
		Gmail: func(ctx context.Context, accountID string) (rules.Gmail, error) {
			return acc.Gmail(ctx, accountID)
		},
		Queue: a.queue,
	})
	if err != nil {
		return nil, err
	}
	a.rules = p
	return p, nil
}
