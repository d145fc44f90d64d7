package queue

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"mailroom/store"
)

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

// Table is the one table of task types. The engine names none: each
// pipeline declares its rows (its package's Tasks) and the app assembles
// them (as River's AddWorker and database/sql's Register assemble theirs).
type Table struct {
	rows []TaskType
}

// NewTable builds the table from the pipelines' rows, without handlers
// (each pipeline's Register attaches its own). It refuses a row without a
// name, a queue or workers, a duplicate type, and a type that is a prefix
// of another (asynq's mux matches by prefix).
func NewTable(rows ...[]TaskType) (*Table, error) {
	t := &Table{}
	for _, r := range rows {
		t.rows = append(t.rows, r...)
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return t, nil
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

// Validate checks the table as Start wants it: NewTable's checks, and a
// handler on every row.
func (t *Table) Validate() error {
	if err := t.check(); err != nil {
		return err
	}
	for _, r := range t.rows {
		if r.Handler == nil {
			return fmt.Errorf("queue: type %s has no handler", r.Name)
		}
	}
	return nil
}

// check checks the rows: every one named, queued and with workers, no
// duplicate, and no name a prefix of another.
func (t *Table) check() error {
	names := make([]string, 0, len(t.rows))
	for _, r := range t.rows {
		switch {
		case r.Name == "" || r.Queue == "":
			return fmt.Errorf("queue: a task type row needs a name and a queue: %+v", r)
		case r.Concurrency < 1:
			return fmt.Errorf("queue: type %s: concurrency must be at least 1", r.Name)
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
