package queue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
	"mailroom/store/storetest"
)

// completions counts the runs of each task id.
type completions struct {
	mu   sync.Mutex
	runs map[string]int
}

func newCompletions() *completions { return &completions{runs: map[string]int{}} }

func (c *completions) handler(sleep time.Duration) queue.Handler {
	return func(ctx context.Context, t *queue.Task) error {
		if sleep > 0 {
			time.Sleep(sleep)
		}
		c.mu.Lock()
		c.runs[t.ID]++
		c.mu.Unlock()
		return nil
	}
}

// count returns how many of ids ran and how many ran more than once.
func (c *completions) count(ids []string) (ran, twice int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, id := range ids {
		if n := c.runs[id]; n > 0 {
			ran++
			if n > 1 {
				twice++
			}
		}
	}
	return ran, twice
}

func openBroker(t *testing.T, url string) *broker.Broker {
	t.Helper()
	b, err := broker.Open(context.Background(), broker.Config{RedisURL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// watchedHarness is a harness whose queue follows a broker Watch.
func watchedHarness(t *testing.T, b *broker.Broker, cfg queue.Config, fn queue.Handler) (*harness, *queue.Watch) {
	t.Helper()
	db := storetest.Open(t)
	w := queue.NewWatch(queue.WatchConfig{Interval: 100 * time.Millisecond, PingTimeout: 500 * time.Millisecond}, db, b.Client())
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	cfg.Watch = w
	return newHarnessOn(t, db, b, cfg, fn), w
}

// TestReconcileAfterRedisRestartAndFlush restarts a redis-server without
// persistence in the middle of a burst, then flushes it in the middle of
// another: every task runs, within a minute of Redis's return, without a
// restart of the queue, and the outbox ends empty.
func TestReconcileAfterRedisRestartAndFlush(t *testing.T) {
	rp := brokertest.StartRedisProcess(t)
	b := openBroker(t, rp.URL())
	c := newCompletions()
	// A long reconcile interval: the watch's signal must do the work.
	h, w := watchedHarness(t, b, queue.Config{RelayCap: 300, ReconcileInterval: 5 * time.Minute}, c.handler(2*time.Millisecond))

	ids := h.enqueue(t, 2000, struct{}{})
	testkit.Eventually(t, 30*time.Second, "some tasks to run", func() bool { ran, _ := c.count(ids); return ran >= 200 })
	rp.Stop()
	testkit.Eventually(t, 10*time.Second, "the watch to see the outage", func() bool { return !w.Health().Up })
	// The outbox still takes work while the broker is away.
	ids = append(ids, h.enqueue(t, 300, struct{}{})...)
	before, _ := c.count(ids)
	if before >= len(ids) {
		t.Fatal("every task ran before the outage; the test proves nothing")
	}
	rp.Start()
	back := time.Now()
	testkit.Eventually(t, time.Minute, "every task to run after Redis came back empty", func() bool { ran, _ := c.count(ids); return ran == len(ids) })
	t.Logf("restart: %d of %d had run at the outage; all ran %s after Redis came back", before, len(ids), time.Since(back).Round(time.Millisecond))
	if h := w.Health(); !h.Up || h.Losses == 0 {
		t.Fatalf("watch health after the restart: %+v, want up with a loss counted", h)
	}

	more := h.enqueue(t, 2000, struct{}{})
	testkit.Eventually(t, 30*time.Second, "some of the second burst to run", func() bool { ran, _ := c.count(more); return ran >= 200 })
	if err := b.Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	before, _ = c.count(more)
	testkit.Eventually(t, time.Minute, "every task to run after FLUSHALL", func() bool { ran, _ := c.count(more); return ran == len(more) })
	t.Logf("flush: %d of %d had run; all ran %s after FLUSHALL", before, len(more), time.Since(flushed).Round(time.Millisecond))
	if before == len(more) {
		t.Fatal("the second burst ended before FLUSHALL; the test proves nothing")
	}
	testkit.Eventually(t, 10*time.Second, "the outbox to empty", func() bool { return outboxLen(t, h.db, "debug") == 0 })
	all := append(ids, more...)
	_, twice := c.count(all)
	t.Logf("%d tasks, %d ran twice (at least once; those lost mid-run), %d handed again", len(all), twice, h.q.Rehanded())
	if h.q.Rehanded() == 0 {
		t.Fatal("nothing was handed again")
	}
}

// TestReconcileHandsAgainOnlyWhatWasLost deletes some handed tasks from
// the broker behind the queue's back (as an eviction would): the next
// reconcile hands exactly those again, and later ones hand nothing.
func TestReconcileHandsAgainOnlyWhatWasLost(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		c := newCompletions()
		h := newHarness(t, b, queue.Config{ReconcileInterval: 100 * time.Millisecond}, c.handler(0))
		ids := h.enqueue(t, 10, struct{}{}, queue.RunAt(time.Now().Add(time.Hour)))
		ctx := context.Background()
		rdb := b.Client()
		key := func(id string) string { return "asynq:{debug}:t:" + id }
		testkit.Eventually(t, 10*time.Second, "the tasks in the broker", func() bool {
			n, _ := rdb.Exists(ctx, key(ids[0]), key(ids[9])).Result()
			return n == 2
		})
		// Several reconciles of a healthy broker hand nothing.
		time.Sleep(500 * time.Millisecond)
		if n := h.q.Rehanded(); n != 0 {
			t.Fatalf("%d tasks handed again while the broker held them all", n)
		}
		lost := []string{ids[2], ids[5], ids[7]}
		for _, id := range lost {
			if err := rdb.Del(ctx, key(id)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ZRem(ctx, "asynq:{debug}:scheduled", id).Err(); err != nil {
				t.Fatal(err)
			}
		}
		testkit.Eventually(t, 10*time.Second, "the lost tasks to be handed again", func() bool { return h.q.Rehanded() == 3 })
		for _, id := range lost {
			if n, _ := rdb.Exists(ctx, key(id)).Result(); n != 1 {
				t.Fatalf("task %s is not back in the broker", id)
			}
		}
		time.Sleep(500 * time.Millisecond)
		if n := h.q.Rehanded(); n != 3 {
			t.Fatalf("%d handed again, want 3 (only those lost, once)", n)
		}
		if n, _ := rdb.ZCard(ctx, "asynq:{debug}:scheduled").Result(); n != 10 {
			t.Fatalf("%d scheduled tasks in the broker, want 10", n)
		}
	})
}

// TestWatchFindsAForgottenBrokerAtStart: a second run over the same data
// with a broker that lost the first run's epoch resumes windows as if
// spent at the first run's last heartbeat; with the epoch kept it does not.
func TestWatchFindsAForgottenBrokerAtStart(t *testing.T) {
	db := storetest.Open(t)
	b := brokertest.Embedded(t)
	w := queue.NewWatch(queue.WatchConfig{}, db, b.Client())
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !w.SpentUntil(time.Minute).IsZero() {
		t.Fatal("a first start found a loss")
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Same broker, epoch kept (an external Redis with persistence).
	w = queue.NewWatch(queue.WatchConfig{}, db, b.Client())
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.Health(); got.Losses != 0 || !w.SpentUntil(time.Minute).IsZero() {
		t.Fatalf("a broker that kept its epoch counted as a loss: %+v", got)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var state store.BrokerState
	_ = db.View(func(tx *store.Tx) error { state, _ = tx.BrokerState(); return nil })

	// A new broker (the embedded store of a new process): it forgot.
	b2 := brokertest.Embedded(t)
	w = queue.NewWatch(queue.WatchConfig{Heartbeat: 5 * time.Second}, db, b2.Client())
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	if h := w.Health(); !h.LostBeforeStart || h.Losses != 0 {
		t.Fatalf("health %+v, want the loss found at start (and none while running)", h)
	}
	until := w.SpentUntil(time.Minute)
	if until.IsZero() || until.After(state.AliveAt.Add(5*time.Second+time.Minute)) || until.Before(state.AliveAt.Add(time.Minute)) {
		t.Fatalf("spent until %v, want between %v and 5s later", until, state.AliveAt.Add(time.Minute))
	}
	testkit.Eventually(t, time.Second, "a 1 ms window to be free again", func() bool { return w.SpentUntil(time.Millisecond).IsZero() })
}

// TestReconcileAFullRelay reconciles a relay holding its whole cap in the
// broker. On the embedded broker (a synchronous net.Pipe) a pipeline of a
// chunk's EXISTS deadlocked the check until its timeout, and the relay,
// which runs the check, stopped handing work (the core memory bench
// stalled at 60% of its burst).
func TestReconcileAFullRelay(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		c := newCompletions()
		h := newHarness(t, b, queue.Config{RelayCap: 1000, ReconcileInterval: 100 * time.Millisecond}, c.handler(0))
		ids := h.enqueue(t, 1000, struct{}{}, queue.RunAt(time.Now().Add(time.Hour)))
		ctx := context.Background()
		rdb := b.Client()
		key := func(id string) string { return "asynq:{debug}:t:" + id }
		testkit.Eventually(t, 30*time.Second, "every task in the broker", func() bool {
			n, _ := rdb.ZCard(ctx, "asynq:{debug}:scheduled").Result()
			return n == int64(len(ids))
		})
		lost := []string{ids[10], ids[999]}
		for _, id := range lost {
			if err := rdb.Del(ctx, key(id)).Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ZRem(ctx, "asynq:{debug}:scheduled", id).Err(); err != nil {
				t.Fatal(err)
			}
		}
		testkit.Eventually(t, 10*time.Second, "the two lost tasks handed again", func() bool { return h.q.Rehanded() == 2 })
	})
}
