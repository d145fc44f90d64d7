package queue

import (
	"errors"
	"fmt"

	"mailroom/store"
)

// Redrive moves dead letters back into the outbox as new tasks, in one
// transaction. Unknown ids are reported in missing.
func (q *Queue) Redrive(ids []string) (redriven int, missing []string, err error) {
	tasks, missing, err := q.RedriveTasks(ids)
	return len(tasks), missing, err
}

// Redriven is a dead letter sent again, and the id of its new task (see
// Outcome).
type Redriven struct {
	DeadLetterID, TaskID, Type string
}

// RedriveTasks is Redrive, returning the new tasks.
func (q *Queue) RedriveTasks(ids []string) (tasks []Redriven, missing []string, err error) {
	err = q.db.Update(func(tx *store.Tx) error {
		tasks, missing = nil, nil
		for _, id := range ids {
			d, err := tx.DeadLetterGet(id)
			if errors.Is(err, store.ErrNotFound) {
				missing = append(missing, id)
				continue
			}
			if err != nil {
				return err
			}
			task, err := q.redriveOne(tx, d)
			if err != nil {
				return err
			}
			tasks = append(tasks, Redriven{DeadLetterID: d.ID, TaskID: task, Type: d.Type})
		}
		return nil
	})
	return tasks, missing, err
}

// Task outcomes (TaskOutcome.State).
const (
	OutcomeWaiting  = "waiting"  // in the outbox, not failed yet: queued or running
	OutcomeRetrying = "retrying" // in the outbox after a failure
	OutcomeDead     = "dead"     // failed for good again: a dead letter
	OutcomeDone     = "done"     // gone from the outbox with no dead letter: it succeeded
)

// TaskOutcome is what became of a task.
type TaskOutcome struct {
	State     string
	Type      string // when still known (not done)
	Failures  int
	LastError string
}

// Outcome says what became of the task with id (a task a redrive made):
// a task stays in the outbox until it succeeds or is dead-lettered, so
// its absence from both means it succeeded.
func (q *Queue) Outcome(id string) (TaskOutcome, error) {
	var out TaskOutcome
	err := q.db.View(func(tx *store.Tx) error {
		for _, qu := range q.table.Queues() {
			r, err := tx.OutboxGet(qu.Name, id)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			out = TaskOutcome{State: OutcomeWaiting, Type: r.Type, Failures: r.Failures, LastError: r.LastError}
			if r.Failures > 0 {
				out.State = OutcomeRetrying
			}
			return nil
		}
		d, err := tx.DeadLetterGet(id)
		switch {
		case err == nil:
			out = TaskOutcome{State: OutcomeDead, Type: d.Type, Failures: d.Attempts, LastError: d.Error}
		case errors.Is(err, store.ErrNotFound):
			out = TaskOutcome{State: OutcomeDone}
		default:
			return err
		}
		return nil
	})
	if err != nil {
		return TaskOutcome{}, fmt.Errorf("queue: outcome of %s: %w", id, err)
	}
	return out, nil
}

// RedriveType redrives every dead letter of a task type.
func (q *Queue) RedriveType(typ string) (int, error) {
	if _, ok := q.table.Lookup(typ); !ok {
		return 0, fmt.Errorf("queue: unknown task type %q", typ)
	}
	n := 0
	err := q.db.Update(func(tx *store.Tx) error {
		n = 0
		cursor := ""
		for {
			page, next, err := tx.DeadLetters(typ, cursor, 500)
			if err != nil {
				return err
			}
			for _, d := range page {
				if _, err := q.redriveOne(tx, d); err != nil {
					return err
				}
				n++
			}
			if next == "" {
				return nil
			}
			cursor = next
		}
	})
	return n, err
}

// redriveOne moves d to the outbox and returns its new task's id.
func (q *Queue) redriveOne(tx *store.Tx, d store.DeadLetter) (string, error) {
	if err := tx.DeadLetterRedriven(d.ID); err != nil {
		return "", err
	}
	tt, ok := q.table.Lookup(d.Type)
	if !ok {
		return "", fmt.Errorf("queue: dead letter %s has unknown type %s", d.ID, d.Type)
	}
	rec, _, err := tx.OutboxAdd(store.OutboxRecord{Queue: tt.Queue, Type: d.Type, Payload: d.Payload, Key: d.Key, Group: d.Group, Weight: d.Weight})
	if err != nil {
		return "", fmt.Errorf("queue: redrive %s: %w", d.ID, err)
	}
	tx.OnCommit(q.relays[tt.Queue].wake)
	return rec.ID, nil
}

// Discard deletes a dead letter for good; store.ErrNotFound when the
// archive does not hold it.
func (q *Queue) Discard(id string) error {
	return q.db.Update(func(tx *store.Tx) error { return tx.DeadLetterDiscard(id) })
}

// DeadLetter is a task that failed for good, kept in the archive until it
// is redriven or discarded.
type DeadLetter = store.DeadLetter

// DeadLetters lists the archive newest first, of one task type when typ is
// set, starting after cursor (a dead letter's id; empty: the newest), at
// most limit (0: all). next is the cursor of the next page, empty at the
// end.
func (q *Queue) DeadLetters(typ, cursor string, limit int) (list []DeadLetter, next string, err error) {
	if cursor != "" {
		if _, err := store.Seq(cursor); err != nil {
			return nil, "", fmt.Errorf("queue: dead letters: cursor %q is not a dead letter's id", cursor)
		}
	}
	err = q.db.View(func(tx *store.Tx) error {
		list, next, err = tx.DeadLetters(typ, cursor, limit)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("queue: dead letters: %w", err)
	}
	return list, next, nil
}

// DeadLetter returns one dead letter; store.ErrNotFound when the
// archive does not hold it.
func (q *Queue) DeadLetter(id string) (d DeadLetter, err error) {
	err = q.db.View(func(tx *store.Tx) error {
		d, err = tx.DeadLetterGet(id)
		return err
	})
	return d, err
}

// DeadLetterCounts returns how many dead letters each task type has (kept
// with every capture, redrive and discard: no scan of the archive).
func (q *Queue) DeadLetterCounts() (counts map[string]int, err error) {
	err = q.db.View(func(tx *store.Tx) error {
		counts, err = tx.DeadLetterCounts()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("queue: count dead letters: %w", err)
	}
	return counts, nil
}
