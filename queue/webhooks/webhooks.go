// Package webhooks delivers the event log (store's events) to the
// endpoints the service registers, as the Standard Webhooks specification
// says: batches of up to 100 events per signed POST, in order per webhook,
// retried with backoff (a 429 or 503's Retry-After honoured) for
// MAILROOM_WEBHOOK_MAX_AGE, then to the dead letters, and later batches go
// on.
//
// Each webhook has at most one batch in flight. A scheduler (the
// pipeline's service), woken whenever events commit, plans a webhook's next batch and records its
// webhooks:deliver task in one transaction; the task's success moves the
// webhook's cursor past the batch in the transaction that acks it. So a
// crash anywhere loses nothing: an event committed is delivered (at least
// once), and a batch keeps its id (the webhook-id header) across retries.
package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/store"
)

// Limits of the contract.
const (
	// MaxBatch is the most events one POST carries.
	MaxBatch = 100
	// MaxPerUser bounds the webhooks a user (or the admin) may register.
	MaxPerUser = 20
	// failingAlertAfter is how long a webhook fails before an alert.
	failingAlertAfter = time.Hour
	// maxLastError bounds a webhook's stored lastError, in bytes.
	maxLastError = 500
	// maxStatusText bounds how much of a receiver's status line an error
	// quotes (its reason phrase is the receiver's to write).
	maxStatusText = 120
)

// ErrNotFound: there is no webhook of that id.
var ErrNotFound = errors.New("webhooks: no such webhook")

// InvalidError is a bad request naming its field.
type InvalidError struct {
	Field   string
	Message string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Message }

// DefaultMaxAge is Config.MaxAge's default, which serve's flag table reads.
const DefaultMaxAge = 72 * time.Hour

// DefaultPace is Config.Pace's default: at most five batches a second for
// a webhook that is not behind, so that a hundred webhooks cost at most
// 500 tasks a second whatever the rate of events.
const DefaultPace = 200 * time.Millisecond

// Config configures the pipeline. Zero values take the defaults named.
type Config struct {
	// MaxAge is how long a batch is retried before it goes to the dead
	// letters (MAILROOM_WEBHOOK_MAX_AGE). Default 72h.
	MaxAge time.Duration
	// AllowPrivate lets webhooks reach loopback, private and link-local
	// addresses (MAILROOM_WEBHOOK_ALLOW_PRIVATE).
	AllowPrivate bool
	// Timeout bounds one delivery: any 2xx within it delivers. Default 10s.
	Timeout time.Duration
	// Settle is the least time between two scheduling passes, so a burst
	// of commits makes batches, not a pass per commit. Default 20ms.
	Settle time.Duration
	// Pace is the least time between the plans of two batches of one
	// webhook that keeps up: a webhook taking a steady stream gets a
	// batch per Pace, not one per event or two, since a batch's cost (a
	// task, a signed POST, a commit) hardly depends on its size. It
	// delays an event by at most Pace. A webhook behind is not paced:
	// when a full batch (MaxBatch) finishes, or a batch finishes with a
	// full one waiting, the next is planned at once. Default DefaultPace.
	Pace       time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Alert raises a one-off operational alert (a webhook failing for an
	// hour). Nil: none.
	Alert func(text string)
	Now   func() time.Time
	// Resolver resolves webhook hosts at creation. Nil: net.DefaultResolver.
	Resolver *net.Resolver
}

func (c *Config) defaults() {
	if c.MaxAge <= 0 {
		c.MaxAge = DefaultMaxAge
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = 20 * time.Millisecond
	}
	if c.Pace <= 0 {
		c.Pace = DefaultPace
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
}

// Deps are what the pipeline works with.
type Deps struct {
	DB    *store.DB
	Queue queue.Outbox
	// Client sends deliveries. Nil: a client with the SSRF guard and no
	// redirects (tests may pass one trusting their TLS receiver).
	Client *http.Client
}

// Pipeline is the webhooks pipeline.
type Pipeline struct {
	cfg     Config
	db      *store.DB
	q       queue.Outbox
	client  *http.Client
	log     *slog.Logger
	metrics metrics
	kick    chan struct{}
	// acks commits finished batches, those finishing together in one
	// transaction.
	acks *store.GroupCommit
	// scheduler runs run with the one lifecycle (Services).
	scheduler *scheduler

	mu     sync.Mutex
	oldest time.Duration // the oldest undelivered event's age, as of the last pass
	// planned is when each webhook's last batch was planned (Pace), on
	// the real clock: pacing spares the machine, whatever clock the
	// pipeline reads. Kept in memory: after a restart no batch waits.
	planned map[string]time.Time
}

type metrics struct {
	deliveries *prometheus.CounterVec
	latency    prometheus.Histogram
}

// New builds the pipeline; Register gives the task table its handler, and
// its service (Services) schedules deliveries while it runs.
func New(cfg Config, deps Deps) (*Pipeline, error) {
	if deps.DB == nil || deps.Queue == nil {
		return nil, errors.New("webhooks: a store and a queue are required")
	}
	cfg.defaults()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pipeline{cfg: cfg, db: deps.DB, q: deps.Queue, client: deps.Client, log: log.With("component", "webhooks"), kick: make(chan struct{}, 1), acks: &store.GroupCommit{DB: deps.DB}, planned: map[string]time.Time{}}
	if p.client == nil {
		p.client = newClient(cfg.Timeout, cfg.AllowPrivate)
	}
	if err := p.registerMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	p.scheduler = &scheduler{p: p}
	return p, nil
}

func (p *Pipeline) registerMetrics(reg prometheus.Registerer) error {
	p.metrics.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailroom_webhook_deliveries_total", Help: "Webhook batch deliveries by outcome.",
	}, []string{"outcome"})
	for _, o := range []string{"delivered", "retried", "deadlettered"} {
		p.metrics.deliveries.WithLabelValues(o)
	}
	p.metrics.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "mailroom_webhook_delivery_latency_seconds", Help: "From an event to the 2xx of the delivery that carried it.",
		Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
	})
	oldest := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mailroom_webhook_oldest_undelivered_seconds", Help: "Age of the oldest event a webhook has yet to receive (0: none waits).",
	}, func() float64 { return p.OldestUndelivered().Seconds() })
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{p.metrics.deliveries, p.metrics.latency, oldest} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("webhooks: register metrics: %w", err)
		}
	}
	return nil
}

// Register gives the task table the delivery handler and its dead-letter
// hook.
func (p *Pipeline) Register(t *queue.Table) error {
	if err := t.Handle(TypeDeliver, p.handleDeliver); err != nil {
		return err
	}
	return t.OnDead(TypeDeliver, p.deliverDead)
}

// OldestUndelivered is the age of the oldest event some webhook has yet
// to receive, as of the scheduler's last pass.
func (p *Pipeline) OldestUndelivered() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.oldest
}

// CreateRequest is a new webhook.
type CreateRequest struct {
	URL    string
	Types  []string
	UserID string
}

// Create validates and stores a webhook; its secret is returned only here.
func (p *Pipeline) Create(ctx context.Context, r CreateRequest) (store.Webhook, string, error) {
	r.URL = strings.TrimSpace(r.URL)
	if r.URL == "" {
		return store.Webhook{}, "", &InvalidError{"url", "url is required: the https:// address that receives the events."}
	}
	if err := checkURL(ctx, r.URL, p.cfg.AllowPrivate, p.cfg.Resolver); err != nil {
		return store.Webhook{}, "", &InvalidError{"url", err.Error()}
	}
	types, err := checkTypes(r.Types)
	if err != nil {
		return store.Webhook{}, "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return store.Webhook{}, "", err
	}
	secret := "whsec_" + base64.StdEncoding.EncodeToString(raw)
	var w store.Webhook
	err = p.db.Update(func(tx *store.Tx) error {
		all, err := tx.Webhooks()
		if err != nil {
			return err
		}
		if n := countOf(all, r.UserID); n >= MaxPerUser {
			return &InvalidError{"url", fmt.Sprintf("at most %d webhooks per user; delete one first", MaxPerUser)}
		}
		w, err = tx.WebhookCreate(store.Webhook{URL: r.URL, Types: types, UserID: r.UserID}, secret)
		return err
	})
	return w, secret, err
}

func countOf(all []store.Webhook, userID string) int {
	n := 0
	for _, w := range all {
		if w.UserID == userID {
			n++
		}
	}
	return n
}

// checkTypes validates the event types of a webhook (empty: every type).
func checkTypes(types []string) ([]string, error) {
	known := store.EventTypes()
	out := []string{}
	for i, t := range types {
		if !slices.Contains(known, t) {
			return nil, &InvalidError{fmt.Sprintf("types[%d]", i), fmt.Sprintf("%q is not an event type; the types are %s.", t, strings.Join(known, ", "))}
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

// Webhooks lists the webhooks, one user's when userID is set.
func (p *Pipeline) Webhooks(userID string) ([]store.Webhook, error) {
	var out []store.Webhook
	err := p.db.View(func(tx *store.Tx) error {
		all, err := tx.Webhooks()
		for _, w := range all {
			if userID == "" || w.UserID == userID {
				out = append(out, w)
			}
		}
		return err
	})
	if out == nil {
		out = []store.Webhook{}
	}
	return out, err
}

// Webhook returns one webhook.
func (p *Pipeline) Webhook(id string) (store.Webhook, error) {
	var w store.Webhook
	err := p.db.View(func(tx *store.Tx) (err error) { w, err = tx.WebhookGet(id); return err })
	if errors.Is(err, store.ErrNotFound) {
		return w, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return w, err
}

// Delete removes a webhook; a batch in flight finds it gone and stops.
func (p *Pipeline) Delete(id string) error {
	err := p.db.Update(func(tx *store.Tx) error { return tx.WebhookDelete(id) })
	p.mu.Lock()
	delete(p.planned, id)
	p.mu.Unlock()
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return err
}

// Replay delivers again every event the webhook takes after the cursor
// (a feed cursor, or 0 for the oldest kept), in order, after the batch in
// flight. It returns store.ErrCursorExpired when events after it were
// pruned, and store.ErrCursorAhead for a cursor past the newest event.
func (p *Pipeline) Replay(id string, after uint64) error {
	err := p.db.Update(func(tx *store.Tx) error {
		w, err := tx.WebhookGet(id)
		if err != nil {
			return err
		}
		if err := tx.EventCursorCheck(after); err != nil {
			return err
		}
		w.Cursor = max(after, tx.EventsPruned())
		// The batch in flight is forgotten: its task still delivers it,
		// but its success no longer moves the cursor.
		w.Batch = nil
		w.Generation++
		return tx.WebhookPut(w)
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err == nil {
		p.Kick()
	}
	return err
}

// ReplaySince delivers again every event the webhook takes that occurred
// at or after since (from the oldest kept when since is older), in order,
// after the batch in flight.
func (p *Pipeline) ReplaySince(id string, since time.Time) error {
	err := p.db.Update(func(tx *store.Tx) error {
		w, err := tx.WebhookGet(id)
		if err != nil {
			return err
		}
		if w.Cursor, err = tx.EventsBefore(since); err != nil {
			return err
		}
		w.Batch = nil // as in Replay: the batch in flight no longer moves the cursor
		w.Generation++
		return tx.WebhookPut(w)
	})
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err == nil {
		p.Kick()
	}
	return err
}

// Deliveries returns up to limit of the webhook's delivery attempts before
// the position before (0: from the newest), newest first, and the position
// of the next page (0: no older one).
func (p *Pipeline) Deliveries(id string, before uint64, limit int) ([]store.Delivery, uint64, error) {
	var out []store.Delivery
	var next uint64
	err := p.db.View(func(tx *store.Tx) error {
		if _, err := tx.WebhookGet(id); err != nil {
			return err
		}
		var err error
		out, next, err = tx.Deliveries(id, before, limit)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return out, next, err
}

// Services are the pipeline's loops: the scheduler, which plans batches
// while it runs.
func (p *Pipeline) Services() []lifecycle.Service { return []lifecycle.Service{p.scheduler} }

// scheduler runs run with the one lifecycle: the pipeline's one service,
// the same at every call of Services.
type scheduler struct {
	lifecycle.Base
	p *Pipeline
}

func (s *scheduler) Start(ctx context.Context) error { return s.StartLoop(ctx, s.p.run) }

// Kick asks the scheduler for a pass now.
func (p *Pipeline) Kick() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Backlog is what a webhook has yet to receive: how many events (counted
// up to backlogScan; More when there are more) and the oldest one's time.
type Backlog struct {
	Events int
	More   bool
	Oldest time.Time
}

// backlogScan bounds the events Backlog counts.
const backlogScan = 10000

// Backlog counts the events w has yet to receive.
func (p *Pipeline) Backlog(w store.Webhook) (Backlog, error) {
	var b Backlog
	err := p.db.View(func(tx *store.Tx) error {
		after := w.Cursor
		if w.Batch != nil {
			after = w.Batch.After
		}
		q := w.Query(min(max(after, tx.EventsPruned()), tx.EventsHead()), backlogScan)
		q.Scan = backlogScan
		events, next, err := tx.Events(q)
		if err != nil {
			return err
		}
		b.Events, b.More = len(events), next < tx.EventsHead() && len(events) == backlogScan
		if len(events) > 0 {
			b.Oldest = events[0].OccurredAt
		}
		return nil
	})
	return b, err
}
