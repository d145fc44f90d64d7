package app

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/queue"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

// eventsPruneBatch is the most events one pruning transaction deletes, so
// that pruning never holds the writer long.
const eventsPruneBatch = 1000

// wireEvents adds the event log's pruner (events older than
// MAILROOM_EVENTS_RETENTION, a minute at a time in short transactions)
// and its metric. The pipelines record events through the store, in the
// transactions of their changes.
func (a *App) wireEvents(context.Context) error {
	total := prometheus.NewDesc("mailroom_events_total", "Events recorded (committed), by type.", []string{"type"}, nil)
	if err := a.registry.Register(eventsCollector{a.db, total}); err != nil {
		return err
	}
	retention := a.cfg.EventsRetention
	a.loops = append(a.loops, queue.NewEvery("events pruner", time.Minute, a.log, func(ctx context.Context) error {
		return pruneEvents(ctx, a.db, time.Now().Add(-retention))
	}))
	p, err := webhooks.New(webhooks.Config{
		MaxAge: a.cfg.WebhookMaxAge, AllowPrivate: a.cfg.WebhookAllowPrivate,
		Logger: a.log, Registerer: a.registry, Alert: a.alerts.Raise,
	}, webhooks.Deps{DB: a.db, Queue: a.queue})
	if err != nil {
		return err
	}
	if err := p.Register(a.table); err != nil {
		return err
	}
	a.webhooks = p
	a.loops = append(a.loops, &runLoop{run: p.Run})
	return nil
}

// runLoop runs a blocking loop between Start and Stop.
type runLoop struct {
	run    func(ctx context.Context)
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *runLoop) Start(ctx context.Context) error {
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.done = make(chan struct{})
	go func() { defer close(l.done); l.run(ctx) }()
	return nil
}

func (l *runLoop) Stop() {
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
}

// pruneEvents deletes the events before cutoff, a batch at a time.
func pruneEvents(ctx context.Context, db *store.DB, cutoff time.Time) error {
	for ctx.Err() == nil {
		n, err := db.EventsPrune(cutoff, eventsPruneBatch)
		if err != nil || n < eventsPruneBatch {
			return err
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
