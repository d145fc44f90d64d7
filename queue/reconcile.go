package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"mailroom/store"
)

// Reconcile: the relay hands each outbox record to the broker once and
// frees its slot when the task finishes. A broker that forgets (a Redis
// restarted without persistence, flushed, evicting keys, or failed over to a
// replica that missed writes) would leave those records handed in our eyes
// and absent in the broker's, and their queue would stop. So every relay
// periodically (ReconcileInterval), and at once when the Watch sees the
// broker come back or forget, asks the broker which of its handed tasks it
// still holds, and hands the rest again. The task id is the record id, so a
// task the broker still holds is never doubled (a task-id conflict is not
// an error), and the check runs in the relay's goroutine, never while it
// is handing records.

// taskKey is where asynq keeps a task (asynq's base.TaskKey; a test checks
// it against a task asynq enqueued).
func taskKey(queue, id string) string { return "asynq:{" + queue + "}:t:" + id }

// reconcileChunk is how many keys one existsScript call checks.
const reconcileChunk = 500

// existsScript answers, for each key, whether the broker holds it (1 or
// 0). One command, not a pipeline of EXISTS: the embedded broker is served
// over a synchronous net.Pipe, where a pipeline larger than the server's
// read buffer deadlocks (the client is still writing commands while the
// server blocks writing the first reply).
var existsScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do out[i] = redis.call('EXISTS', k) end
return out`)

type reconcileMetrics struct {
	rehanded *prometheus.CounterVec
	runs     prometheus.Counter
}

func newReconcileMetrics(reg prometheus.Registerer, table *Table) (*reconcileMetrics, error) {
	m := &reconcileMetrics{
		rehanded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_tasks_rehanded_total",
			Help: "Outbox records handed to the broker again because the broker had lost their task.",
		}, []string{"queue"}),
		runs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_reconcile_runs_total",
			Help: "Checks of the handed tasks against the broker, per queue.",
		}),
	}
	for _, c := range []prometheus.Collector{m.rehanded, m.runs} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("queue: register reconcile metrics: %w", err)
		}
	}
	for _, qi := range table.Queues() {
		m.rehanded.WithLabelValues(qi.Name)
	}
	return m, nil
}

// kickReconcile asks every relay to reconcile at its next turn.
func (q *Queue) kickReconcile() {
	for _, r := range q.relays {
		select {
		case r.reconcileC <- struct{}{}:
		default:
		}
	}
}

// followWatch kicks a reconcile each time the watch signals, until ctx ends.
func (q *Queue) followWatch(ctx context.Context, signals <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-signals:
			q.kickReconcile()
		}
	}
}

// Rehanded returns how many records were handed again since the start.
func (q *Queue) Rehanded() int64 {
	var n int64
	for _, qi := range q.table.Queues() {
		n += counterValue(q.reconcile.rehanded.WithLabelValues(qi.Name))
	}
	return n
}

// reconcile hands again the handed records whose task the broker lost. It
// runs in the relay's goroutine, so no record is being handed meanwhile:
// every id in inflight has reached the broker once.
func (r *relay) reconcile(ctx context.Context) (int, error) {
	r.mu.Lock()
	ids := make([]string, 0, len(r.inflight))
	for id := range r.inflight {
		ids = append(ids, id)
	}
	r.mu.Unlock()
	r.q.reconcile.runs.Inc()
	if len(ids) == 0 {
		return 0, nil
	}
	slices.Sort(ids)
	lost, err := r.q.lostTasks(ctx, r.queue, ids)
	if err != nil {
		return 0, err
	}
	if len(lost) == 0 {
		return 0, nil
	}
	// A task that finished after the snapshot left inflight before asynq
	// deleted it (process calls done first): keep only those still handed.
	r.mu.Lock()
	lost = slices.DeleteFunc(lost, func(id string) bool { _, ok := r.inflight[id]; return !ok })
	r.mu.Unlock()
	var recs []store.OutboxRecord
	var gone []string
	err = r.q.db.View(func(tx *store.Tx) error {
		for _, id := range lost {
			rec, err := tx.OutboxGet(r.queue, id)
			if errors.Is(err, store.ErrNotFound) {
				gone = append(gone, id) // finished, its record deleted
				continue
			}
			if err != nil {
				return err
			}
			recs = append(recs, rec)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, id := range gone {
		r.done(id)
	}
	handed := 0
	for _, rec := range recs {
		if err := r.enqueue(ctx, rec); err != nil {
			return handed, BrokerUnavailable(err)
		}
		handed++
		r.q.reconcile.rehanded.WithLabelValues(r.queue).Inc()
	}
	if handed > 0 {
		// The queue is awake (these tasks were in flight); every hand wakes
		// it all the same, so no hand can reach a sleeping queue.
		r.q.servers.wake(r.queue)
		r.q.log.Warn("the broker had lost tasks; handed them again from the outbox", "queue", r.queue, "count", handed)
	}
	return handed, nil
}

// lostTasks returns the ids (sorted) whose task the broker does not hold.
func (q *Queue) lostTasks(ctx context.Context, queue string, ids []string) ([]string, error) {
	if q.rdb == nil {
		return nil, nil
	}
	var lost []string
	for chunk := range slices.Chunk(ids, reconcileChunk) {
		keys := make([]string, len(chunk))
		for i, id := range chunk {
			keys[i] = taskKey(queue, id)
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		held, err := existsScript.Run(cctx, q.rdb, keys).Int64Slice()
		cancel()
		if err != nil {
			return nil, BrokerUnavailable(fmt.Errorf("queue: check handed tasks of %s: %w", queue, err))
		}
		for i, h := range held {
			if h == 0 {
				lost = append(lost, chunk[i])
			}
		}
	}
	return lost, nil
}

// runReconcile reconciles and, on failure (the broker is still away), asks
// again a little later.
func (r *relay) runReconcile(ctx context.Context) {
	if _, err := r.reconcile(ctx); err != nil && ctx.Err() == nil {
		r.q.log.Debug("reconcile with the broker", "queue", r.queue, "err", err)
		time.AfterFunc(time.Second, func() {
			select {
			case r.reconcileC <- struct{}{}:
			default:
			}
		})
	}
}
