package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/lifecycle"
)

// An asynq server polls its queue every PollInterval and runs a forwarder,
// heartbeat, syncer, janitor, recoverer, health check and a pub/sub
// subscriber on their own timers, whether or not the queue holds work. With
// one server per queue that is the whole idle cost of the appliance.
//
// mailroom is the only producer, and a queue's relay knows exactly which
// tasks it handed and which finished (its in-flight set, which includes
// tasks asynq holds for later: retries and scheduled runs). So a queue's
// server runs only while its relay has tasks in flight, plus a linger: the
// relay starts it (a new asynq.Server; a stopped one cannot start again)
// right after it hands work to a sleeping queue, and the server set stops it
// once the queue has had nothing in flight for Config.ServerLinger.

// queueServer is one queue's asynq server, running or asleep.
type queueServer struct {
	set   *serverSet
	name  string
	qi    QueueInfo
	relay *relay

	mu        sync.Mutex
	mux       *asynq.ServeMux // the queue's handlers, set at start
	srv       *asynq.Server   // nil while asleep
	client    redisClient     // srv's client, closed after srv stops
	busySince time.Time       // last time the queue was seen with work (or woken)
	starts    int
}

// serverSet runs the queues' servers on demand: a service whose run holds
// the sleep checker and every server's shutdown under way.
type serverSet struct {
	q      *Queue
	linger time.Duration
	check  time.Duration // how often running servers are checked for sleep
	always bool          // never sleep (the design before on-demand servers)
	now    func() time.Time

	byName map[string]*queueServer
	order  []*queueServer

	mu     sync.Mutex
	closed bool
	awakeC chan struct{} // a server started: the sleep checker has work
	// cur is the run under way (set by Start): a server going to sleep
	// shuts down in one of its goroutines, which Stop waits for.
	cur *lifecycle.Run

	lifecycle.Base // Start and Stop
}

var _ lifecycle.Service = (*serverSet)(nil)

func newServerSet(q *Queue) (*serverSet, error) {
	s := &serverSet{
		q:      q,
		linger: q.cfg.ServerLinger,
		always: q.cfg.AlwaysOnServers,
		now:    time.Now,
		byName: map[string]*queueServer{},
		awakeC: make(chan struct{}, 1),
	}
	s.check = min(max(s.linger/5, 10*time.Millisecond), time.Second)
	for _, qi := range q.table.Queues() {
		qs := &queueServer{set: s, name: qi.Name, qi: qi, relay: q.relays[qi.Name]}
		s.byName[qi.Name] = qs
		s.order = append(s.order, qs)
	}
	if err := q.cfg.Registerer.Register(serverCollector{s}); err != nil {
		return nil, fmt.Errorf("queue: register task server metrics: %w", err)
	}
	return s, nil
}

// Start starts every queue's server (so that work an external Redis still
// holds from an earlier run is seen) and the sleep checker. The handlers
// are taken from the table now: they must all be set.
func (s *serverSet) Start(ctx context.Context) error {
	r, ok := s.Begin(ctx)
	if !ok {
		return nil // running already
	}
	s.mu.Lock()
	s.closed, s.cur = false, r
	s.mu.Unlock()
	for _, qs := range s.order {
		mux := asynq.NewServeMux()
		for _, name := range qs.qi.Types {
			tt, _ := s.q.table.Lookup(name)
			mux.HandleFunc(name, s.q.process(tt))
		}
		qs.mu.Lock()
		qs.mux = mux
		qs.mu.Unlock()
	}
	for _, qs := range s.order {
		if err := qs.wake(); err != nil {
			return errors.Join(err, s.Stop(context.WithoutCancel(ctx)))
		}
	}
	r.Go(s.sleepChecker)
	return nil
}

// wake makes sure the queue's server runs; the relay calls it after it
// handed the queue work. The queue then stays awake for at least the linger.
func (s *serverSet) wake(queue string) {
	qs := s.byName[queue]
	if qs == nil {
		return
	}
	if err := qs.wake(); err != nil {
		s.q.log.Error("start task server", "queue", queue, "err", err)
	}
}

func (qs *queueServer) wake() error {
	s := qs.set
	// closed is read under qs.mu: stop sets it, then takes each qs.mu, so
	// a server started here before stop came by is one stop shuts down.
	qs.mu.Lock()
	defer qs.mu.Unlock()
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil // stopping: the outbox hands the work again at the next start
	}
	qs.busySince = s.now()
	if qs.srv != nil {
		return nil
	}
	q := s.q
	client := q.conn.MakeRedisClient().(redisClient)
	srv := asynq.NewServerFromRedisClient(client, asynq.Config{
		Concurrency:              qs.qi.Concurrency,
		Queues:                   map[string]int{qs.name: 1},
		RetryDelayFunc:           q.retryDelay,
		IsFailure:                func(err error) bool { _, limited := RetryAfter(err); return !limited },
		TaskCheckInterval:        qs.poll(),
		DelayedTaskCheckInterval: q.cfg.DelayedCheckInterval,
		ShutdownTimeout:          q.cfg.ShutdownTimeout,
		Logger:                   asynqLogger{q.log.With("queue", qs.name)},
		LogLevel:                 asynq.WarnLevel,
	})
	if err := srv.Start(qs.mux); err != nil {
		_ = client.Close()
		return fmt.Errorf("queue: start server for %s: %w", qs.name, err)
	}
	qs.srv, qs.client = srv, client
	qs.starts++
	select {
	case s.awakeC <- struct{}{}:
	default:
	}
	return nil
}

// poll is how often the queue's server looks for work: Config.PollInterval,
// or its types' Poll when shorter.
func (qs *queueServer) poll() time.Duration {
	if p := qs.qi.Poll; p > 0 {
		return min(p, qs.set.q.cfg.PollInterval)
	}
	return qs.set.q.cfg.PollInterval
}

// sleepIfIdle stops the queue's server when the relay has had nothing in
// flight for the linger. It reports whether the server still runs.
func (qs *queueServer) sleepIfIdle(now time.Time) bool {
	s := qs.set
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.srv == nil {
		return false
	}
	// The relay marks a task in flight before it hands it, and wakes the
	// queue after: a task marked after this check finds the server asleep
	// and starts a new one.
	if qs.relay.backlog() > 0 {
		qs.busySince = now
		return true
	}
	if s.always || now.Sub(qs.busySince) < s.linger {
		return true
	}
	srv, client := qs.srv, qs.client
	qs.srv, qs.client = nil, nil
	s.mu.Lock()
	run := s.cur
	s.mu.Unlock()
	// The checker runs in the run, so the run is under way and Stop waits
	// for this shutdown.
	run.Go(func(context.Context) { shutdown(srv, client) })
	s.q.log.Debug("task server asleep", "queue", qs.name)
	return false
}

// shutdown stops a server (its running tasks get ShutdownTimeout) and
// closes its client.
func shutdown(srv *asynq.Server, client redisClient) {
	srv.Shutdown()
	_ = client.Close()
}

// sleepChecker checks the running servers for sleep, and waits for a wake
// when none runs.
func (s *serverSet) sleepChecker(ctx context.Context) {
	t := time.NewTicker(s.check)
	defer t.Stop()
	for {
		awake := false
		now := s.now()
		for _, qs := range s.order {
			if qs.sleepIfIdle(now) {
				awake = true
			}
		}
		if awake {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			continue
		}
		// Every server sleeps: no timer at all until a relay wakes one.
		select {
		case <-ctx.Done():
			return
		case <-s.awakeC:
		}
		t.Reset(s.check)
	}
}

// awake returns the names of the queues whose server runs.
func (s *serverSet) awake() []string {
	var out []string
	for _, qs := range s.order {
		qs.mu.Lock()
		if qs.srv != nil {
			out = append(out, qs.name)
		}
		qs.mu.Unlock()
	}
	return out
}

// Stop stops every server at once (running tasks get ShutdownTimeout) and
// waits for them, the sleeps in progress and the checker, at most until
// ctx ends. No server starts after Stop begins.
func (s *serverSet) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	r := s.Ending()
	if r == nil {
		return nil
	}
	for _, qs := range s.order {
		qs.mu.Lock()
		srv, client := qs.srv, qs.client
		qs.srv, qs.client = nil, nil
		qs.mu.Unlock()
		if srv != nil {
			r.Go(func(context.Context) { shutdown(srv, client) })
		}
	}
	return r.End(ctx)
}

// AwakeServers returns the queues whose asynq server runs now; the others
// sleep until their relay hands them work (see Config.ServerLinger).
func (q *Queue) AwakeServers() []string { return q.servers.awake() }

var (
	serverAwakeDesc = prometheus.NewDesc("mailroom_task_server_awake",
		"1 while the queue's asynq server runs, 0 while it sleeps (nothing in flight for the linger).",
		[]string{"queue"}, nil)
	serverStartsDesc = prometheus.NewDesc("mailroom_task_server_starts_total",
		"asynq servers started for the queue: one at start, then one at each wake.",
		[]string{"queue"}, nil)
)

// serverCollector reports which servers run and how often they started.
type serverCollector struct{ s *serverSet }

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- serverAwakeDesc
	ch <- serverStartsDesc
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	for _, qs := range c.s.order {
		qs.mu.Lock()
		awake, starts := 0.0, float64(qs.starts)
		if qs.srv != nil {
			awake = 1
		}
		qs.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(serverAwakeDesc, prometheus.GaugeValue, awake, qs.name)
		ch <- prometheus.MustNewConstMetric(serverStartsDesc, prometheus.CounterValue, starts, qs.name)
	}
}
