package rules

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

// MovedIn records, in the import's transaction, the writer of an account
// moved from another mailroom with label changes waiting.
func MovedIn(tx *store.Tx, q Recorder, accountID string, now time.Time) error {
	_, _, err := q.Enqueue(tx, TypeLabelWrite, writePayload{AccountID: accountID}, queue.Key(writerKey(accountID)), queue.RunAt(now))
	return err
}
