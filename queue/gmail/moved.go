package gmail

import (
	"mailroom/queue"
	"mailroom/store"
)

// Recorder records tasks in the caller's transaction (*queue.Queue, or
// *queue.Offline when no mailroom serves the store).
type Recorder interface {
	Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (queue.Record, bool, error)
}

var (
	_ Recorder = (*queue.Queue)(nil)
	_ Recorder = (*queue.Offline)(nil)
)

// triggerMoved is the trigger of the sync that follows a move.
const triggerMoved = "moved"

// MovedIn records, in the import's transaction, the work of an account
// moved from another mailroom: its watch renewed on this mailroom's topic
// (a no-op without one) and a history sync from its watermark, or the
// full sync it was in the middle of. An account in error or disconnected
// waits, as it did on the source, for a resync or a new connect.
func MovedIn(tx *store.Tx, q Recorder, acc store.Account) error {
	if !active(acc) {
		return nil
	}
	var err error
	if needsFullSync(acc) {
		_, _, err = q.Enqueue(tx, TypeFullSync, syncPayload{AccountID: acc.ID, Trigger: triggerMoved}, queue.Key(fullSyncKey(acc.ID)))
	} else {
		_, _, err = q.Enqueue(tx, TypeSync, syncPayload{AccountID: acc.ID, Trigger: triggerMoved}, queue.Key(syncKey(acc.ID)))
	}
	if err != nil {
		return err
	}
	_, _, err = q.Enqueue(tx, TypeWatchRenew, watchPayload{AccountID: acc.ID}, queue.Key(watchKey(acc.ID)))
	return err
}
