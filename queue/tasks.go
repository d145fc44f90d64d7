package queue

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"mailroom/store"
)

// The task types of the contract. A type name is never a prefix of another:
// asynq's mux matches by prefix.
const (
	TypeGmailSync            = "gmail:sync"
	TypeGmailFullSync        = "gmail:full-sync"
	TypeGmailMessageAdded    = "gmail:message-added"
	TypeGmailMessageRead     = "gmail:message-read"
	TypeGmailMessageUnread   = "gmail:message-unread"
	TypeGmailMessageTrashed  = "gmail:message-trashed"
	TypeGmailMessageRestored = "gmail:message-restored"
	TypeGmailMessageDeleted  = "gmail:message-deleted"
	TypeGmailMessageLabeled  = "gmail:message-labeled"
	TypeGmailWatchRenew      = "gmail:watch-renew"
	TypeRulesReclassifyBatch = "rules:reclassify-batch"
	// TypeRulesLabelWrite sends an account's label changes to Gmail in
	// batchModify calls of up to 1,000 ids (one task per account at a time,
	// by key); not in the contract's table, which allows extra types.
	TypeRulesLabelWrite = "rules:label-write"
	TypeSheetsFlush     = "sheets:flush"
	TypeWebhooksDeliver = "webhooks:deliver"

	// TypeDebugRecord exists only when TableConfig.Debug is set: the
	// crash-safety tests and benchmarks use it.
	TypeDebugRecord = "debug:record"
)

// WebhookMaxRetries bounds a webhook batch's retries only as a backstop:
// at the longest backoff (MAILROOM_RETRY_MAX, 5 minutes) it is years.
const WebhookMaxRetries = 1 << 20

// WebhookPoll is how often the webhooks queue's server, while awake, looks
// for the next batch.
const WebhookPoll = 10 * time.Millisecond

// WebhookConcurrency is how many webhook batches are posted at once. A
// webhook has one batch in flight at a time and its worker mostly waits
// on the receiver, so the workers bound how many webhooks are served at
// once: with 8, 100 webhooks took turns, 8 at a time.
const WebhookConcurrency = 128

// Task is one run of a durable task.
type Task struct {
	ID      string // the outbox record id, also the broker's task id
	Type    string
	Queue   string
	Payload []byte
	// Attempt counts runs of this task in this broker, from 1.
	Attempt int
	acked   bool
}

// Handler does one task's work. See errors.go for how errors are classed.
type Handler func(ctx context.Context, t *Task) error

// TaskType is one row of the task table: everything about a type is here,
// and the queues, servers, metrics and admin views derive from it.
type TaskType struct {
	Name        string
	Queue       string
	Concurrency int
	// MaxRetries is how many retries follow the first failed attempt.
	MaxRetries int
	// Timeout bounds one run.
	Timeout time.Duration
	// Poll, when set and shorter than Config.PollInterval, is how often
	// the queue's awake server looks for work: for a queue whose tasks
	// follow one another (a webhook's next batch is recorded as its last
	// one finishes), the poll is the wait between them.
	Poll    time.Duration
	Handler Handler
	// OnDead, when set, runs in the transaction that moves a task of this
	// type to the dead letters, so that what its owner counts about it
	// (a reclassify job's failed batches) changes with it.
	OnDead DeadHook
}

// DeadHook records what a task's owner keeps about the task's move to the
// dead letters. An error aborts the move (the task is retried).
type DeadHook func(tx *store.Tx, t *Task) error

// TableConfig holds the settings the table's rows take from configuration.
type TableConfig struct {
	MaxRetries              int // MAILROOM_MAX_RETRIES
	ConcurrencyMessageAdded int // MAILROOM_CONCURRENCY_MESSAGE_ADDED
	ConcurrencyState        int // MAILROOM_CONCURRENCY_STATE
	Debug                   bool
	DebugConcurrency        int // zero: 10
}

// Table is the one table of task types.
type Table struct {
	rows []TaskType
}

// NewTable builds the table of every task type, without handlers.
func NewTable(cfg TableConfig) *Table {
	r := cfg.MaxRetries
	state := cfg.ConcurrencyState
	rows := []TaskType{
		{Name: TypeGmailSync, Queue: "gmail-sync", Concurrency: 4, MaxRetries: r, Timeout: 30 * time.Minute},
		{Name: TypeGmailFullSync, Queue: "gmail-full-sync", Concurrency: 4, MaxRetries: r, Timeout: 30 * time.Minute},
		{Name: TypeGmailMessageAdded, Queue: "gmail-message-added", Concurrency: cfg.ConcurrencyMessageAdded, MaxRetries: r, Timeout: 2 * time.Minute},
		{Name: TypeGmailMessageRead, Queue: "gmail-message-read", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeGmailMessageUnread, Queue: "gmail-message-unread", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeGmailMessageTrashed, Queue: "gmail-message-trashed", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeGmailMessageRestored, Queue: "gmail-message-restored", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeGmailMessageDeleted, Queue: "gmail-message-deleted", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeGmailMessageLabeled, Queue: "gmail-message-labeled", Concurrency: state, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeGmailWatchRenew, Queue: "gmail-maintenance", Concurrency: 2, MaxRetries: r, Timeout: time.Minute},
		{Name: TypeRulesReclassifyBatch, Queue: "rules-reclassify", Concurrency: 6, MaxRetries: r, Timeout: 5 * time.Minute},
		{Name: TypeRulesLabelWrite, Queue: "rules-label-write", Concurrency: 4, MaxRetries: r, Timeout: 5 * time.Minute},
		// A flush waits in its task for its time and for short quota
		// refusals (sheets.Config.BrokerTick), so many of its workers wait
		// rather than work: enough of them that a burst of other accounts'
		// flushes does not keep a quiet account's flush waiting long for a
		// worker (4 did, under load: TestQuotaQuietAccountBesideBusyOnes).
		{Name: TypeSheetsFlush, Queue: "sheets-flush", Concurrency: 16, MaxRetries: r, Timeout: 2 * time.Minute},
		// A webhook's batch is retried until MAILROOM_WEBHOOK_MAX_AGE has
		// passed (its handler then gives it up), not a number of times.
		// Its server polls often while awake: a webhook's batches follow
		// one another, each waiting for the poll (it sleeps when idle).
		{Name: TypeWebhooksDeliver, Queue: "webhooks", Concurrency: WebhookConcurrency, MaxRetries: WebhookMaxRetries, Timeout: time.Minute, Poll: WebhookPoll},
	}
	if cfg.Debug {
		c := cfg.DebugConcurrency
		if c == 0 {
			c = 10
		}
		rows = append(rows, TaskType{Name: TypeDebugRecord, Queue: "debug", Concurrency: c, MaxRetries: r, Timeout: time.Minute})
	}
	return &Table{rows: rows}
}

// Handle attaches a handler to a type of the table.
func (t *Table) Handle(name string, h Handler) error {
	row, err := t.row(name)
	if err != nil {
		return err
	}
	if row.Handler != nil {
		return fmt.Errorf("queue: type %s already has a handler", name)
	}
	row.Handler = h
	return nil
}

// OnDead sets the dead-letter hook of a type.
func (t *Table) OnDead(name string, h DeadHook) error {
	row, err := t.row(name)
	if err != nil {
		return err
	}
	if row.OnDead != nil {
		return fmt.Errorf("queue: type %s already has a dead-letter hook", name)
	}
	row.OnDead = h
	return nil
}

func (t *Table) row(name string) (*TaskType, error) {
	for i := range t.rows {
		if t.rows[i].Name == name {
			return &t.rows[i], nil
		}
	}
	return nil, fmt.Errorf("queue: no task type %q in the table", name)
}

// Types returns a copy of the rows.
func (t *Table) Types() []TaskType { return append([]TaskType(nil), t.rows...) }

// Lookup returns the row of a type.
func (t *Table) Lookup(name string) (TaskType, bool) {
	for _, r := range t.rows {
		if r.Name == name {
			return r, true
		}
	}
	return TaskType{}, false
}

// QueueInfo is a queue as the table defines it.
type QueueInfo struct {
	Name        string
	Types       []string
	Concurrency int
	// Poll is the shortest Poll of its types (zero: none set).
	Poll time.Duration
}

// Queues groups the rows by queue, in table order.
func (t *Table) Queues() []QueueInfo {
	var out []QueueInfo
	idx := map[string]int{}
	for _, r := range t.rows {
		i, ok := idx[r.Queue]
		if !ok {
			i = len(out)
			idx[r.Queue] = i
			out = append(out, QueueInfo{Name: r.Queue})
		}
		out[i].Types = append(out[i].Types, r.Name)
		out[i].Concurrency = max(out[i].Concurrency, r.Concurrency)
		if r.Poll > 0 && (out[i].Poll == 0 || r.Poll < out[i].Poll) {
			out[i].Poll = r.Poll
		}
	}
	return out
}

// Validate checks the table: every row named, queued, with workers and a
// handler, no duplicate, and no name a prefix of another.
func (t *Table) Validate() error {
	names := make([]string, 0, len(t.rows))
	for _, r := range t.rows {
		switch {
		case r.Name == "" || r.Queue == "":
			return fmt.Errorf("queue: a task type row needs a name and a queue: %+v", r)
		case r.Concurrency < 1:
			return fmt.Errorf("queue: type %s: concurrency must be at least 1", r.Name)
		case r.Handler == nil:
			return fmt.Errorf("queue: type %s has no handler", r.Name)
		}
		names = append(names, r.Name)
	}
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			return fmt.Errorf("queue: duplicate task type %s", names[i])
		}
		if strings.HasPrefix(names[i], names[i-1]) {
			return fmt.Errorf("queue: task type %s is a prefix of %s (asynq matches by prefix)", names[i-1], names[i])
		}
	}
	return nil
}
