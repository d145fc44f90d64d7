package broker_test

// The asynq features mailroom uses, run against the embedded store and a real
// redis-server alike, so that a Lua or command difference shows up here first.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hibiken/asynq"

	"mailroom/internal/testkit"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

const (
	queueName = "inbox"
	// checkInterval is the servers' DelayedTaskCheckInterval: short, so that
	// retries and scheduled tasks move on within the test's time.
	checkInterval = 100 * time.Millisecond
	// shortDelay is every retry delay in these tests. Due times are whole
	// seconds in asynq, so a retry still takes up to a second.
	shortDelay = 50 * time.Millisecond
	waitLong   = 10 * time.Second
)

func shortRetry(int, error, *asynq.Task) time.Duration { return shortDelay }

func TestEnqueueTaskIDConflictAndDelete(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client, insp := newClient(t, b), newInspector(t, b)

		task := asynq.NewTask("email:send", []byte(`{"n":1}`))
		info, err := client.Enqueue(task, asynq.TaskID("task-1"), asynq.Queue(queueName))
		if err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		if info.ID != "task-1" || info.Queue != queueName || info.State != asynq.TaskStatePending {
			t.Errorf("Enqueue info = id %q queue %q state %v, want task-1 %s pending", info.ID, info.Queue, info.State, queueName)
		}
		if _, err := client.Enqueue(task, asynq.TaskID("task-1"), asynq.Queue(queueName)); !errors.Is(err, asynq.ErrTaskIDConflict) {
			t.Fatalf("second Enqueue with the same TaskID: err = %v, want ErrTaskIDConflict", err)
		}

		queues, err := insp.Queues()
		if err != nil {
			t.Fatalf("Queues: %v", err)
		}
		if diff := cmp.Diff([]string{queueName}, queues); diff != "" {
			t.Errorf("Queues (-want +got):\n%s", diff)
		}
		pending, err := insp.ListPendingTasks(queueName)
		if err != nil {
			t.Fatalf("ListPendingTasks: %v", err)
		}
		type row struct{ ID, Type, Payload string }
		var gotRows []row
		for _, ti := range pending {
			gotRows = append(gotRows, row{ti.ID, ti.Type, string(ti.Payload)})
		}
		if diff := cmp.Diff([]row{{"task-1", "email:send", `{"n":1}`}}, gotRows); diff != "" {
			t.Errorf("ListPendingTasks (-want +got):\n%s", diff)
		}
		if got, err := queueCounts(insp, queueName); err != nil || got != (counts{Pending: 1}) {
			t.Errorf("counts = %+v, %v; want 1 pending", got, err)
		}

		if err := insp.DeleteTask(queueName, "task-1"); err != nil {
			t.Fatalf("DeleteTask: %v", err)
		}
		if err := insp.DeleteTask(queueName, "task-1"); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("DeleteTask of a deleted task: err = %v, want ErrTaskNotFound", err)
		}
		if got, err := queueCounts(insp, queueName); err != nil || got != (counts{}) {
			t.Errorf("counts after delete = %+v, %v; want zero", got, err)
		}
		// The ID is free again.
		if _, err := client.Enqueue(task, asynq.TaskID("task-1"), asynq.Queue(queueName)); err != nil {
			t.Errorf("Enqueue after DeleteTask: %v", err)
		}
	})
}

func TestScheduledTasks(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client, insp := newClient(t, b), newInspector(t, b)

		start := time.Now()
		dueIn := start.Add(600 * time.Millisecond)
		dueAt := start.Add(1200 * time.Millisecond)
		if _, err := client.Enqueue(asynq.NewTask("sheets:flush", nil), asynq.TaskID("in"),
			asynq.Queue(queueName), asynq.ProcessIn(dueIn.Sub(start))); err != nil {
			t.Fatalf("Enqueue ProcessIn: %v", err)
		}
		if _, err := client.Enqueue(asynq.NewTask("sheets:flush", nil), asynq.TaskID("at"),
			asynq.Queue(queueName), asynq.ProcessAt(dueAt)); err != nil {
			t.Fatalf("Enqueue ProcessAt: %v", err)
		}
		if got, err := queueCounts(insp, queueName); err != nil || got != (counts{Scheduled: 2}) {
			t.Fatalf("counts before the server starts = %+v, %v; want 2 scheduled", got, err)
		}

		type run struct {
			id string
			at time.Time
		}
		ran := make(chan run, 2)
		startServer(t, b, asynq.Config{
			Queues:                   map[string]int{queueName: 1},
			DelayedTaskCheckInterval: checkInterval,
		}, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			ran <- run{id, time.Now()}
			return nil
		}))

		due := map[string]time.Time{"in": dueIn, "at": dueAt}
		for range 2 {
			r := receive(t, ran, waitLong, "a scheduled task to run")
			// asynq keeps due times in whole seconds: up to 1s early.
			if early := due[r.id].Sub(r.at); early > time.Second {
				t.Errorf("task %s ran %s before it was due", r.id, early)
			}
			delete(due, r.id)
		}
		waitCounts(t, insp, queueName, counts{Processed: 2}, waitLong)
	})
}

func TestRetryWithCustomDelay(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client, insp := newClient(t, b), newInspector(t, b)

		var (
			mu          sync.Mutex
			delayCalls  []string // "n:error"
			retryCounts []int    // GetRetryCount seen by the handler
		)
		done := make(chan struct{})
		startServer(t, b, asynq.Config{
			Queues:                   map[string]int{queueName: 1},
			DelayedTaskCheckInterval: checkInterval,
			RetryDelayFunc: func(n int, err error, task *asynq.Task) time.Duration {
				mu.Lock()
				defer mu.Unlock()
				delayCalls = append(delayCalls, fmt.Sprintf("%d:%v", n, err))
				return shortDelay
			},
		}, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			n, _ := asynq.GetRetryCount(ctx)
			mu.Lock()
			retryCounts = append(retryCounts, n)
			mu.Unlock()
			if n < 2 {
				return errTest
			}
			close(done)
			return nil
		}))

		if _, err := client.Enqueue(asynq.NewTask("gmail:sync", nil), asynq.Queue(queueName), asynq.MaxRetry(5)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		receive(t, done, waitLong, "the third attempt")
		waitCounts(t, insp, queueName, counts{Processed: 3, Failed: 2}, waitLong)

		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]string{"0:boom", "1:boom"}, delayCalls); diff != "" {
			t.Errorf("RetryDelayFunc calls (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int{0, 1, 2}, retryCounts); diff != "" {
			t.Errorf("retry counts seen by the handler (-want +got):\n%s", diff)
		}
	})
}

func TestArchiveAfterMaxRetryAndSkipRetry(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client, insp := newClient(t, b), newInspector(t, b)

		var attemptsExhaust, attemptsSkip atomic.Int32
		startServer(t, b, asynq.Config{
			Queues:                   map[string]int{queueName: 1},
			DelayedTaskCheckInterval: checkInterval,
			RetryDelayFunc:           shortRetry,
		}, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			id, _ := asynq.GetTaskID(ctx)
			switch id {
			case "exhaust":
				attemptsExhaust.Add(1)
				return errTest
			case "skip":
				attemptsSkip.Add(1)
				return fmt.Errorf("account deleted: %w", asynq.SkipRetry)
			}
			return fmt.Errorf("unexpected task %q", id)
		}))

		if _, err := client.Enqueue(asynq.NewTask("gmail:added", nil), asynq.TaskID("exhaust"),
			asynq.Queue(queueName), asynq.MaxRetry(1)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		if _, err := client.Enqueue(asynq.NewTask("gmail:added", nil), asynq.TaskID("skip"),
			asynq.Queue(queueName), asynq.MaxRetry(5)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		// exhaust: a failed first attempt (retry) and a failed last one
		// (archive); skip: one failed attempt (archive).
		waitCounts(t, insp, queueName, counts{Archived: 2, Processed: 3, Failed: 3}, waitLong)
		if got := attemptsExhaust.Load(); got != 2 {
			t.Errorf("attempts of the MaxRetry(1) task = %d, want 2", got)
		}
		if got := attemptsSkip.Load(); got != 1 {
			t.Errorf("attempts of the SkipRetry task = %d, want 1", got)
		}

		archived, err := insp.ListArchivedTasks(queueName)
		if err != nil {
			t.Fatalf("ListArchivedTasks: %v", err)
		}
		type row struct {
			ID               string
			Retried, MaxRtry int
			LastErr          string
			State            asynq.TaskState
		}
		var got []row
		for _, ti := range archived {
			got = append(got, row{ti.ID, ti.Retried, ti.MaxRetry, ti.LastErr, ti.State})
		}
		slices.SortFunc(got, func(a, b row) int { return strings.Compare(a.ID, b.ID) })
		want := []row{
			{"exhaust", 1, 1, "boom", asynq.TaskStateArchived},
			{"skip", 0, 5, "account deleted: skip retry for the task", asynq.TaskStateArchived},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ListArchivedTasks (-want +got):\n%s", diff)
		}

		if err := insp.DeleteTask(queueName, "skip"); err != nil {
			t.Fatalf("DeleteTask of an archived task: %v", err)
		}
		n, err := insp.DeleteAllArchivedTasks(queueName)
		if err != nil || n != 1 {
			t.Fatalf("DeleteAllArchivedTasks = %d, %v; want 1", n, err)
		}
		if got, err := queueCounts(insp, queueName); err != nil || got != (counts{Processed: 3, Failed: 3}) {
			t.Errorf("counts after deleting the archive = %+v, %v", got, err)
		}
	})
}

var errThrottled = errors.New("rate limited")

func TestIsFailureFalseDoesNotCount(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client, insp := newClient(t, b), newInspector(t, b)

		var (
			attempts    atomic.Int32
			mu          sync.Mutex
			retryCounts []int
		)
		done := make(chan struct{})
		startServer(t, b, asynq.Config{
			Queues:                   map[string]int{queueName: 1},
			DelayedTaskCheckInterval: checkInterval,
			RetryDelayFunc:           shortRetry,
			IsFailure:                func(err error) bool { return !errors.Is(err, errThrottled) },
		}, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			n, _ := asynq.GetRetryCount(ctx)
			mu.Lock()
			retryCounts = append(retryCounts, n)
			mu.Unlock()
			if attempts.Add(1) <= 3 {
				return fmt.Errorf("sheets quota: %w", errThrottled)
			}
			close(done)
			return nil
		}))

		// More non-failures than MaxRetry allows failures: never archived.
		if _, err := client.Enqueue(asynq.NewTask("sheets:flush", nil), asynq.Queue(queueName), asynq.MaxRetry(1)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		receive(t, done, waitLong, "the fourth attempt")
		// Only the success counts: a retry that is not a failure is not
		// counted as processed either.
		waitCounts(t, insp, queueName, counts{Processed: 1}, waitLong)
		mu.Lock()
		defer mu.Unlock()
		if diff := cmp.Diff([]int{0, 0, 0, 0}, retryCounts); diff != "" {
			t.Errorf("retry counts seen by the handler (-want +got):\n%s", diff)
		}
	})
}

func TestQueueInfoActivePendingScheduled(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client, insp := newClient(t, b), newInspector(t, b)

		for _, id := range []string{"a", "b"} {
			if _, err := client.Enqueue(asynq.NewTask("rules:batch", nil), asynq.TaskID(id), asynq.Queue(queueName)); err != nil {
				t.Fatalf("Enqueue: %v", err)
			}
		}
		if _, err := client.Enqueue(asynq.NewTask("rules:batch", nil), asynq.Queue(queueName), asynq.ProcessIn(time.Hour)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}

		started := make(chan struct{}, 2)
		release := make(chan struct{})
		startServer(t, b, asynq.Config{
			Queues:      map[string]int{queueName: 1},
			Concurrency: 1,
		}, asynq.HandlerFunc(func(ctx context.Context, task *asynq.Task) error {
			started <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))

		receive(t, started, waitLong, "the first task to start")
		waitCounts(t, insp, queueName, counts{Active: 1, Pending: 1, Scheduled: 1}, waitLong)
		close(release)
		waitCounts(t, insp, queueName, counts{Scheduled: 1, Processed: 2}, waitLong)
	})
}

// TestUniqueLockExpires needs TTLs to run down: on the embedded store, that
// is the broker's clock.
func TestUniqueLockExpires(t *testing.T) {
	t.Parallel()
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		client := newClient(t, b)
		task := asynq.NewTask("gmail:watch", []byte("acct-1"))
		const ttl = time.Second

		start := time.Now()
		if _, err := client.Enqueue(task, asynq.Unique(ttl)); err != nil {
			t.Fatalf("Enqueue: %v", err)
		}
		if _, err := client.Enqueue(task, asynq.Unique(ttl)); !errors.Is(err, asynq.ErrDuplicateTask) {
			t.Fatalf("second Enqueue: err = %v, want ErrDuplicateTask", err)
		}
		testkit.EventuallyNil(t, 5*time.Second, "the unique lock to expire", func() error {
			_, err := client.Enqueue(task, asynq.Unique(ttl))
			return err
		})
		if elapsed := time.Since(start); elapsed < ttl-brokertest.ClockTick {
			t.Errorf("unique lock of %s expired after %s", ttl, elapsed)
		}
	})
}
