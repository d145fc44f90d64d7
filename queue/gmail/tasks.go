package gmail

import (
	"time"

	"mailroom/queue"
)

// The pipeline's task types (the contract's table, and gmail:full-sync
// beside it). A type is never a prefix of another: asynq's mux matches by
// prefix.
const (
	TypeSync            = "gmail:sync"
	TypeFullSync        = "gmail:full-sync"
	TypeMessageAdded    = "gmail:message-added"
	TypeMessageRead     = "gmail:message-read"
	TypeMessageUnread   = "gmail:message-unread"
	TypeMessageTrashed  = "gmail:message-trashed"
	TypeMessageRestored = "gmail:message-restored"
	TypeMessageDeleted  = "gmail:message-deleted"
	TypeMessageLabeled  = "gmail:message-labeled"
	TypeWatchRenew      = "gmail:watch-renew"
)

// TaskConfig holds the settings the pipeline's task rows take.
type TaskConfig struct {
	MaxRetries              int // MAILROOM_MAX_RETRIES
	ConcurrencyMessageAdded int // MAILROOM_CONCURRENCY_MESSAGE_ADDED
	ConcurrencyState        int // MAILROOM_CONCURRENCY_STATE
}

// fullSyncQueue is gmail:full-sync's queue, which holds no other type.
const fullSyncQueue = "gmail-full-sync"

// Tasks are the pipeline's rows of the task table, without handlers
// (Register attaches them): a queue per event type, so that a backlog of
// new mail never holds up a read.
func Tasks(cfg TaskConfig) []queue.TaskType {
	r, state := cfg.MaxRetries, cfg.ConcurrencyState
	return []queue.TaskType{
		{Name: TypeSync, Queue: "gmail-sync", Concurrency: 4, MaxRetries: r, Timeout: 30 * time.Minute},
		{Name: TypeFullSync, Queue: fullSyncQueue, Concurrency: 4, MaxRetries: r, Timeout: 30 * time.Minute},
		{Name: TypeMessageAdded, Queue: "gmail-message-added", Concurrency: cfg.ConcurrencyMessageAdded, MaxRetries: r, Timeout: 2 * time.Minute},
		{Name: TypeMessageRead, Queue: "gmail-message-read", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeMessageUnread, Queue: "gmail-message-unread", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeMessageTrashed, Queue: "gmail-message-trashed", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeMessageRestored, Queue: "gmail-message-restored", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeMessageDeleted, Queue: "gmail-message-deleted", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeMessageLabeled, Queue: "gmail-message-labeled", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeWatchRenew, Queue: "gmail-maintenance", Concurrency: 2, MaxRetries: r, Timeout: time.Minute},
	}
}
