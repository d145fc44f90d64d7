package app

import (
	"context"

	"github.com/redis/go-redis/v9"

	"mailroom/queue/sheets"
)

// wireSheets builds the sheets pipeline (web reaches it through buildWeb).
func (a *App) wireSheets(context.Context) (pipeline, error) {
	userBytes := int64(a.cfg.SubmissionsUserBytes)
	if userBytes == 0 {
		free, err := freeBytes(a.cfg.DataDir)
		if err != nil {
			// Not known: the bound is the largest default.
			a.log.Warn("the submission bytes per user take the largest default", "bytes", sheets.MaxDefaultUserBytes, "err", err)
			free = sheets.MaxDefaultUserBytes * 10
		}
		userBytes = sheets.DefaultUserBytes(free)
	}
	// The quotas are the project's: in the fleet's Redis when there is one
	// (its windows outlive this process's broker), with this mailroom's
	// share in its broker while that Redis does not answer.
	var quotaStore, fallback redis.UniversalClient = a.broker.Client(), nil
	var share func() int
	spentUntil := a.watch.SpentUntil
	if a.fleet != nil {
		quotaStore, fallback, share, spentUntil = a.fleet.Client(), a.broker.Client(), a.fleet.Share, nil
	}
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
		BrokerTick:             a.cfg.DelayedCheckInterval,
		MaxWaiting:             a.cfg.SheetsMaxWaiting,
		SubmitsPerForm:         a.cfg.SubmissionsPerForm,
		SubmitsPerUser:         a.cfg.SubmissionsPerUser,
		SubmitWindow:           a.cfg.SubmissionsWindow,
		MaxUserBytes:           userBytes,
		// Windows the broker lost resume as if fully spent.
		SpentUntil: spentUntil,
	}, sheets.Deps{DB: a.db, Queue: a.queue, Broker: quotaStore, Fallback: fallback, Share: share, Clients: accountSheets{a.accounts}, Alerts: a.alerts})
	if err != nil {
		return nil, err
	}
	a.sheets = p
	return p, nil
}
