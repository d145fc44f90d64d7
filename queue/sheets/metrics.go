package sheets

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	written     prometheus.Counter
	calls       prometheus.Counter
	grows       prometheus.Counter
	waiting     prometheus.Counter
	quotaWaits  prometheus.Counter
	pruned      prometheus.Counter
	submissions *prometheus.CounterVec
	latency     prometheus.Histogram
	callTime    prometheus.Histogram
	perMinute   *minuteSeries
}

func newMetrics(reg prometheus.Registerer, buffered func() float64) (*metrics, error) {
	m := &metrics{
		written: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_sheets_rows_written_total", Help: "Submission rows written to Google Sheets.",
		}),
		calls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_sheets_write_calls_total", Help: "Sheets write calls made (values.update), failed ones included.",
		}),
		grows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_sheets_grid_grows_total", Help: "Sheets grids grown before a write needed it (spreadsheets.batchUpdate appendDimension).",
		}),
		waiting: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_sheets_form_errors_total", Help: "Checks that found a form's sheet gone, unshared, missing its tab or full (its rows wait).",
		}),
		quotaWaits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_sheets_quota_waits_total", Help: "Flushes deferred because the account's write quota was used up (or Google answered 429).",
		}),
		pruned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_sheets_submissions_pruned_total", Help: "Written submissions deleted from bbolt after MAILROOM_SHEETS_RETENTION.",
		}),
		submissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_sheets_submissions_total", Help: "Form submissions by outcome.",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailroom_sheets_flush_latency_seconds",
			Help:    "Time from a submission to the write that put its row in the sheet.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2, 5, 10, 11, 12, 15, 20, 30, 60, 120, 300, 600},
		}),
		callTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mailroom_sheets_write_duration_seconds",
			Help:    "Duration of one Sheets write call.",
			Buckets: prometheus.DefBuckets,
		}),
		perMinute: &minuteSeries{},
	}
	m.submissions.WithLabelValues("accepted")
	m.submissions.WithLabelValues("invalid")
	m.submissions.WithLabelValues("rate_limited")
	m.submissions.WithLabelValues("backlog_full")
	m.submissions.WithLabelValues("user_bytes_full")
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mailroom_sheets_rows_buffered", Help: "Submissions waiting to be written, over all forms (read from bbolt).",
	}, buffered)
	for _, c := range []prometheus.Collector{m.written, m.calls, m.grows, m.waiting, m.quotaWaits, m.pruned, m.submissions, m.latency, m.callTime, gauge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// minuteSeries counts rows written per minute over the last hour, for the
// admin page's chart. It lives in memory: a restart starts it afresh.
type minuteSeries struct {
	mu     sync.Mutex
	counts [60]int
	last   int64 // unix minute of the newest bucket
}

func (s *minuteSeries) add(at time.Time, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(at.Unix() / 60)
	s.counts[s.last%60] += n
}

// advance moves the newest bucket to minute m, zeroing skipped ones.
func (s *minuteSeries) advance(m int64) {
	if m <= s.last {
		return
	}
	for k := s.last + 1; k <= m && k <= s.last+60; k++ {
		s.counts[k%60] = 0
	}
	s.last = m
}

// last60 returns the rows of the last 60 minutes, oldest first, the
// current minute last.
func (s *minuteSeries) last60(now time.Time) []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advance(now.Unix() / 60)
	out := make([]int, 60)
	for i := range 60 {
		out[i] = s.counts[(s.last-59+int64(i))%60]
	}
	return out
}
