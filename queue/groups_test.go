package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
	"mailroom/store/storetest"
)

func queued(t *testing.T, db *store.DB, q *queue.Queue, group string) queue.Count {
	t.Helper()
	var c queue.Count
	err := db.View(func(tx *store.Tx) (err error) {
		c, err = q.Queued(tx, typeRecord, group)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func eventuallyQueued(t *testing.T, h *harness, group string, want queue.Count) {
	t.Helper()
	testkit.Eventually(t, 15*time.Second, "group "+group+" to count "+jsonOf(want), func() bool {
		return queued(t, h.db, h.q, group) == want
	})
}

func jsonOf(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

// Queued counts a group's tasks and weights from enqueue until they leave
// the outbox: while they run, while they retry, not once they are dead
// letters, again when redriven, and a discard leaves it alone. (storetest
// also recounts every group from the outbox when the test ends.)
func TestQueuedFollowsEveryMove(t *testing.T) {
	b := brokertest.Embedded(t)
	release, deadRelease := make(chan struct{}), make(chan struct{})
	defer func() {
		for _, c := range []chan struct{}{release, deadRelease} {
			select {
			case <-c:
			default:
				close(c)
			}
		}
	}()
	var flakyRuns atomic.Int64
	var flakyFails, deadFails atomic.Bool
	flakyFails.Store(true)
	deadFails.Store(true)
	h := newHarness(t, b, queue.Config{RetryInitial: 300 * time.Millisecond, RetryMax: time.Second},
		func(ctx context.Context, task *queue.Task) error {
			var p struct{ Kind string }
			_ = json.Unmarshal(task.Payload, &p)
			switch p.Kind {
			case "hold":
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			case "flaky":
				flakyRuns.Add(1)
				if flakyFails.Load() {
					return errors.New("gmail answered 503")
				}
			case "dead":
				if deadFails.Load() {
					return queue.Permanent(errors.New("account was deleted"))
				}
				select {
				case <-deadRelease:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})

	// Enqueue; running tasks still count; success removes them.
	for _, w := range []int{10, 20, 30} {
		h.enqueue(t, 1, map[string]string{"kind": "hold"}, queue.Group("acc-a", w))
	}
	h.enqueue(t, 2, map[string]string{"kind": "ok"}, queue.Group("acc-b", 5))
	h.enqueue(t, 4, map[string]string{"kind": "ok"}) // no group: not counted anywhere
	if c := queued(t, h.db, h.q, "acc-a"); c != (queue.Count{Tasks: 3, Weight: 60}) {
		t.Errorf("acc-a after enqueue = %+v, want 3 tasks weighing 60", c)
	}
	eventuallyQueued(t, h, "acc-b", queue.Count{})
	if c := queued(t, h.db, h.q, "acc-a"); c != (queue.Count{Tasks: 3, Weight: 60}) {
		t.Errorf("acc-a while running = %+v, want 3 tasks weighing 60", c)
	}
	close(release)
	eventuallyQueued(t, h, "acc-a", queue.Count{})

	// A retrying task keeps its count until it succeeds.
	h.enqueue(t, 1, map[string]string{"kind": "flaky"}, queue.Group("acc-c", 7))
	testkit.Eventually(t, 15*time.Second, "the flaky task to be retried", func() bool { return flakyRuns.Load() >= 2 })
	if c := queued(t, h.db, h.q, "acc-c"); c != (queue.Count{Tasks: 1, Weight: 7}) {
		t.Errorf("acc-c while retrying = %+v, want 1 task weighing 7", c)
	}
	flakyFails.Store(false)
	eventuallyQueued(t, h, "acc-c", queue.Count{})

	// A dead letter is not queued; redriven, it counts again; a discard
	// of another changes nothing.
	ids := h.enqueue(t, 2, map[string]string{"kind": "dead"}, queue.Group("acc-d", 4))
	testkit.Eventually(t, 15*time.Second, "two dead letters", func() bool { return len(deadLetters(t, h.db)) == 2 })
	if c := queued(t, h.db, h.q, "acc-d"); c != (queue.Count{}) {
		t.Errorf("acc-d with its tasks dead = %+v, want none", c)
	}
	d, err := h.q.DeadLetter(ids[0])
	if err != nil || d.Group != "acc-d" || d.Weight != 4 {
		t.Fatalf("dead letter = %+v, %v; want it to keep group acc-d and weight 4", d, err)
	}
	if err := h.q.Discard(ids[1]); err != nil {
		t.Fatal(err)
	}
	if err := h.q.Discard(ids[1]); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second discard: %v, want store.ErrNotFound", err)
	}
	if c := queued(t, h.db, h.q, "acc-d"); c != (queue.Count{}) {
		t.Errorf("acc-d after a discard = %+v, want none", c)
	}
	// Redriven, it counts again (held running here so the count is seen
	// before it finishes).
	deadFails.Store(false)
	n, missing, err := h.q.Redrive([]string{ids[0], ids[1]})
	if err != nil || n != 1 || len(missing) != 1 {
		t.Fatalf("Redrive = %d, %v, %v; want 1 and the discarded one missing", n, missing, err)
	}
	if c := queued(t, h.db, h.q, "acc-d"); c != (queue.Count{Tasks: 1, Weight: 4}) {
		t.Errorf("acc-d after redrive = %+v, want 1 task weighing 4", c)
	}
	close(deadRelease)
	eventuallyQueued(t, h, "acc-d", queue.Count{})
	if counts, err := h.q.DeadLetterCounts(); err != nil || counts[typeRecord] != 0 {
		t.Errorf("dead letters left = %v, %v; want none", counts, err)
	}
	if _, err := h.q.Queued(nil, "no:such", "acc-a"); err == nil {
		t.Error("Queued of an unknown type: want an error")
	}
}

// The counts live in bbolt with the records: a store closed with tasks
// queued and never run (all a kill -9 leaves is what committed) counts the
// same when opened again, and the tasks that then run bring it to zero.
func TestQueuedSurvivesARestart(t *testing.T) {
	b := brokertest.Embedded(t)
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	table := testTable(t, 3)
	for _, tt := range table.Types() {
		_ = table.Handle(tt.Name, func(context.Context, *queue.Task) error { return nil })
	}
	q, err := queue.New(queue.Config{}, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *store.Tx) error {
		for i := range 7 {
			group, weight := "acc-a", 3
			if i >= 5 {
				group, weight = "acc-b", 1
			}
			if _, _, err := q.Enqueue(tx, typeRecord, struct{}{}, queue.Group(group, weight)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	release := make(chan struct{})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	h := newHarnessOn(t, storetest.OpenAt(t, dir), b, queue.Config{}, func(ctx context.Context, _ *queue.Task) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if c := queued(t, h.db, h.q, "acc-a"); c != (queue.Count{Tasks: 5, Weight: 15}) {
		t.Errorf("acc-a after the restart = %+v, want 5 tasks weighing 15", c)
	}
	if c := queued(t, h.db, h.q, "acc-b"); c != (queue.Count{Tasks: 2, Weight: 2}) {
		t.Errorf("acc-b after the restart = %+v, want 2 tasks weighing 2", c)
	}
	close(release)
	eventuallyQueued(t, h, "acc-a", queue.Count{})
	eventuallyQueued(t, h, "acc-b", queue.Count{})
}
