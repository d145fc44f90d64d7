package app_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/lifecycle"
	"mailroom/internal/testkit"
)

// recorder keeps, in order, the starts and stops of an app's probes, and
// what the app looked like when the last probe stopped.
type recorder struct {
	a               *app.App
	mu              sync.Mutex
	log             []string
	httpUp, queueUp bool // at the last probe's Stop
}

// probe is a service of the caller's (as the demo's traffic is).
type probe struct {
	r    *recorder
	name string
	fail bool // its Start fails
	last bool // records what it sees of the app at Stop
}

func (p *probe) Start(context.Context) error {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	if p.fail {
		p.r.log = append(p.r.log, "start "+p.name+" failed")
		return errors.New(p.name + " cannot start")
	}
	p.r.log = append(p.r.log, "start "+p.name)
	return nil
}

func (p *probe) Stop(context.Context) error {
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.r.log = append(p.r.log, "stop "+p.name)
	if p.last {
		p.r.queueUp = p.r.a.Queue().Ready()
		conn, err := net.Dial("tcp", p.r.a.Addr())
		p.r.httpUp = err == nil
		if conn != nil {
			conn.Close()
		}
	}
	return nil
}

// newApp builds an app over cfg with the recorder's probes as the caller's
// services; a name ending in "!" fails to start.
func newApp(t *testing.T, cfg *app.Config, names ...string) (*app.App, *recorder) {
	t.Helper()
	r := &recorder{}
	var services []lifecycle.Service
	for i, n := range names {
		services = append(services, &probe{r: r, name: strings.TrimSuffix(n, "!"), fail: strings.HasSuffix(n, "!"), last: i == len(names)-1})
	}
	a, err := app.New(context.Background(), cfg, app.Deps{Logger: app.NewLogger(cfg, testkit.LogWriter(t)), Services: services})
	if err != nil {
		t.Fatal(err)
	}
	r.a = a
	return a, r
}

// check compares the recorded starts and stops with want, and makes sure
// nothing of the app runs any more.
func (r *recorder) check(t *testing.T, want ...string) {
	t.Helper()
	if !slices.Equal(r.log, want) {
		t.Fatalf("got %q, want %q", r.log, want)
	}
	for _, s := range r.a.Services() {
		if run, ok := s.(interface{ Running() bool }); ok && run.Running() {
			t.Errorf("%T still runs", s)
		}
	}
	if r.a.Queue().Ready() {
		t.Error("the task servers still run")
	}
}

// New validates the config it is given (after the demo or a benchmark
// changed it), naming the bad setting, and owns the deps' closers: a
// failed New runs them.
func TestNewValidatesAndClosesTheDepsOnFailure(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	cfg.ConcurrencyState = -1
	closed := 0
	_, err := app.New(context.Background(), cfg, app.Deps{Closers: []func() error{func() error { closed++; return nil }}})
	if err == nil || !strings.Contains(err.Error(), "MAILROOM_CONCURRENCY_STATE") {
		t.Fatalf("New: %v, want the bad setting named", err)
	}
	if closed != 1 {
		t.Fatalf("the deps' closer ran %d times, want once", closed)
	}
}

// The app starts its services in order (the broker's clock, its lease,
// the alerter, the watch, the queue, the pipelines' loops, the caller's,
// HTTP) and stops them in reverse:
// the caller's services stop after HTTP and before the task servers.
func TestAppStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	a, r := newApp(t, apptest.Config(t), "first", "second")
	services := a.Services()
	want := []string{"*broker.clock", "*broker.Lease", "*queue.Alerter", "*queue.Watch", "*queue.Queue"}
	for i, w := range want {
		if got := fmt.Sprintf("%T", services[i]); got != w {
			t.Errorf("service %d is %s, want %s", i, got, w)
		}
	}
	n := len(services)
	if p, ok := services[n-3].(*probe); !ok || p.name != "first" {
		t.Errorf("the caller's services are not just before HTTP: %T, %T", services[n-3], services[n-2])
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !a.Queue().Ready() {
		t.Error("the queue is not ready after Start")
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.check(t, "start first", "start second", "stop second", "stop first")
	if r.httpUp {
		t.Error("HTTP still accepted connections when the caller's services stopped (it stops first)")
	}
	if !r.queueUp {
		t.Error("the task servers had stopped before the caller's services (they stop after)")
	}
}

// A service that fails to start unwinds, in reverse, the ones that had
// started: the app is left with nothing running.
func TestAppFailedStartUnwindsInReverse(t *testing.T) {
	t.Parallel()
	a, r := newApp(t, apptest.Config(t), "first", "second", "third!", "fourth")
	defer a.Close()
	err := a.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "third cannot start") {
		t.Fatalf("Start: %v, want the third's failure", err)
	}
	r.check(t, "start first", "start second", "start third failed", "stop second", "stop first")
}

// HTTP is the last to start: when its address is taken, everything before
// it is stopped again, the caller's services first.
func TestAppHTTPListenFailureUnwinds(t *testing.T) {
	t.Parallel()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := apptest.Config(t)
	cfg.HTTPAddr = taken.Addr().String()
	a, r := newApp(t, cfg, "first")
	defer a.Close()
	err = a.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen on --http-addr") {
		t.Fatalf("Start: %v, want the listen failure", err)
	}
	r.check(t, "start first", "stop first")
}

var _ lifecycle.Service = (*probe)(nil)

// Services returns the same instances at every call, the pipelines' own
// among them (their started guard is the one Start sets), and a second
// Start does nothing: every service goes on running, and one Stop ends
// them all.
func TestAppServicesAreTheSameAndASecondStartDoesNothing(t *testing.T) {
	t.Parallel()
	a, r := newApp(t, apptest.Config(t))
	first, again := a.Services(), a.Services()
	if len(first) != len(again) {
		t.Fatalf("%d services, then %d", len(first), len(again))
	}
	for i := range first {
		if first[i] != again[i] {
			t.Errorf("service %d (%T) is a new instance at the second call", i, first[i])
		}
	}
	pipelines := map[string]interface{ Services() []lifecycle.Service }{
		"gmail": a.Gmail(), "rules": a.Rules(), "sheets": a.Sheets(), "webhooks": a.Webhooks(),
	}
	for name, p := range pipelines {
		own, ownAgain := p.Services(), p.Services()
		if len(own) == 0 || !slices.Equal(own, ownAgain) {
			t.Errorf("%s: Services %v, then %v: want the same non-empty list", name, own, ownAgain)
		}
		for _, s := range own {
			if !slices.Contains(first, s) {
				t.Errorf("%s: its %T is not the one the app runs", name, s)
			}
		}
	}
	ctx := context.Background()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := a.Addr()
	running := map[lifecycle.Service]bool{}
	for _, s := range first {
		if run, ok := s.(interface{ Running() bool }); ok && run.Running() {
			running[s] = true
		}
	}
	if !running[a.Queue()] {
		t.Fatal("the queue does not run after Start")
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("second Start: %v, want nil (it does nothing)", err)
	}
	if !a.Queue().Ready() || a.Addr() != addr {
		t.Fatalf("after a second Start: queue ready %v, address %s (was %s)", a.Queue().Ready(), a.Addr(), addr)
	}
	for s := range running {
		if !s.(interface{ Running() bool }).Running() {
			t.Errorf("%T stopped running after a second Start", s)
		}
	}
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	r.check(t)
}
