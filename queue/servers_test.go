package queue_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
	"mailroom/store/storetest"
)

func awake(q *queue.Queue, name string) bool { return slices.Contains(q.AwakeServers(), name) }

// A queue's server sleeps once the queue has had nothing in flight for the
// linger, and the relay wakes it when it hands the queue work.
func TestServersSleepAfterLingerAndWakeOnHandOver(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		ran := make(chan time.Time, 10)
		reg := prometheus.NewRegistry()
		h := newHarness(t, b, queue.Config{ServerLinger: 300 * time.Millisecond, Registerer: reg}, func(context.Context, *queue.Task) error {
			ran <- time.Now()
			return nil
		})
		if got, want := len(h.q.AwakeServers()), len(h.q.Table().Queues()); got != want {
			t.Errorf("%d servers run after Start, want all %d", got, want)
		}
		if !h.q.Ready() {
			t.Error("not ready after Start")
		}
		testkit.Eventually(t, 10*time.Second, "every server to sleep", func() bool { return len(h.q.AwakeServers()) == 0 })
		if !h.q.Ready() {
			t.Error("not ready while the servers sleep")
		}

		for round := range 3 {
			sent := time.Now()
			h.enqueue(t, 1, struct{}{})
			select {
			case at := <-ran:
				if d := at.Sub(sent); d > time.Second {
					t.Errorf("round %d: a task handed to a sleeping queue ran after %s, want within 1s", round, d)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the task handed to a sleeping queue never ran", round)
			}
			if got := h.q.AwakeServers(); !slices.Equal(got, []string{"debug"}) {
				t.Errorf("round %d: awake servers %v, want only debug", round, got)
			}
			testkit.Eventually(t, 10*time.Second, "the debug server to sleep again", func() bool { return !awake(h.q, "debug") })
		}
		// /metrics: one start at Start and one per wake; asleep now.
		if got := gathered(t, reg, "mailroom_task_server_starts_total", "debug"); got != 4 {
			t.Errorf("mailroom_task_server_starts_total{queue=debug} = %v, want 4", got)
		}
		if got := gathered(t, reg, "mailroom_task_server_awake", "debug"); got != 0 {
			t.Errorf("mailroom_task_server_awake{queue=debug} = %v, want 0", got)
		}
	})
}

// gathered is the value of the metric name with label queue=queue.
func gathered(t *testing.T, reg *prometheus.Registry, name, queue string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "queue" && l.GetValue() == queue {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s{queue=%q}", name, queue)
	return 0
}

// A task asynq holds for later (a scheduled run, a retry) is in flight: its
// queue's server keeps running, so the forwarder makes it ready on time.
func TestServersStayAwakeForScheduledAndRetryingTasks(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		var attempts atomic.Int64
		var done atomic.Int64
		h := newHarness(t, b, queue.Config{
			ServerLinger: 100 * time.Millisecond,
			RetryInitial: time.Second, RetryMax: time.Second,
		}, func(_ context.Context, task *queue.Task) error {
			attempts.Add(1)
			if string(task.Payload) == `"fail-once"` && task.Attempt == 1 {
				return errors.New("first attempt fails")
			}
			done.Add(1)
			return nil
		})
		testkit.Eventually(t, 10*time.Second, "every server to sleep", func() bool { return len(h.q.AwakeServers()) == 0 })

		check := func(what string, finished func() bool) {
			t.Helper()
			// The relay hands the task (and wakes the server) just after the
			// enqueue commits.
			testkit.Eventually(t, 5*time.Second, what+": the hand-over to wake the server", func() bool { return awake(h.q, "debug") || finished() })
			testkit.Eventually(t, 15*time.Second, what+": the task to finish", func() bool {
				if finished() {
					return true
				}
				if !awake(h.q, "debug") && !finished() {
					t.Fatalf("%s: the debug server slept with the task still in flight", what)
				}
				return false
			})
			testkit.Eventually(t, 10*time.Second, what+": the server to sleep after", func() bool { return !awake(h.q, "debug") })
		}

		h.enqueue(t, 1, "later", queue.RunAt(time.Now().Add(2*time.Second)))
		check("a task scheduled 2s ahead", func() bool { return done.Load() == 1 })

		h.enqueue(t, 1, "fail-once")
		check("a task retrying after 1s", func() bool { return done.Load() == 2 })
		if got := attempts.Load(); got != 3 {
			t.Errorf("%d attempts, want 3 (1 scheduled, 2 for the retried task)", got)
		}
	})
}

// Hand-overs racing the sleep decision never strand a task: every one of
// many tasks handed at random moments around a very short linger runs.
func TestServersNeverStrandATaskAtTheSleepBoundary(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		var ran atomic.Int64
		h := newHarness(t, b, queue.Config{ServerLinger: 10 * time.Millisecond}, func(context.Context, *queue.Task) error {
			ran.Add(1)
			return nil
		})
		const n = 150
		for range n {
			h.enqueue(t, 1, struct{}{})
			time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond)
		}
		testkit.Eventually(t, 30*time.Second, "every task to run", func() bool { return ran.Load() == n })
		testkit.Eventually(t, 30*time.Second, "the outbox to empty", func() bool { return outboxLen(t, h.db, "debug") == 0 })
	})
}

// Stop is clean while every server sleeps and while one is being woken:
// it returns, no server runs after it, and every task either ran or keeps
// its outbox record for the next start.
func TestServersStopWhileAsleepOrWaking(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		t.Run("asleep", func(t *testing.T) {
			h := newHarness(t, b, queue.Config{ServerLinger: 50 * time.Millisecond}, func(context.Context, *queue.Task) error { return nil })
			testkit.Eventually(t, 10*time.Second, "every server to sleep", func() bool { return len(h.q.AwakeServers()) == 0 })
			stopWithin(t, h.q, 10*time.Second)
			if got := h.q.AwakeServers(); len(got) != 0 {
				t.Errorf("servers %v run after Stop", got)
			}
		})
		t.Run("waking", func(t *testing.T) {
			for round := range 5 {
				var ran atomic.Int64
				h := newHarness(t, b, queue.Config{ServerLinger: 50 * time.Millisecond}, func(context.Context, *queue.Task) error {
					ran.Add(1)
					return nil
				})
				testkit.Eventually(t, 10*time.Second, "every server to sleep", func() bool { return len(h.q.AwakeServers()) == 0 })
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						if err := h.db.Update(func(tx *store.Tx) error {
							_, _, err := h.q.Enqueue(tx, typeRecord, struct{}{})
							return err
						}); err != nil {
							t.Error(err)
						}
					}
				}()
				time.Sleep(time.Duration(round) * time.Millisecond)
				stopWithin(t, h.q, 15*time.Second)
				wg.Wait()
				if got := h.q.AwakeServers(); len(got) != 0 {
					t.Errorf("round %d: servers %v run after Stop", round, got)
				}
				// The deleter flushed at Stop: what ran has left the outbox.
				if left := int64(outboxLen(t, h.db, "debug")); left+ran.Load() < 20 {
					t.Errorf("round %d: %d ran and %d wait in the outbox, want at least 20 together", round, ran.Load(), left)
				}
			}
		})
	})
}

// With AlwaysOnServers (the design before servers slept) no server sleeps.
func TestAlwaysOnServersNeverSleep(t *testing.T) {
	b := brokertest.Embedded(t)
	h := newHarness(t, b, queue.Config{ServerLinger: 10 * time.Millisecond, AlwaysOnServers: true}, func(context.Context, *queue.Task) error { return nil })
	want := len(h.q.Table().Queues())
	for range 20 {
		if got := len(h.q.AwakeServers()); got != want {
			t.Fatalf("%d servers run, want all %d", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stopWithin(t *testing.T, q *queue.Queue, d time.Duration) {
	t.Helper()
	stopped := make(chan struct{})
	go func() { _ = q.Stop(context.Background()); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(d):
		t.Fatalf("Stop did not return within %s", d)
	}
}

// BenchmarkWakeCycle is the cost of a queue that sleeps between tasks: one
// task handed to a sleeping queue, run, and the server asleep again (a
// server start and a shutdown), against the same task on an always-on
// server. It reports this process's CPU per cycle (the embedded broker's
// included; redis-server's not); on always-on servers that includes every
// queue's polling while the task waits for its server's next poll.
func BenchmarkWakeCycle(b *testing.B) {
	for _, kind := range []string{"embedded", "redis"} {
		for _, alwaysOn := range []bool{false, true} {
			name := kind + "/sleeping"
			if alwaysOn {
				name = kind + "/always-on"
			}
			b.Run(name, func(b *testing.B) {
				var br *broker.Broker
				if kind == "redis" {
					br = brokertest.Redis(b)
				} else {
					br = brokertest.Embedded(b)
				}
				db := storetest.Open(b)
				table := testTable(b, 3)
				ran := make(chan struct{}, 1)
				for _, tt := range table.Types() {
					_ = table.Handle(tt.Name, func(context.Context, *queue.Task) error { ran <- struct{}{}; return nil })
				}
				q, err := queue.New(queue.Config{ServerLinger: time.Millisecond, AlwaysOnServers: alwaysOn}, db, br.RedisConnOpt(), table)
				if err != nil {
					b.Fatal(err)
				}
				if err := q.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				defer q.Stop(context.Background())
				asleep := func() bool { return alwaysOn || !awake(q, "debug") }
				testkit.Eventually(b, 10*time.Second, "the debug server to sleep", asleep)
				cpu0 := processCPU(b)
				b.ResetTimer()
				for range b.N {
					if err := db.Update(func(tx *store.Tx) error {
						_, _, err := q.Enqueue(tx, typeRecord, struct{}{})
						return err
					}); err != nil {
						b.Fatal(err)
					}
					<-ran
					for !asleep() {
						time.Sleep(time.Millisecond)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestTypePollShortensTheWaitBetweenTasks: a queue whose type sets Poll
// (webhooks) is polled that often while awake, so a task recorded as the
// one before finishes starts at once, not after Config.PollInterval.
func TestTypePollShortensTheWaitBetweenTasks(t *testing.T) {
	db := storetest.Open(t)
	b := brokertest.Embedded(t)
	table := testTable(t, 3)
	ran := make(chan struct{}, 1)
	for _, tt := range table.Types() {
		_ = table.Handle(tt.Name, func(context.Context, *queue.Task) error { ran <- struct{}{}; return nil })
	}
	q, err := queue.New(queue.Config{PollInterval: 2 * time.Second, DelayedCheckInterval: time.Second}, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	const n = 5
	start := time.Now()
	for range n {
		if err := db.Update(func(tx *store.Tx) error {
			_, _, err := q.Enqueue(tx, typePolled, struct{}{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("a test:polled task did not run within 10s")
		}
	}
	// At the 2s poll the four after the first wait 1-3s each.
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("%d tasks one after another took %s, want well under the 2s poll each", n, took)
	}
}

// TestQueueSecondStartDoesNothing: the queue (and its server set, a
// service of the one lifecycle) takes a second Start as nothing: the
// servers that run go on, tasks still run, and one Stop ends it all.
func TestQueueSecondStartDoesNothing(t *testing.T) {
	t.Parallel()
	ran := make(chan struct{}, 10)
	h := newHarness(t, brokertest.Embedded(t), queue.Config{}, func(context.Context, *queue.Task) error { ran <- struct{}{}; return nil })
	before := h.q.AwakeServers()
	if err := h.q.Start(context.Background()); err != nil {
		t.Fatalf("second Start: %v, want nil", err)
	}
	if got := h.q.AwakeServers(); !slices.Equal(got, before) || !h.q.Running() {
		t.Fatalf("after a second Start: servers %v (were %v), running %v", got, before, h.q.Running())
	}
	h.enqueue(t, 1, struct{}{})
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no task ran after a second Start")
	}
	if err := h.q.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := h.q.AwakeServers(); len(got) != 0 || h.q.Ready() {
		t.Fatalf("after Stop: servers %v awake, ready %v", got, h.q.Ready())
	}
}
