package sheets

import (
	"time"

	"mailroom/queue"
	"mailroom/store"
)

// Recorder records tasks in the caller's transaction (*queue.Queue, or
// *queue.Offline when no mailroom serves the store).
type Recorder interface {
	Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (queue.Record, bool, error)
}

// MovedIn records, in the import's transaction, the flush of a form moved
// from another mailroom with rows waiting: it runs as soon as this
// mailroom serves, and writes them once (a write the source had started is
// read back first, as after any crash).
func MovedIn(tx *store.Tx, q Recorder, formID string, now time.Time) error {
	_, _, err := q.Enqueue(tx, TypeFlush, flushPayload{FormID: formID}, queue.Key(flushKey(formID)), queue.RunAt(now))
	return err
}
