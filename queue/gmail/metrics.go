package gmail

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Push outcomes, the contract's labels of mailroom_push_requests_total.
const (
	outcomeAccepted       = "accepted"
	outcomeUnknownAddress = "unknown_address"
	outcomeBadRequest     = "bad_request"
	outcomeUnauthorized   = "unauthorized"
	outcomeForbidden      = "forbidden"
)

type metrics struct {
	push     *prometheus.CounterVec
	recorded *prometheus.CounterVec
	events   *prometheus.CounterVec
	delay    *prometheus.HistogramVec
	syncs    *prometheus.CounterVec
	records  prometheus.Counter
	fetched  prometheus.Counter

	// Push health: history reads Gmail answered below a pushed id, how
	// long history took to reach it, waits given up, and changes a poll
	// found that no push announced; accounts whose pushes look stopped.
	shortReads    prometheus.Counter
	historyLag    prometheus.Histogram
	lagGivenUp    prometheus.Counter
	unannounced   prometheus.Counter
	pushUnhealthy prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		push: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_push_requests_total", Help: "Gmail push requests by outcome.",
		}, []string{"outcome"}),
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_gmail_events_recorded_total", Help: "Events the sync classified and recorded, by type.",
		}, []string{"type"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_gmail_events_total", Help: "Events handled, by type and outcome (applied, or older: the message already held a newer state).",
		}, []string{"type", "outcome"}),
		delay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mailroom_gmail_event_delay_seconds", Help: "Time from an event's recording by the sync to its handling, by type.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"type"}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_gmail_syncs_total", Help: "Account sync runs by kind (history, full) and outcome (ok, error).",
		}, []string{"kind", "outcome"}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_history_records_total", Help: "Gmail history records read.",
		}),
		fetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_messages_fetched_total", Help: "Messages fetched from Gmail (message-added and full syncs).",
		}),
		shortReads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_history_short_reads_total", Help: "History reads Gmail answered below the history id a push announced (its history lagged the push); each is read again shortly.",
		}),
		historyLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "mailroom_gmail_history_lag_seconds", Help: "Time from a push to the history read that reached it, when Gmail's history lagged the push.",
			Buckets: []float64{.25, .5, 1, 2, 3, 5, 10, 30, 60, 120},
		}),
		lagGivenUp: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_history_lag_given_up_total", Help: "Pushes whose change Gmail's history did not show within two minutes (left to the next read).",
		}),
		unannounced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_unannounced_changes_total", Help: "Polls that found changes no push had announced.",
		}),
		pushUnhealthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mailroom_gmail_push_unhealthy_accounts", Help: "Watched accounts whose pushes look stopped: a poll found changes no push announced since the last push.",
		}),
	}
	for _, o := range []string{outcomeAccepted, outcomeUnknownAddress, outcomeBadRequest, outcomeUnauthorized, outcomeForbidden} {
		m.push.WithLabelValues(o)
	}
	for _, typ := range taskTypes {
		if typ == TypeSync || typ == TypeFullSync || typ == TypeWatchRenew {
			continue
		}
		m.recorded.WithLabelValues(typ)
		m.delay.WithLabelValues(typ)
		m.events.WithLabelValues(typ, "applied")
		m.events.WithLabelValues(typ, "older")
	}
	for _, kind := range []string{"history", "full"} {
		for _, o := range []string{"ok", "too_old", "error"} {
			m.syncs.WithLabelValues(kind, o)
		}
	}
	for _, c := range []prometheus.Collector{m.push, m.recorded, m.events, m.delay, m.syncs, m.records, m.fetched,
		m.shortReads, m.historyLag, m.lagGivenUp, m.unannounced, m.pushUnhealthy} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
