// Package queue is mailroom's durable task machinery: the task table, the
// transactional outbox and its relay to asynq, one asynq server per queue,
// error classes, retry policy, dead-letter capture, redrive and alerts.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
	"mailroom/store"
)

// Config tunes the machinery. Zero values take the defaults named.
type Config struct {
	// RelayCap is the most tasks of one queue held in the broker at once;
	// the rest wait in the outbox. Default 1000.
	RelayCap int
	// RelayWorkers enqueue into the broker in parallel. Default 16.
	RelayWorkers int
	// Retry backoff: Initial * Multiplier^(failures-1), at most Max.
	// Defaults 30s, 2, 5m (MAILROOM_RETRY_*).
	RetryInitial    time.Duration
	RetryMultiplier float64
	RetryMax        time.Duration
	// PollInterval is how often an idle server looks for work. Default 100ms.
	PollInterval time.Duration
	// DelayedCheckInterval is how often scheduled and retry tasks are moved
	// to pending. Default 1s.
	DelayedCheckInterval time.Duration
	// ShutdownTimeout bounds the wait for running tasks at Stop. Default 10s.
	ShutdownTimeout time.Duration
	// ServerLinger is how long a queue's asynq server keeps running after
	// the queue last had a task in flight; it then sleeps until the relay
	// hands the queue work again (servers.go). Default 10s.
	ServerLinger time.Duration
	// AlwaysOnServers keeps every queue's server running, even with
	// nothing in flight (MAILROOM_TASK_SERVERS_ALWAYS_ON).
	AlwaysOnServers bool
	// Alerts receive dead-letter notices; nil: none.
	Alerts *Alerter
	// Watch, when set, makes the relays reconcile with the broker at once
	// when it comes back or forgets (see reconcile.go).
	Watch *Watch
	// ReconcileInterval is how often each relay checks that the broker
	// still holds the tasks it handed. Default 15s.
	ReconcileInterval time.Duration
	Logger            *slog.Logger
	// Registerer receives the metrics; nil: a private registry.
	Registerer prometheus.Registerer
}

// Defaults of Config, which serve's flag table reads.
const (
	DefaultRelayCap             = 1000
	DefaultRelayWorkers         = 16
	DefaultRetryInitial         = 30 * time.Second
	DefaultRetryMultiplier      = 2
	DefaultRetryMax             = 5 * time.Minute
	DefaultPollInterval         = 100 * time.Millisecond
	DefaultDelayedCheckInterval = time.Second
	DefaultShutdownTimeout      = 10 * time.Second
	DefaultServerLinger         = 10 * time.Second
	DefaultReconcileInterval    = 15 * time.Second
)

func (c *Config) defaults() {
	if c.RelayCap <= 0 {
		c.RelayCap = DefaultRelayCap
	}
	if c.RelayWorkers <= 0 {
		c.RelayWorkers = DefaultRelayWorkers
	}
	if c.RetryInitial <= 0 {
		c.RetryInitial = DefaultRetryInitial
	}
	if c.RetryMultiplier < 1 {
		c.RetryMultiplier = DefaultRetryMultiplier
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultRetryMax
	}
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.DelayedCheckInterval <= 0 {
		c.DelayedCheckInterval = DefaultDelayedCheckInterval
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = DefaultReconcileInterval
	}
	if c.ServerLinger <= 0 {
		c.ServerLinger = DefaultServerLinger
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
}

// Queue runs the durable tasks of a table.
type Queue struct {
	cfg       Config
	db        *store.DB
	table     *Table
	conn      asynq.RedisConnOpt
	log       *slog.Logger
	metrics   *metrics
	client    *asynq.Client
	inspector *asynq.Inspector
	rdb       redisClient // for the reconcile's checks
	reconcile *reconcileMetrics
	relays    map[string]*relay
	servers   *serverSet
	deleter   *deleter
	started   atomic.Bool // the servers run (Ready)
	// stopping is closed when Stop begins (see Stopping).
	stopping chan struct{}

	lifecycle.Base // Start and Stop
}

var _ lifecycle.Service = (*Queue)(nil)

// New builds the machinery for table over the broker conn. Like asynq,
// which splits its Client from its Server, the queue has two sides: the
// enqueue side (Outbox: Enqueue, Pending, Cancel) works as soon as New
// returns, so pipelines receive it in their constructors and register
// their handlers on the table afterwards; the server side runs from Start,
// which wants every handler set (Validate).
func New(cfg Config, db *store.DB, conn asynq.RedisConnOpt, table *Table) (*Queue, error) {
	cfg.defaults()
	q := &Queue{
		cfg:    cfg,
		db:     db,
		table:  table,
		conn:   conn,
		log:    cfg.Logger.With("component", "queue"),
		relays: map[string]*relay{},
	}
	m, err := newMetrics(cfg.Registerer, q)
	if err != nil {
		return nil, err
	}
	q.metrics = m
	if q.reconcile, err = newReconcileMetrics(cfg.Registerer, table); err != nil {
		return nil, err
	}
	for _, qi := range table.Queues() {
		q.relays[qi.Name] = newRelay(q, qi.Name)
	}
	q.deleter = newDeleter(db, q.log)
	if q.servers, err = newServerSet(q); err != nil {
		return nil, err
	}
	return q, nil
}

// Table returns the task table.
func (q *Queue) Table() *Table { return q.table }

// Start hands the outbox to the broker and starts one asynq server per
// queue, once every task type has its handler. It returns once every
// server runs; each then sleeps while its queue has nothing in flight
// (servers.go).
func (q *Queue) Start(ctx context.Context) error {
	if err := q.table.Validate(); err != nil {
		return err
	}
	r, ok := q.Begin(ctx)
	if !ok {
		return nil // running already
	}
	ctx = r.Context()
	q.stopping = make(chan struct{})
	q.client = asynq.NewClientFromRedisClient(q.conn.MakeRedisClient().(redisClient))
	q.inspector = asynq.NewInspectorFromRedisClient(q.conn.MakeRedisClient().(redisClient))
	q.rdb = q.conn.MakeRedisClient().(redisClient)
	if q.cfg.Watch != nil {
		signals := q.cfg.Watch.Subscribe()
		r.Go(func(ctx context.Context) { q.followWatch(ctx, signals) })
	}
	r.Go(q.deleter.run)

	if err := q.servers.Start(ctx); err != nil {
		return errors.Join(err, q.Stop(context.WithoutCancel(ctx)))
	}
	for _, rl := range q.relays {
		r.Go(rl.run)
	}
	q.started.Store(true)
	return nil
}

// Ready reports whether the task servers are up: their manager runs
// (a queue's server sleeps while the queue has nothing to do).
func (q *Queue) Ready() bool { return q.started.Load() }

// Stop stops the relays, lets running tasks finish (bounded by
// ShutdownTimeout; the rest go back to the queue), flushes pending outbox
// deletions and closes the broker clients. ctx bounds the wait for the
// relays.
func (q *Queue) Stop(ctx context.Context) error {
	r := q.Ending()
	if r == nil {
		return nil
	}
	q.started.Store(false)
	// Handlers that only wait (for quota, for their turn) give their tasks
	// back now; work in progress gets the shutdown timeout to finish.
	close(q.stopping)
	// Every server gets the same ShutdownTimeout at once, not one after
	// another; that timeout bounds the wait, not ctx (a task cut short
	// would run again).
	err := q.servers.Stop(context.WithoutCancel(ctx))
	err = errors.Join(err, r.End(ctx))
	q.deleter.flush()
	q.client.Close()
	q.inspector.Close()
	q.rdb.Close()
	q.client, q.inspector, q.rdb = nil, nil, nil
	return err
}

// Option changes how Enqueue records a task.
type Option func(*store.OutboxRecord, *enqueueFlags)

type enqueueFlags struct{ bringForward bool }

// Key makes the task unique by key while its record lives.
func Key(k string) Option { return func(r *store.OutboxRecord, _ *enqueueFlags) { r.Key = k } }

// RunAt delays the task until t.
func RunAt(t time.Time) Option {
	return func(r *store.OutboxRecord, _ *enqueueFlags) { r.RunAt = t.UTC() }
}

// BringForward, with Key, moves an existing record's run time earlier when
// the new one is earlier.
func BringForward() Option {
	return func(_ *store.OutboxRecord, f *enqueueFlags) { f.bringForward = true }
}

// Enqueue records a task in the caller's transaction. The task reaches the
// broker after the transaction commits. With Key, an existing live record
// of that key is returned instead (added=false).
func (q *Queue) Enqueue(tx *store.Tx, typ string, payload any, opts ...Option) (rec store.OutboxRecord, added bool, err error) {
	r, f, rec, added, err := record(q.table, tx, typ, payload, opts)
	if err != nil {
		return rec, false, err
	}
	rl := q.relays[r.Queue]
	if !added && f.bringForward && r.RunAt.Before(rec.RunAt) {
		rec.RunAt = r.RunAt
		if err := tx.OutboxUpdate(rec); err != nil {
			return rec, false, fmt.Errorf("queue: bring forward %s: %w", rec.ID, err)
		}
		id := rec.ID
		tx.OnCommit(func() { rl.bringForward(id) })
	}
	tx.OnCommit(rl.wake)
	return rec, added, nil
}

// record adds the task's outbox record in tx; r is the record asked for.
func record(table *Table, tx *store.Tx, typ string, payload any, opts []Option) (r store.OutboxRecord, f enqueueFlags, rec store.OutboxRecord, added bool, err error) {
	tt, ok := table.Lookup(typ)
	if !ok {
		return r, f, rec, false, fmt.Errorf("queue: enqueue: unknown task type %q", typ)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return r, f, rec, false, fmt.Errorf("queue: enqueue %s: encode payload: %w", typ, err)
	}
	r = store.OutboxRecord{Queue: tt.Queue, Type: typ, Payload: raw}
	for _, o := range opts {
		o(&r, &f)
	}
	rec, added, err = tx.OutboxAdd(r)
	if err != nil {
		return r, f, rec, false, fmt.Errorf("queue: enqueue %s: %w", typ, err)
	}
	return r, f, rec, added, nil
}

// Offline records tasks in the outbox of a store no mailroom serves
// (mailroom import-user): the relays hand them to the broker when the
// mailroom starts. It brings no record forward.
type Offline struct{ table *Table }

// NewOffline returns the enqueue side of table without a broker.
func NewOffline(table *Table) *Offline { return &Offline{table: table} }

// Enqueue records a task in the caller's transaction (see Queue.Enqueue).
func (o *Offline) Enqueue(tx *store.Tx, typ string, payload any, opts ...Option) (store.OutboxRecord, bool, error) {
	_, _, rec, added, err := record(o.table, tx, typ, payload, opts)
	return rec, added, err
}

// Ack removes the task's outbox record inside tx, so a local effect and the
// task's completion commit together (exactly once in effect).
func (t *Task) Ack(tx *store.Tx) error {
	if err := tx.OutboxDelete(t.Queue, t.ID); err != nil {
		return fmt.Errorf("queue: ack %s: %w", t.ID, err)
	}
	t.acked = true
	return nil
}

type redisClient = redis.UniversalClient

// retryError carries the backoff computed from the durable failure count.
type retryError struct {
	err   error
	delay time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

func (q *Queue) retryDelay(n int, err error, _ *asynq.Task) time.Duration {
	if d, ok := RetryAfter(err); ok {
		return d
	}
	var re *retryError
	if errors.As(err, &re) {
		return re.delay
	}
	return q.Backoff(n + 1)
}

// Backoff is the wait after the given number of failed attempts.
func (q *Queue) Backoff(failures int) time.Duration {
	d := float64(q.cfg.RetryInitial) * math.Pow(q.cfg.RetryMultiplier, float64(max(failures-1, 0)))
	if d > float64(q.cfg.RetryMax) || math.IsInf(d, 0) {
		return q.cfg.RetryMax
	}
	return time.Duration(d)
}

func (q *Queue) process(tt TaskType) asynq.HandlerFunc {
	return func(ctx context.Context, at *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		retried, _ := asynq.GetRetryCount(ctx)
		t := &Task{ID: id, Type: tt.Name, Queue: tt.Queue, Payload: at.Payload(), Attempt: retried + 1}
		start := time.Now()
		err := q.run(withStopping(ctx, q.stopping), tt, t)
		elapsed := time.Since(start)
		q.metrics.duration.WithLabelValues(tt.Name).Observe(elapsed.Seconds())
		_, limited := RetryAfter(err)
		handedBack := errors.Is(err, context.Canceled) && ctx.Err() != nil
		if !limited && !handedBack {
			// The charts count what the table counts: a deferral is neither.
			q.metrics.observe(tt.Queue, start, elapsed, err == nil || IsStale(err))
		}
		rl := q.relays[tt.Queue]

		switch {
		case err == nil || IsStale(err):
			q.metrics.processed.WithLabelValues(tt.Name).Inc()
			q.log.Debug("task done", "task_id", id, "type", tt.Name, "attempt", t.Attempt, "took", elapsed)
			if !t.acked {
				q.deleter.add(tt.Queue, id)
			}
			rl.done(id)
			return nil
		case handedBack:
			// Shutdown: hand it back without counting a failure.
			return RateLimited(err, time.Second)
		}
		if limited {
			wait, _ := RetryAfter(err)
			q.metrics.rateLimited.WithLabelValues(tt.Name).Inc()
			q.log.Debug("task rate limited", "task_id", id, "type", tt.Name, "wait", wait, "err", err)
			return err
		}
		q.metrics.failed.WithLabelValues(tt.Name).Inc()
		dead, failures, derr := q.recordFailure(tt, t, err)
		if derr != nil {
			q.log.Error("record task failure", "task_id", id, "type", tt.Name, "err", derr)
			return &retryError{err: err, delay: q.Backoff(t.Attempt)}
		}
		if dead {
			q.log.Warn("task dead-lettered", "task_id", id, "type", tt.Name, "attempts", failures, "err", err)
			rl.done(id)
			return asynq.RevokeTask
		}
		q.log.Info("task failed, will retry", "task_id", id, "type", tt.Name, "attempt", failures, "err", err)
		return &retryError{err: err, delay: q.Backoff(failures)}
	}
}

func (q *Queue) run(ctx context.Context, tt TaskType, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return tt.Handler(ctx, t)
}

// recordFailure counts a failed attempt in the task's outbox record and,
// when it is permanent or out of retries, moves the record to the
// dead-letter archive in the same transaction.
func (q *Queue) recordFailure(tt TaskType, t *Task, cause error) (dead bool, failures int, err error) {
	now := time.Now().UTC()
	err = q.db.Update(func(tx *store.Tx) error {
		rec, err := tx.OutboxGet(tt.Queue, t.ID)
		if errors.Is(err, store.ErrNotFound) {
			// Already finished elsewhere, or lost: keep what we know.
			rec = store.OutboxRecord{ID: t.ID, Queue: tt.Queue, Type: tt.Name, Payload: t.Payload, Failures: t.Attempt - 1}
		} else if err != nil {
			return err
		}
		rec.Failures++
		if rec.FirstFailedAt.IsZero() {
			rec.FirstFailedAt = now
		}
		rec.LastFailedAt = now
		rec.LastError = Truncate(cause.Error(), 4000)
		failures = rec.Failures
		dead = IsPermanent(cause) || rec.Failures > tt.MaxRetries
		if !dead {
			if err := tx.OutboxUpdate(rec); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
			return nil
		}
		if err := tx.OutboxDelete(tt.Queue, t.ID); err != nil {
			return err
		}
		if tt.OnDead != nil {
			if err := tt.OnDead(tx, t); err != nil {
				return fmt.Errorf("dead-letter hook of %s: %w", tt.Name, err)
			}
		}
		return q.BuryTx(tx, store.DeadLetter{
			ID: rec.ID, Type: rec.Type, Queue: rec.Queue, Payload: rec.Payload, Key: rec.Key,
			Group: rec.Group, Weight: rec.Weight,
			Error: rec.LastError, Attempts: rec.Failures,
			FirstFailedAt: rec.FirstFailedAt, LastFailedAt: rec.LastFailedAt,
		})
	})
	return dead, failures, err
}

// BuryTx archives d as a dead letter in tx, with its alert (committed with
// it): the way every failure reaches the dead letters, whether a task's
// handler failed for good or a pipeline found the task's work failed after
// the task itself completed (a reclassify batch whose label changes Gmail
// refused when its account's writer sent them). d keeps its task's key,
// group and weight, so that a redrive runs it as the task ran.
func (q *Queue) BuryTx(tx *store.Tx, d store.DeadLetter) error {
	if q.cfg.Alerts != nil {
		if err := q.cfg.Alerts.record(tx, d.Type, d.ID, d.Error, d.LastFailedAt); err != nil {
			return err
		}
	}
	if err := tx.DeadLetterPut(d); err != nil {
		return err
	}
	tx.OnCommit(func() {
		q.metrics.dead.WithLabelValues(d.Type).Inc()
		if q.cfg.Alerts != nil {
			q.cfg.Alerts.Notify(d.Type, d.ID, d.Error)
		}
	})
	return nil
}

// Truncate shortens s to at most n bytes, cut at a character's start,
// and marks the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
