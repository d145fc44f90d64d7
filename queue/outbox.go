package queue

import (
	"fmt"

	"mailroom/store"
)

// Record is a recorded task as Enqueue returns it (its id is the asynq
// task id).
type Record = store.OutboxRecord

// Outbox is the enqueue side of the queue, which pipelines receive in
// their constructors (*Queue is one). The outbox is the queue's business:
// a pipeline asks it about its tasks by type and key, never by the store's
// queue names.
type Outbox interface {
	// Enqueue records a task in the caller's transaction.
	Enqueue(tx *store.Tx, typ string, payload any, opts ...Option) (Record, bool, error)
	// Pending reports whether a task of type typ recorded with Key(key) is
	// waiting or running.
	Pending(tx *store.Tx, typ, key string) bool
	// Cancel removes the record of a task of type typ that has not run,
	// so it never runs (a copy the broker already holds finds no record
	// and the handler's own checks skip it).
	Cancel(tx *store.Tx, typ, id string) error
	// Queued counts the unfinished tasks of type typ recorded with
	// Group(group, ...), and their weights: a lookup, not a scan.
	Queued(tx *store.Tx, typ, group string) (Count, error)
}

var _ Outbox = (*Queue)(nil)

// Pending reports whether a task of type typ recorded with Key(key) is
// waiting or running.
func (q *Queue) Pending(tx *store.Tx, typ, key string) bool {
	tt, ok := q.table.Lookup(typ)
	return ok && tx.OutboxKeyHeld(tt.Queue, key)
}

// Cancel removes the outbox record id of a task of type typ.
func (q *Queue) Cancel(tx *store.Tx, typ, id string) error {
	tt, ok := q.table.Lookup(typ)
	if !ok {
		return fmt.Errorf("queue: cancel: unknown task type %q", typ)
	}
	if err := tx.OutboxDelete(tt.Queue, id); err != nil {
		return fmt.Errorf("queue: cancel %s %s: %w", typ, id, err)
	}
	return nil
}

// Waiting reports whether any task of type typ's queue is recorded and not
// finished (one record read: cheap enough to poll).
func (q *Queue) Waiting(tx *store.Tx, typ string) (bool, error) {
	tt, ok := q.table.Lookup(typ)
	if !ok {
		return false, fmt.Errorf("queue: unknown task type %q", typ)
	}
	found := false
	err := tx.OutboxScan(tt.Queue, "", 1, func(store.OutboxRecord) bool { found = true; return false })
	return found, err
}

// Len returns how many tasks of type typ's queue are recorded and not
// finished (waiting, running or retrying).
func (q *Queue) Len(tx *store.Tx, typ string) (int, error) {
	tt, ok := q.table.Lookup(typ)
	if !ok {
		return 0, fmt.Errorf("queue: len: unknown task type %q", typ)
	}
	return tx.OutboxLen(tt.Queue), nil
}

// Tasks calls fn for each recorded, unfinished task of type typ, oldest
// first, until fn returns false. It reads the type's whole queue: an
// inspection (tests, an operator's look), not something to poll; to count
// an account's work, tag it with Group and ask Queued.
func (q *Queue) Tasks(tx *store.Tx, typ string, fn func(Record) bool) error {
	tt, ok := q.table.Lookup(typ)
	if !ok {
		return fmt.Errorf("queue: tasks: unknown task type %q", typ)
	}
	return tx.OutboxScan(tt.Queue, "", 0, func(r store.OutboxRecord) bool {
		return r.Type != typ || fn(r)
	})
}
