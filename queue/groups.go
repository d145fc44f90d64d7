package queue

import (
	"fmt"

	"mailroom/store"
)

// Group tags a task with a group (the account it works for, say) and a
// weight (what it counts for in that group: the threads of a batch; 0 or
// more). While its record lives the task is counted under its type and
// group, in the transactions that add and remove it, so Queued is a
// lookup that stays exact across crashes and restarts.
func Group(name string, weight int) Option {
	return func(r *store.OutboxRecord, _ *enqueueFlags) { r.Group, r.Weight = name, weight }
}

// Count is how many tasks of a type and group are recorded and not
// finished (waiting, running or retrying; not dead letters), and the sum
// of their weights.
type Count = store.GroupCount

// Queued returns the tasks of type typ tagged with Group(group, ...) that
// are recorded and not finished, and their total weight: one read,
// whatever else is queued.
func (q *Queue) Queued(tx *store.Tx, typ, group string) (Count, error) {
	if _, ok := q.table.Lookup(typ); !ok {
		return Count{}, fmt.Errorf("queue: queued: unknown task type %q", typ)
	}
	if group == "" {
		return Count{}, fmt.Errorf("queue: queued %s: group is empty", typ)
	}
	return tx.OutboxGroupCount(typ, group), nil
}
