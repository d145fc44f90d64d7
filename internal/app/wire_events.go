package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

// eventsPruneBatch is the most events one pruning transaction deletes, so
// that pruning never holds the writer long.
const eventsPruneBatch = 1000

// wireEvents builds the webhooks pipeline, with the event log's pruner
// (events and webhook delivery attempts older than MAILROOM_EVENTS_RETENTION, a minute at a time in
// short transactions) among its services, and the log's metric. The
// pipelines record events through the store, in the transactions of their
// changes.
func (a *App) wireEvents(context.Context) (pipeline, error) {
	total := prometheus.NewDesc("mailroom_events_total", "Events recorded (committed), by type.", []string{"type"}, nil)
	if err := a.registry.Register(eventsCollector{a.db, total}); err != nil {
		return nil, err
	}
	p, err := webhooks.New(webhooks.Config{
		MaxAge: a.cfg.WebhookMaxAge, AllowPrivate: a.cfg.WebhookAllowPrivate,
		Logger: a.log, Registerer: a.registry, Alert: a.alerts.Raise,
	}, webhooks.Deps{DB: a.db, Queue: a.queue})
	if err != nil {
		return nil, err
	}
	a.webhooks = p
	retention := a.cfg.EventsRetention
	pruner := queue.NewEvery("events pruner", time.Minute, a.log, func(ctx context.Context) error {
		return pruneEvents(ctx, a.db, time.Now().Add(-retention))
	})
	return eventsPipeline{p, pruner}, nil
}

// eventsPipeline is the webhooks pipeline with the event log's pruner.
type eventsPipeline struct {
	*webhooks.Pipeline
	pruner lifecycle.Service
}

func (e eventsPipeline) Services() []lifecycle.Service {
	return append(e.Pipeline.Services(), e.pruner)
}

// pruneEvents deletes the events and the webhook delivery attempts before
// cutoff, a batch at a time.
func pruneEvents(ctx context.Context, db *store.DB, cutoff time.Time) error {
	for _, prune := range []func(time.Time, int) (int, error){db.EventsPrune, db.DeliveriesPrune} {
		for ctx.Err() == nil {
			n, err := prune(cutoff, eventsPruneBatch)
			if err != nil {
				return err
			}
			if n < eventsPruneBatch {
				break
			}
		}
	}
	return nil
}

// eventsCollector exposes mailroom_events_total{type}, from the first
// scrape with every type.
type eventsCollector struct {
	db    *store.DB
	total *prometheus.Desc
}

func (c eventsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.total }

func (c eventsCollector) Collect(ch chan<- prometheus.Metric) {
	counts := c.db.EventCounts()
	for _, t := range store.EventTypes() {
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.CounterValue, float64(counts[t]), t)
	}
}
