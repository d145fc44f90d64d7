package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/store"
)

// benchCore measures durable tasks end to end against raw asynq on the same
// broker, on the embedded broker and on redis-server, and the peak RSS of a
// process taking a 100,000-task burst.
func benchCore(ctx context.Context, o Options) (Result, error) {
	var r Result
	n := 20000
	burst := 100000
	if o.Quick {
		n, burst = 2000, 10000
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d no-op tasks of the bench's own type (bench:nop, 10 workers, its handler counts the runs: a row added to the task table through app.Deps.Tasks; the debug:record type of MAILROOM_DEBUG_TASKS=true, used before, also appends each id to a file), idle queues polled every 50ms (MAILROOM_TASK_POLL_INTERVAL), the whole app built by app.New as serve builds it, %s; medians of 3 runs. CPU-s per 1,000 durable tasks: this process's user and system time (/proc) from the first record written to the last handler's return (the app, the embedded broker and the producer; not redis-server's), a figure a busy machine disturbs far less than tasks/s; GC cycles per 1,000 durable tasks and KiB allocated per task: this process's garbage collector over the same window (runtime/metrics), figures other work on the machine does not move", n, o.GC))

	targets, stop := benchTargets(ctx, o, &r)
	defer stop()
	for _, tg := range targets {
		var durable, raw, cpu, gcs, alloc []float64
		for i := range 3 {
			o.progress("   %s run %d/3: durable", tg.name, i+1)
			d, err := benchDurableCPU(ctx, tg.url, n)
			if err != nil {
				return r, fmt.Errorf("durable on %s: %w", tg.name, err)
			}
			cpu, gcs, alloc = append(cpu, d.cpuPer1000), append(gcs, d.gcPer1000), append(alloc, d.allocKiB)
			o.progress("   %s run %d/3: raw asynq", tg.name, i+1)
			rw, err := benchRawAsynq(ctx, tg.url, n)
			if err != nil {
				return r, fmt.Errorf("raw asynq on %s: %w", tg.name, err)
			}
			durable, raw = append(durable, d.rate), append(raw, rw)
		}
		dm, rm := median(durable), median(raw)
		if tg.name == "embedded" {
			r.addTarget("durable tasks/s, embedded broker", dm, "tasks/s", 2500, true)
			r.add("raw asynq tasks/s, embedded broker", rm, "tasks/s")
			r.addTarget("durable ÷ raw, embedded broker", dm/rm, "ratio", 0.8, true)
			r.add("CPU-s per 1,000 durable tasks, embedded broker", median(cpu), "CPU-s")
			r.add("GC cycles per 1,000 durable tasks, embedded broker", median(gcs), "cycles")
			r.add("heap allocated per durable task, embedded broker", median(alloc), "KiB")
		} else {
			r.addTarget("durable tasks/s, redis-server", dm, "tasks/s", 5000, true)
			r.add("raw asynq tasks/s, redis-server", rm, "tasks/s")
			r.add("durable ÷ raw, redis-server", dm/rm, "ratio")
			r.add("CPU-s per 1,000 durable tasks, redis-server (mailroom's side)", median(cpu), "CPU-s")
		}
	}
	o.progress("   memory: %d durable tasks in a child process", burst)
	peak, err := benchMemoryChild(ctx, burst)
	if err != nil {
		return r, fmt.Errorf("memory: %w", err)
	}
	r.addTarget(fmt.Sprintf("peak RSS through a %d-task burst", burst), peak, "MiB", 100, false)
	return r, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

// typeBenchNop is the bench's own no-op task type (benchQueue).
const typeBenchNop = "bench:nop"

// benchQueue starts the app through app.New with the bench's no-op task
// type added to its task table (app.Deps.Tasks: 10 workers on a queue
// of its own, onDone called for each run), on redisURL (empty: the
// embedded broker), with idle queues polled every 50 ms
// (MAILROOM_TASK_POLL_INTERVAL).
func benchQueue(ctx context.Context, redisURL string, onDone func()) (*queue.Queue, *store.DB, func(), error) {
	if redisURL != "" {
		if err := flushRedis(ctx, redisURL); err != nil {
			return nil, nil, nil, err
		}
	}
	a, stop, err := startApp(ctx, func(c *setup) {
		c.RedisURL = redisURL
		c.TaskPollInterval = 50 * time.Millisecond
		c.deps.Tasks = []queue.TaskType{{
			Name: typeBenchNop, Queue: "bench", Concurrency: 10, MaxRetries: c.MaxRetries, Timeout: time.Minute,
			Handler: func(context.Context, *queue.Task) error { onDone(); return nil },
		}}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	return a.Queue(), a.DB(), stop, nil
}

// durableFigures are one durable run's figures: the rate, and over the
// same window this process's CPU time, garbage collections and heap
// allocation (the app, the embedded broker and the producer; never
// redis-server's). The last three are per task and hardly move with other
// work on the machine, unlike the rate.
type durableFigures struct {
	rate       float64 // tasks/s
	cpuPer1000 float64 // CPU-seconds per 1,000 tasks
	gcPer1000  float64 // GC cycles per 1,000 tasks
	allocKiB   float64 // KiB allocated on the heap per task
}

// processCost is this process's CPU time and GC work so far.
type processCost struct {
	cpu         float64 // CPU-seconds
	gcs, allocs uint64  // GC cycles, heap bytes allocated
}

func readProcessCost() (processCost, error) {
	cpu, err := procCPUSeconds(os.Getpid())
	if err != nil {
		return processCost{}, err
	}
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return processCost{cpu: cpu, gcs: s[0].Value.Uint64(), allocs: s[1].Value.Uint64()}, nil
}

// benchDurableCPU is benchDurable that also measures what the run cost
// this process, per task.
func benchDurableCPU(ctx context.Context, redisURL string, n int) (durableFigures, error) {
	var c0, c1 processCost
	rate, err := benchDurableWindow(ctx, redisURL, n, func() (err error) {
		c0, err = readProcessCost()
		return err
	}, func() (err error) {
		c1, err = readProcessCost()
		return err
	})
	if err != nil {
		return durableFigures{}, err
	}
	per := float64(n)
	return durableFigures{
		rate:       rate,
		cpuPer1000: (c1.cpu - c0.cpu) * 1000 / per,
		gcPer1000:  float64(c1.gcs-c0.gcs) * 1000 / per,
		allocKiB:   float64(c1.allocs-c0.allocs) / 1024 / per,
	}, nil
}

// benchDurable writes n records (100 per transaction, as producers do) while
// the queue drains them; the clock stops when the last handler returns.
func benchDurable(ctx context.Context, redisURL string, n int) (float64, error) {
	nop := func() error { return nil }
	return benchDurableWindow(ctx, redisURL, n, nop, nop)
}

// benchDurableWindow is benchDurable calling begin as the clock starts and
// end as it stops (after the last handler returned).
func benchDurableWindow(ctx context.Context, redisURL string, n int, begin, end func() error) (float64, error) {
	var done atomic.Int64
	all := make(chan struct{})
	q, db, closeFn, err := benchQueue(ctx, redisURL, func() {
		if done.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		return 0, err
	}
	defer closeFn()
	if err := begin(); err != nil {
		return 0, err
	}
	start := time.Now()
	for written := 0; written < n; written += 100 {
		err := db.Update(func(tx *store.Tx) error {
			for range min(100, n-written) {
				if _, _, err := q.Enqueue(tx, typeBenchNop, struct{}{}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return 0, err
		}
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("only %d of %d tasks ran in 5 minutes", done.Load(), n)
	}
	elapsed := time.Since(start)
	if err := end(); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// benchRawAsynq enqueues n tasks straight into asynq from 16 goroutines
// while one server with concurrency 10 drains them.
func benchRawAsynq(ctx context.Context, redisURL string, n int) (float64, error) {
	b, err := broker.Open(ctx, broker.Config{RedisURL: redisURL})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	clock := lifecycle.Sequence(b.Services()) // the embedded store's, as the app runs it
	if err := clock.Start(ctx); err != nil {
		return 0, err
	}
	defer clock.Stop(context.Background())
	if redisURL != "" {
		if err := b.Client().FlushDB(ctx).Err(); err != nil {
			return 0, err
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	srv := asynq.NewServer(b.RedisConnOpt(), asynq.Config{
		Concurrency: 10, Queues: map[string]int{"raw": 1}, TaskCheckInterval: 50 * time.Millisecond, LogLevel: asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("raw:noop", func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	client := asynq.NewClient(b.RedisConnOpt())
	defer client.Close()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if _, err := client.Enqueue(asynq.NewTask("raw:noop", nil), asynq.Queue("raw")); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("only %d of %d raw tasks ran", done.Load(), n)
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// benchMemoryChild runs the burst in a fresh process (so earlier scenarios
// do not count) and reads its peak RSS.
func benchMemoryChild(ctx context.Context, n int) (float64, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, exe, "bench", "--memory-child", strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("child: %w", err)
	}
	var kib float64
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "peak_rss_kib %g", &kib); err != nil {
		return 0, fmt.Errorf("child said %q", out)
	}
	return kib / 1024, nil
}

// runMemoryChild is the child's side: a burst of n durable tasks written at
// once, drained, then the peak RSS (VmHWM) printed.
func RunMemoryChild(ctx context.Context, n int, w *bufio.Writer) error {
	if _, err := benchDurable(ctx, "", n); err != nil {
		return err
	}
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			fields := strings.Fields(line)
			fmt.Fprintf(w, "peak_rss_kib %s\n", fields[1])
			return w.Flush()
		}
	}
	return errors.New("no VmHWM in /proc/self/status")
}

// benchTarget is a broker a benchmark runs on: the embedded one (url
// empty) or a Redis.
type benchTarget struct {
	name, url string
}

// benchTargets returns the brokers to measure: the embedded one, and the
// Redis at --redis-url or else a redis-server started here, which stop
// ends. When there is no Redis a note in r says why.
func benchTargets(ctx context.Context, o Options, r *Result) (targets []benchTarget, stop func()) {
	targets, stop = []benchTarget{{"embedded", ""}}, func() {}
	url := o.RedisURL
	if url == "" {
		var err error
		if url, stop, err = startBenchRedis(ctx); err != nil {
			r.Notes = append(r.Notes, "redis-server not measured: "+err.Error())
			return targets, func() {}
		}
	}
	return append(targets, benchTarget{"redis", url}), stop
}

// startBenchRedis starts redis-server on a free loopback port.
func startBenchRedis(ctx context.Context) (string, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, errors.New("redis-server not installed (pass --redis-url)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitFor(ctx, 5*time.Second, "redis-server", func() (bool, error) {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil, nil
	}); err != nil {
		stop()
		return "", nil, fmt.Errorf("redis-server did not start: %w", err)
	}
	return "redis://" + addr + "/0", stop, nil
}
