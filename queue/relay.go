package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"mailroom/store"
)

// relay feeds one queue's outbox records to the broker in id order, keeping
// at most cfg.RelayCap of them in the broker at once. Records are handed
// with their id as the asynq task id, so handing one twice is harmless.
type relay struct {
	q     *Queue
	queue string
	wakeC chan struct{}
	// reconcileC asks for a reconcile with the broker (reconcile.go).
	reconcileC chan struct{}

	mu       sync.Mutex
	inflight map[string]struct{} // handed and not yet finished
	// enqueuing holds the records of inflight whose enqueue has not
	// returned yet: the broker may not list them, so they still count as
	// the outbox's in the queues' figures (handedOver).
	enqueuing map[string]struct{}
	cursor    string // last handed id
	// handing is set while fill reads and hands a batch; forward collects
	// the records brought forward meanwhile: the batch may hold one read
	// before its new run time, which is brought forward again once handed.
	handing bool
	forward map[string]struct{}
}

func newRelay(q *Queue, name string) *relay {
	return &relay{q: q, queue: name, wakeC: make(chan struct{}, 1), reconcileC: make(chan struct{}, 1), inflight: map[string]struct{}{}, enqueuing: map[string]struct{}{}}
}

func (r *relay) wake() {
	select {
	case r.wakeC <- struct{}{}:
	default:
	}
}

// done marks a handed task finished, making room.
func (r *relay) done(id string) {
	r.mu.Lock()
	_, was := r.inflight[id]
	delete(r.inflight, id)
	delete(r.enqueuing, id)
	r.mu.Unlock()
	if was {
		r.wake()
	}
}

// backlog is the number of tasks handed and not finished.
func (r *relay) backlog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}

// handedOver is the part of the backlog the broker has taken (its enqueue
// returned): the queues' figures count the rest as the outbox's, so that a
// task on its way is never in neither count.
func (r *relay) handedOver() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight) - len(r.enqueuing)
}

func (r *relay) run(ctx context.Context) {
	safety := time.NewTicker(time.Second)
	defer safety.Stop()
	check := time.NewTicker(r.q.cfg.ReconcileInterval)
	defer check.Stop()
	for {
		if err := r.fill(ctx); err != nil && ctx.Err() == nil {
			r.q.log.Warn("relay: hand outbox to broker", "queue", r.queue, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wakeC:
		case <-safety.C:
		case <-check.C:
			r.runReconcile(ctx)
		case <-r.reconcileC:
			r.runReconcile(ctx)
		}
	}
}

// fill hands records after the cursor until the cap is reached.
func (r *relay) fill(ctx context.Context) error {
	for ctx.Err() == nil {
		r.mu.Lock()
		room := r.q.cfg.RelayCap - len(r.inflight)
		after := r.cursor
		r.handing = room > 0
		r.mu.Unlock()
		if room <= 0 {
			return nil
		}
		var recs []store.OutboxRecord
		err := r.q.db.View(func(tx *store.Tx) error {
			return tx.OutboxScan(r.queue, after, room, func(rec store.OutboxRecord) bool {
				recs = append(recs, rec)
				return true
			})
		})
		if err != nil {
			r.endBatch(nil)
			return err
		}
		if len(recs) == 0 {
			r.endBatch(nil)
			return nil
		}
		// Mark in flight first: a fast worker may finish before Enqueue returns.
		r.mu.Lock()
		for _, rec := range recs {
			r.inflight[rec.ID] = struct{}{}
			r.enqueuing[rec.ID] = struct{}{}
		}
		r.mu.Unlock()
		handed, err := r.hand(ctx, recs)
		r.mu.Lock()
		for _, rec := range recs[handed:] {
			delete(r.inflight, rec.ID)
		}
		if handed > 0 {
			r.cursor = recs[handed-1].ID
		}
		r.mu.Unlock()
		r.endBatch(recs[:handed])
		if handed > 0 {
			r.q.servers.wake(r.queue) // after the hand: the new server's first poll finds it
		}
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}

// hand enqueues recs in parallel and returns how many of its prefix made it.
func (r *relay) hand(ctx context.Context, recs []store.OutboxRecord) (int, error) {
	errs := make([]error, len(recs))
	workers := min(r.q.cfg.RelayWorkers, len(recs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = r.enqueue(ctx, recs[i])
				r.mu.Lock()
				delete(r.enqueuing, recs[i].ID)
				r.mu.Unlock()
			}
		}()
	}
	for i := range recs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return i, err
		}
	}
	return len(recs), nil
}

func (r *relay) enqueue(ctx context.Context, rec store.OutboxRecord) error {
	tt, ok := r.q.table.Lookup(rec.Type)
	if !ok {
		return errors.New("relay: outbox holds unknown task type " + rec.Type)
	}
	opts := []asynq.Option{
		asynq.TaskID(rec.ID),
		asynq.Queue(r.queue),
		asynq.MaxRetry(1 << 30), // retries are decided from the outbox's durable count
		asynq.Timeout(tt.Timeout),
	}
	if !rec.RunAt.IsZero() && rec.RunAt.After(time.Now()) {
		opts = append(opts, asynq.ProcessAt(rec.RunAt))
	}
	_, err := r.q.client.EnqueueContext(ctx, asynq.NewTask(rec.Type, rec.Payload), opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil // already in the broker (external Redis after a restart)
	}
	return err
}

// bringForward makes a scheduled task run now if it is already handed. A
// batch being handed meanwhile may hold the record as read before (with its
// old run time): the batch brings it forward once handed (endBatch).
func (r *relay) bringForward(id string) {
	r.mu.Lock()
	_, handed := r.inflight[id]
	if r.handing {
		if r.forward == nil {
			r.forward = map[string]struct{}{}
		}
		r.forward[id] = struct{}{}
	}
	r.mu.Unlock()
	if handed {
		r.runNow(id)
	}
}

// endBatch ends fill's batch: those of handed brought forward while the
// batch was read and handed are brought forward again, now in the broker.
func (r *relay) endBatch(handed []store.OutboxRecord) {
	r.mu.Lock()
	forward := r.forward
	r.handing, r.forward = false, nil
	r.mu.Unlock()
	for _, rec := range handed {
		if _, ok := forward[rec.ID]; ok {
			r.runNow(rec.ID)
		}
	}
}

// runNow moves a handed task that waits for its time to the pending ones.
func (r *relay) runNow(id string) {
	if r.q.inspector == nil {
		return
	}
	if err := r.q.inspector.RunTask(r.queue, id); err != nil &&
		!errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		r.q.log.Debug("relay: bring forward", "queue", r.queue, "task_id", id, "err", err)
	}
}
