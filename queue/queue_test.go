package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
	"mailroom/store/storetest"
)

// harness is a queue over a real broker and a real bbolt file, with the
// debug:record type handled by fn.
type harness struct {
	db *store.DB
	q  *queue.Queue
}

func newHarness(t *testing.T, b *broker.Broker, cfg queue.Config, fn queue.Handler, setup ...func(*queue.Table)) *harness {
	t.Helper()
	return newHarnessOn(t, storetest.Open(t), b, cfg, fn, setup...)
}

// newHarnessOn is newHarness over the given store.
func newHarnessOn(t *testing.T, db *store.DB, b *broker.Broker, cfg queue.Config, fn queue.Handler, setup ...func(*queue.Table)) *harness {
	t.Helper()
	table := testTable(t, 3)
	for _, tt := range table.Types() {
		h := fn
		if tt.Name != typeRecord {
			h = func(context.Context, *queue.Task) error { return nil }
		}
		if err := table.Handle(tt.Name, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, fn := range setup {
		fn(table)
	}
	if cfg.RetryInitial == 0 {
		cfg.RetryInitial, cfg.RetryMax = 50*time.Millisecond, 200*time.Millisecond
	}
	cfg.DelayedCheckInterval = 100 * time.Millisecond
	cfg.PollInterval = 20 * time.Millisecond
	q, err := queue.New(cfg, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	return &harness{db: db, q: q}
}

func (h *harness) enqueue(t *testing.T, n int, payload any, opts ...queue.Option) []string {
	t.Helper()
	var ids []string
	err := h.db.Update(func(tx *store.Tx) error {
		for range n {
			rec, _, err := h.q.Enqueue(tx, typeRecord, payload, opts...)
			if err != nil {
				return err
			}
			ids = append(ids, rec.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func outboxLen(t *testing.T, db *store.DB, queueName string) int {
	n := 0
	if err := db.View(func(tx *store.Tx) error { n = tx.OutboxLen(queueName); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func deadLetters(t *testing.T, db *store.DB) []store.DeadLetter {
	var out []store.DeadLetter
	err := db.View(func(tx *store.Tx) error {
		var err error
		out, _, err = tx.DeadLetters("", "", 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDurableTasksRunOnceAndLeaveTheOutbox(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		var mu sync.Mutex
		seen := map[string]int{}
		h := newHarness(t, b, queue.Config{RelayCap: 50}, func(_ context.Context, task *queue.Task) error {
			mu.Lock()
			seen[task.ID]++
			mu.Unlock()
			return nil
		})
		ids := h.enqueue(t, 500, map[string]int{"n": 1})
		testkit.Eventually(t, 20*time.Second, "all tasks to run", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) == len(ids)
		})
		testkit.Eventually(t, 5*time.Second, "the outbox to empty", func() bool { return outboxLen(t, h.db, "debug") == 0 })
		for _, id := range ids {
			if seen[id] != 1 {
				t.Errorf("task %s ran %d times, want 1", id, seen[id])
			}
		}
	})
}

func TestRelayKeepsTheBrokerBounded(t *testing.T) {
	b := brokertest.Embedded(t)
	release := make(chan struct{})
	var ran atomic.Int64
	h := newHarness(t, b, queue.Config{RelayCap: 20}, func(ctx context.Context, _ *queue.Task) error {
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		ran.Add(1)
		return nil
	})
	h.enqueue(t, 200, struct{}{})
	testkit.Eventually(t, 5*time.Second, "the relay to fill the broker", func() bool {
		st, err := h.q.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return debugStats(st).Active > 0
	})
	time.Sleep(200 * time.Millisecond) // give an unbounded relay the chance to overfill
	st, err := h.q.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := debugStats(st)
	if inBroker := s.Pending - s.Outbox + s.Active; inBroker > 20 {
		t.Fatalf("broker holds %d tasks of the queue, cap is 20 (stats %+v)", inBroker, s)
	}
	if s.Pending+s.Active != 200 {
		t.Fatalf("pending+active = %d, want 200 (stats %+v)", s.Pending+s.Active, s)
	}
	close(release)
	testkit.Eventually(t, 20*time.Second, "every task to run", func() bool { return ran.Load() == 200 })
}

func debugStats(st []queue.QueueStats) queue.QueueStats {
	for _, s := range st {
		if s.Name == "debug" {
			return s
		}
	}
	return queue.QueueStats{}
}

func TestErrorClasses(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		var attempts sync.Map // payload kind -> *atomic.Int64
		count := func(kind string) *atomic.Int64 {
			v, _ := attempts.LoadOrStore(kind, new(atomic.Int64))
			return v.(*atomic.Int64)
		}
		limitedOnce := atomic.Bool{}
		h := newHarness(t, b, queue.Config{}, func(_ context.Context, task *queue.Task) error {
			var p struct{ Kind string }
			_ = json.Unmarshal(task.Payload, &p)
			count(p.Kind).Add(1)
			switch p.Kind {
			case "permanent":
				return queue.Permanent(errors.New("account was deleted"))
			case "retry":
				return errors.New("gmail answered 503")
			case "limited":
				if limitedOnce.CompareAndSwap(false, true) {
					return queue.RateLimited(errors.New("quota"), 200*time.Millisecond)
				}
				return nil
			case "stale":
				return queue.Stale("superseded")
			}
			return nil
		})
		for _, k := range []string{"permanent", "retry", "limited", "stale"} {
			h.enqueue(t, 1, map[string]string{"kind": k})
		}
		testkit.Eventually(t, 15*time.Second, "two dead letters", func() bool { return len(deadLetters(t, h.db)) == 2 })
		testkit.Eventually(t, 5*time.Second, "the outbox to empty", func() bool { return outboxLen(t, h.db, "debug") == 0 })
		byErr := map[string]store.DeadLetter{}
		for _, d := range deadLetters(t, h.db) {
			byErr[d.Error] = d
		}
		if d := byErr["account was deleted"]; d.Attempts != 1 {
			t.Errorf("permanent: attempts = %d, want 1", d.Attempts)
		}
		if d := byErr["gmail answered 503"]; d.Attempts != 4 || d.FirstFailedAt.After(d.LastFailedAt) {
			t.Errorf("retryable: attempts = %d (want 4: 1 + 3 retries), first %v last %v", d.Attempts, d.FirstFailedAt, d.LastFailedAt)
		}
		if n := count("retry").Load(); n != 4 {
			t.Errorf("retryable handler ran %d times, want 4", n)
		}
		if n := count("limited").Load(); n != 2 {
			t.Errorf("rate-limited handler ran %d times, want 2", n)
		}
		if n := count("stale").Load(); n != 1 {
			t.Errorf("stale handler ran %d times, want 1", n)
		}
		st, err := h.q.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if s := debugStats(st); s.Failed != 5 || s.DeadLettered != 2 {
			t.Errorf("stats: failed %d (want 5: 1 permanent + 4 retryable), dead-lettered %d (want 2)", s.Failed, s.DeadLettered)
		}
	})
}

func TestRedriveRunsTheTaskAgain(t *testing.T) {
	b := brokertest.Embedded(t)
	var fail atomic.Bool
	fail.Store(true)
	var ok atomic.Int64
	h := newHarness(t, b, queue.Config{}, func(context.Context, *queue.Task) error {
		if fail.Load() {
			return queue.Permanent(errors.New("boom"))
		}
		ok.Add(1)
		return nil
	})
	h.enqueue(t, 3, struct{}{})
	testkit.Eventually(t, 10*time.Second, "three dead letters", func() bool { return len(deadLetters(t, h.db)) == 3 })
	fail.Store(false)
	dls := deadLetters(t, h.db)
	tasks, missing, err := h.q.RedriveTasks([]string{dls[0].ID, "00000000deadbeef"})
	if err != nil || len(tasks) != 1 || len(missing) != 1 || tasks[0].DeadLetterID != dls[0].ID || tasks[0].TaskID == "" {
		t.Fatalf("RedriveTasks = %+v, %v, %v; want one task, one missing, nil", tasks, missing, err)
	}
	testkit.Eventually(t, 10*time.Second, "the redriven task to run", func() bool { return ok.Load() == 1 })
	// Its outcome: done once it left the outbox without a dead letter.
	testkit.Eventually(t, 10*time.Second, "the redriven task's outcome to be done", func() bool {
		o, err := h.q.Outcome(tasks[0].TaskID)
		return err == nil && o.State == queue.OutcomeDone
	})
	if o, err := h.q.Outcome(dls[1].ID); err != nil || o.State != queue.OutcomeDead || o.Type != typeRecord {
		t.Errorf("Outcome of a dead letter = %+v, %v; want dead", o, err)
	}
	if n, err := h.q.RedriveType(typeRecord); err != nil || n != 2 {
		t.Fatalf("RedriveType = %d, %v; want 2", n, err)
	}
	testkit.Eventually(t, 10*time.Second, "all redriven tasks to run", func() bool { return ok.Load() == 3 })
	if got := deadLetters(t, h.db); len(got) != 0 {
		t.Fatalf("archive holds %d after redrive, want 0", len(got))
	}
	if _, err := h.q.RedriveType("no:such"); err == nil {
		t.Fatal("RedriveType of an unknown type: want an error")
	}
}

// A type's dead-letter hook writes in the transaction that moves the task
// to the dead letters; when it fails, the move does not happen and the task
// is retried.
func TestDeadHookRunsInTheMove(t *testing.T) {
	b := brokertest.Embedded(t)
	var runs atomic.Int64
	var hookFails atomic.Bool
	hookFails.Store(true)
	h := newHarness(t, b, queue.Config{}, func(context.Context, *queue.Task) error {
		runs.Add(1)
		return queue.Permanent(errors.New("boom"))
	}, func(table *queue.Table) {
		hook := func(tx *store.Tx, task *queue.Task) error {
			if hookFails.CompareAndSwap(true, false) {
				return errors.New("hook refused")
			}
			_, err := tx.UserCreate("dead-"+task.ID+"@example.com", "")
			return err
		}
		if err := table.OnDead(typeRecord, hook); err != nil {
			t.Fatal(err)
		}
		if err := table.OnDead(typeRecord, hook); err == nil {
			t.Error("a second dead-letter hook of one type was accepted")
		}
		if err := table.OnDead("no:such", hook); err == nil {
			t.Error("a dead-letter hook of an unknown type was accepted")
		}
	})
	ids := h.enqueue(t, 1, struct{}{})
	testkit.Eventually(t, 10*time.Second, "the dead letter", func() bool { return len(deadLetters(t, h.db)) == 1 })
	if n := runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2 (the first move was refused by the hook)", n)
	}
	var users []store.User
	if err := h.db.View(func(tx *store.Tx) (err error) { users, err = tx.Users(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(users) != 1 || users[0].Email != "dead-"+ids[0]+"@example.com" {
		t.Errorf("users %+v: want the one the hook wrote", users)
	}
}

// At Stop, a handler that only waits (queue.Wait) gives its task back at
// once: Stop does not wait out the shutdown timeout, and the task keeps its
// outbox record with no failure counted, to run at the next start.
func TestStopHandsBackWaitingTasks(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) { testStopHandsBack(t, b) })
}

func testStopHandsBack(t *testing.T, b *broker.Broker) {
	waiting := make(chan struct{}, 1)
	var result atomic.Value
	h := newHarness(t, b, queue.Config{ShutdownTimeout: time.Minute}, func(ctx context.Context, _ *queue.Task) error {
		waiting <- struct{}{}
		err := queue.Wait(ctx, time.Hour)
		result.Store(fmt.Sprint(err))
		return err
	})
	ids := h.enqueue(t, 1, struct{}{})
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
	stopped := make(chan struct{})
	go func() { _ = h.q.Stop(context.Background()); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop waited for the waiting handler (shutdown timeout one minute)")
	}
	if got, _ := result.Load().(string); !strings.Contains(got, queue.ErrStopping.Error()) {
		t.Errorf("Wait returned %q, want the hand-back error", got)
	}
	err := h.db.View(func(tx *store.Tx) error {
		rec, err := tx.OutboxGet("debug", ids[0])
		if err == nil && rec.Failures != 0 {
			err = fmt.Errorf("%d failures counted", rec.Failures)
		}
		return err
	})
	if err != nil {
		t.Errorf("the handed-back task's outbox record: %v", err)
	}
	if d := deadLetters(t, h.db); len(d) != 0 {
		t.Errorf("%d dead letters, want none", len(d))
	}
}

func TestKeyDeduplicatesAndBringForward(t *testing.T) {
	b := brokertest.Embedded(t)
	var ran atomic.Int64
	h := newHarness(t, b, queue.Config{}, func(context.Context, *queue.Task) error { ran.Add(1); return nil })
	later := time.Now().Add(time.Hour)
	first := h.enqueue(t, 1, struct{}{}, queue.Key("sheet-1"), queue.RunAt(later))
	second := h.enqueue(t, 1, struct{}{}, queue.Key("sheet-1"), queue.RunAt(later))
	if first[0] != second[0] {
		t.Fatalf("same key gave two records %s and %s", first[0], second[0])
	}
	time.Sleep(300 * time.Millisecond)
	if ran.Load() != 0 {
		t.Fatal("a task scheduled in an hour ran")
	}
	h.enqueue(t, 1, struct{}{}, queue.Key("sheet-1"), queue.RunAt(time.Now()), queue.BringForward())
	testkit.Eventually(t, 5*time.Second, "the brought-forward task to run", func() bool { return ran.Load() == 1 })
	// The key is free again once the record is gone.
	testkit.Eventually(t, 5*time.Second, "the outbox to empty", func() bool { return outboxLen(t, h.db, "debug") == 0 })
	third := h.enqueue(t, 1, struct{}{}, queue.Key("sheet-1"))
	if third[0] == first[0] {
		t.Fatal("a finished record's key still deduplicates")
	}
	testkit.Eventually(t, 5*time.Second, "the new task to run", func() bool { return ran.Load() == 2 })
}

// TestBringForwardWhileBeingHanded: a record brought forward right after
// it was written (a form's "Retry now" just after its flush scheduled the
// next check) runs now, even when the relay read it, with its old run
// time, before the bring-forward committed and handed it after.
func TestBringForwardWhileBeingHanded(t *testing.T) {
	b := brokertest.Embedded(t)
	var ran atomic.Int64
	h := newHarness(t, b, queue.Config{}, func(context.Context, *queue.Task) error { ran.Add(1); return nil })
	const n = 300
	later := time.Now().Add(time.Hour)
	for i := range n {
		key := queue.Key(fmt.Sprintf("form-%d", i))
		h.enqueue(t, 1, struct{}{}, key, queue.RunAt(later))
		h.enqueue(t, 1, struct{}{}, key, queue.RunAt(time.Now()), queue.BringForward())
	}
	testkit.Eventually(t, 10*time.Second, "every brought-forward task to run", func() bool { return ran.Load() == n })
}

func TestOutboxIsHandedAgainAtStart(t *testing.T) {
	// Records written while nothing runs (as after a crash) are run at start.
	b := brokertest.Embedded(t)
	db := storetest.Open(t)
	table := testTable(t, 3)
	var ran atomic.Int64
	for _, tt := range table.Types() {
		_ = table.Handle(tt.Name, func(context.Context, *queue.Task) error { ran.Add(1); return nil })
	}
	q, err := queue.New(queue.Config{PollInterval: 20 * time.Millisecond}, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *store.Tx) error {
		for range 100 {
			if _, _, err := q.Enqueue(tx, typeRecord, struct{}{}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer q.Stop(context.Background())
	testkit.Eventually(t, 10*time.Second, "recovered tasks to run", func() bool { return ran.Load() == 100 })
}

func TestAlertsAreGrouped(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(raw))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	alerts := queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL, Interval: 300 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := alerts.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = alerts.Stop(context.Background()); close(done) }()

	b := brokertest.Embedded(t)
	h := newHarness(t, b, queue.Config{Alerts: alerts, RelayCap: 1000}, func(context.Context, *queue.Task) error {
		return queue.Permanent(errors.New("storm"))
	})
	start := time.Now()
	h.enqueue(t, 1000, struct{}{})
	testkit.Eventually(t, 60*time.Second, "1,000 dead letters", func() bool { return len(deadLetters(t, h.db)) == 1000 })
	cancel()
	<-done
	elapsed := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	// At most one message per interval, plus the first and the final flush.
	if limit := int(elapsed/(300*time.Millisecond)) + 2; len(bodies) > limit || len(bodies) == 0 {
		t.Fatalf("%d alert messages in %s, want between 1 and %d", len(bodies), elapsed, limit)
	}
	total := 0
	for _, body := range bodies {
		var msg struct{ Content, Text string }
		if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.Content == "" || msg.Content != msg.Text {
			t.Fatalf("body %q is not accepted by both Discord (content) and Slack (text)", body)
		}
		var n int
		if i := strings.Index(msg.Content, "debug:record: "); i >= 0 {
			_, _ = fmtSscan(msg.Content[i+len("debug:record: "):], &n)
		}
		total += n
	}
	if total != 1000 {
		t.Fatalf("alerts summarised %d dead letters, want 1000 (%d messages)", total, len(bodies))
	}
	t.Logf("1,000 dead letters announced in %d messages", len(bodies))
}

// Truncate cuts at a character's start, never inside one.
func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{"short", 10, "short"}, {"abcdef", 3, "abc…"}, {"ééé", 3, "é…"}, {"ééé", 4, "éé…"}} {
		if got := queue.Truncate(c.in, c.n); got != c.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
