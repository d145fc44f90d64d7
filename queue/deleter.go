package queue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"mailroom/store"
)

// deleter removes the outbox records of finished tasks in batches, off the
// task path: a handler never waits for a commit. A crash before the commit
// only means the task runs again.
type deleter struct {
	db  *store.DB
	log *slog.Logger

	mu      sync.Mutex
	pending []outboxRef
	kick    chan struct{}
}

type outboxRef struct{ queue, id string }

func newDeleter(db *store.DB, log *slog.Logger) *deleter {
	return &deleter{db: db, log: log, kick: make(chan struct{}, 1)}
}

func (d *deleter) add(queue, id string) {
	d.mu.Lock()
	d.pending = append(d.pending, outboxRef{queue, id})
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// coalesce is how long the deleter gathers finished tasks before one
// commit: at thousands of tasks a second this turns a commit (two fsyncs)
// per task into one per batch.
const coalesce = 20 * time.Millisecond

func (d *deleter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.kick:
		}
		select {
		case <-ctx.Done():
			return // Stop flushes what is left
		case <-time.After(coalesce):
		}
		d.flush()
	}
}

// flush deletes everything pending in one transaction.
func (d *deleter) flush() {
	d.mu.Lock()
	batch := d.pending
	d.pending = nil
	d.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	err := d.db.Update(func(tx *store.Tx) error {
		for _, ref := range batch {
			if err := tx.OutboxDelete(ref.queue, ref.id); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		// A full disk, say: keep them and try again (a restart meanwhile
		// only runs them again).
		d.log.Error("delete finished outbox records; trying again in a second", "count", len(batch), "err", err)
		d.mu.Lock()
		if len(d.pending) < maxRetained {
			d.pending = append(batch, d.pending...)
		}
		d.mu.Unlock()
		time.AfterFunc(time.Second, func() {
			select {
			case d.kick <- struct{}{}:
			default:
			}
		})
	}
}

// maxRetained bounds the finished tasks kept for another try after failed
// deletes; past it they are dropped (they run again after a restart).
const maxRetained = 100000
