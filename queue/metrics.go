package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"mailroom/store"
)

type metrics struct {
	processed   *prometheus.CounterVec
	failed      *prometheus.CounterVec
	dead        *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	duration    *prometheus.HistogramVec

	mu      sync.Mutex
	history map[string]*minuteRing // per queue, for the admin page's charts
}

func newMetrics(reg prometheus.Registerer, q *Queue) (*metrics, error) {
	m := &metrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_tasks_processed_total", Help: "Tasks that succeeded (stale ones included).",
		}, []string{"type"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_tasks_failed_total", Help: "Task attempts that failed.",
		}, []string{"type"}),
		dead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_tasks_dead_lettered_total", Help: "Tasks moved to the dead-letter archive.",
		}, []string{"type"}),
		rateLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_tasks_rate_limited_total", Help: "Task runs deferred by a rate limit (not failures).",
		}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mailroom_task_duration_seconds", Help: "Handler run time.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"type"}),
		history: map[string]*minuteRing{},
	}
	for _, tt := range q.table.Types() {
		m.processed.WithLabelValues(tt.Name)
		m.failed.WithLabelValues(tt.Name)
		m.dead.WithLabelValues(tt.Name)
		m.rateLimited.WithLabelValues(tt.Name)
		m.duration.WithLabelValues(tt.Name)
	}
	for _, c := range []prometheus.Collector{m.processed, m.failed, m.dead, m.rateLimited, m.duration, &stateCollector{q: q}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(queue string, at time.Time, d time.Duration, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.history[queue]
	if r == nil {
		r = &minuteRing{}
		m.history[queue] = r
	}
	r.add(at, d, ok)
}

var stateDesc = prometheus.NewDesc("mailroom_queue_tasks",
	"Tasks per queue and state; pending includes records still waiting in the outbox.",
	[]string{"queue", "state"}, nil)

// stateCollector asks the broker for queue sizes at scrape time.
type stateCollector struct{ q *Queue }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) { ch <- stateDesc }

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stats, err := c.q.Stats(ctx)
	if err != nil {
		return
	}
	for _, s := range stats {
		for state, v := range map[string]int{"pending": s.Pending, "active": s.Active, "scheduled": s.Scheduled, "retry": s.Retry} {
			ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, float64(v), s.Name, state)
		}
	}
}

// QueueStats is one queue's live picture (the /api/v1/queues answer).
type QueueStats struct {
	Name         string   `json:"name"`
	Types        []string `json:"types"`
	Concurrency  int      `json:"concurrency"`
	Pending      int      `json:"pending"`
	Active       int      `json:"active"`
	Scheduled    int      `json:"scheduled"`
	Retry        int      `json:"retry"`
	Processed    int64    `json:"processed"`
	Failed       int64    `json:"failed"`
	DeadLettered int      `json:"deadLettered"`
	// Outbox is the part of Pending still waiting in bbolt for room in the broker.
	Outbox int `json:"outbox"`
}

// Stats returns every queue of the table with live counts. Processed and
// failed count since this process started; deadLettered is what the archive
// holds now.
func (q *Queue) Stats(ctx context.Context) ([]QueueStats, error) {
	var dead map[string]int
	outbox := map[string]int{}
	err := q.db.View(func(tx *store.Tx) error {
		var err error
		dead, err = tx.DeadLetterCounts()
		for _, qi := range q.table.Queues() {
			outbox[qi.Name] = tx.OutboxLen(qi.Name)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	// Without the broker the counts of the outbox are still given, with
	// an error that wraps ErrBrokerUnavailable.
	var brokerErr error
	if q.inspector != nil {
		names, err := q.inspector.Queues()
		if err != nil {
			brokerErr = BrokerUnavailable(fmt.Errorf("queue: list broker queues: %w", err))
		}
		for _, n := range names {
			known[n] = true
		}
	}
	var out []QueueStats
	for _, qi := range q.table.Queues() {
		s := QueueStats{Name: qi.Name, Types: qi.Types, Concurrency: qi.Concurrency}
		if known[qi.Name] {
			info, err := q.inspector.GetQueueInfo(qi.Name)
			if err != nil {
				return nil, BrokerUnavailable(fmt.Errorf("queue: stats of %s: %w", qi.Name, err))
			}
			s.Pending, s.Active, s.Scheduled, s.Retry = info.Pending, info.Active, info.Scheduled, info.Retry
		}
		s.Outbox = max(outbox[qi.Name]-q.relays[qi.Name].handedOver(), 0)
		s.Pending += s.Outbox
		for _, typ := range qi.Types {
			s.Processed += counterValue(q.metrics.processed.WithLabelValues(typ))
			s.Failed += counterValue(q.metrics.failed.WithLabelValues(typ))
			s.DeadLettered += dead[typ]
		}
		out = append(out, s)
	}
	if brokerErr != nil {
		return out, brokerErr
	}
	return out, ctx.Err()
}

func counterValue(c prometheus.Counter) int64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return 0
	}
	return int64(m.Counter.GetValue())
}

// MinutePoint is one minute of a queue's work, for charts.
type MinutePoint struct {
	Start     time.Time     `json:"start"`
	Processed int           `json:"processed"`
	Failed    int           `json:"failed"`
	P50       time.Duration `json:"p50"`
	P99       time.Duration `json:"p99"`
}

// History returns the last hour of a queue, a point per minute, oldest first.
func (q *Queue) History(queue string, now time.Time) []MinutePoint {
	q.metrics.mu.Lock()
	defer q.metrics.mu.Unlock()
	r := q.metrics.history[queue]
	if r == nil {
		r = &minuteRing{}
	}
	return r.points(now)
}

// minuteRing keeps 60 minutes of counts and a duration histogram.
type minuteRing struct {
	slots [60]minuteSlot
}

type minuteSlot struct {
	minute    int64
	processed int
	failed    int
	buckets   [durationBuckets]int
}

const durationBuckets = 32

// bucket i holds durations up to 100µs * 2^i.
func bucketOf(d time.Duration) int {
	limit := 100 * time.Microsecond
	for i := 0; i < durationBuckets-1; i++ {
		if d <= limit {
			return i
		}
		limit *= 2
	}
	return durationBuckets - 1
}

func bucketLimit(i int) time.Duration { return 100 * time.Microsecond << i }

func (r *minuteRing) add(at time.Time, d time.Duration, ok bool) {
	min := at.Unix() / 60
	s := &r.slots[min%60]
	if s.minute != min {
		*s = minuteSlot{minute: min}
	}
	if ok {
		s.processed++
	} else {
		s.failed++
	}
	s.buckets[bucketOf(d)]++
}

func (r *minuteRing) points(now time.Time) []MinutePoint {
	cur := now.Unix() / 60
	out := make([]MinutePoint, 0, 60)
	for m := cur - 59; m <= cur; m++ {
		p := MinutePoint{Start: time.Unix(m*60, 0).UTC()}
		if s := r.slots[m%60]; s.minute == m {
			p.Processed, p.Failed = s.processed, s.failed
			p.P50 = quantile(s.buckets[:], 0.50)
			p.P99 = quantile(s.buckets[:], 0.99)
		}
		out = append(out, p)
	}
	return out
}

func quantile(b []int, q float64) time.Duration {
	total := 0
	for _, n := range b {
		total += n
	}
	if total == 0 {
		return 0
	}
	want := int(float64(total)*q + 0.5)
	want = max(want, 1)
	seen := 0
	for i, n := range b {
		seen += n
		if seen >= want {
			return bucketLimit(i)
		}
	}
	return bucketLimit(len(b) - 1)
}
