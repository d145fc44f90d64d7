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
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/lifecycle"
)

// probe is a service of the caller's (as the demo's traffic is): it
// records its starts and stops, and at each what it saw of the app.
type probe struct {
	name    string
	fail    bool
	a       **app.App
	mu      *sync.Mutex
	log     *[]string
	httpUp  *bool // at Stop: HTTP still accepted connections
	queueUp *bool // at Stop: the task servers still ran
}

func (p *probe) Start(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fail {
		*p.log = append(*p.log, "start "+p.name+" failed")
		return errors.New(p.name + " cannot start")
	}
	*p.log = append(*p.log, "start "+p.name)
	return nil
}

func (p *probe) Stop(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.log = append(*p.log, "stop "+p.name)
	if p.queueUp != nil {
		*p.queueUp = (*p.a).Queue().Ready()
		conn, err := net.Dial("tcp", (*p.a).Addr())
		*p.httpUp = err == nil
		if conn != nil {
			conn.Close()
		}
	}
	return nil
}

// running reports the services of a that still run.
func running(a *app.App) []string {
	var out []string
	for _, s := range a.Services() {
		if r, ok := s.(interface{ Running() bool }); ok && r.Running() {
			out = append(out, fmt.Sprintf("%T", s))
		}
	}
	return out
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

// The app starts its services in order (the alerter, the watch, the queue,
// the pipelines' loops, the caller's, HTTP) and stops them in reverse:
// the caller's services stop after HTTP and before the task servers.
func TestAppStartsInOrderAndStopsInReverse(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	var (
		a               *app.App
		mu              sync.Mutex
		log             []string
		httpUp, queueUp bool
	)
	first := &probe{name: "first", a: &a, mu: &mu, log: &log}
	second := &probe{name: "second", a: &a, mu: &mu, log: &log, httpUp: &httpUp, queueUp: &queueUp}
	a, err := app.New(context.Background(), cfg, app.Deps{Logger: app.NewLogger(cfg, testkit.LogWriter(t)), Services: []lifecycle.Service{first, second}})
	if err != nil {
		t.Fatal(err)
	}
	services := a.Services()
	if len(services) < 6 {
		t.Fatalf("%d services", len(services))
	}
	if _, ok := services[0].(*queue.Alerter); !ok {
		t.Errorf("first service %T, want the alerter", services[0])
	}
	if _, ok := services[1].(*queue.Watch); !ok {
		t.Errorf("second service %T, want the broker watch", services[1])
	}
	if _, ok := services[2].(*queue.Queue); !ok {
		t.Errorf("third service %T, want the queue", services[2])
	}
	n := len(services)
	if services[n-3] != lifecycle.Service(first) || services[n-2] != lifecycle.Service(second) {
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
	want := []string{"start first", "start second", "stop second", "stop first"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
	if httpUp {
		t.Error("HTTP still accepted connections when the caller's services stopped (it stops first)")
	}
	if !queueUp {
		t.Error("the task servers had stopped before the caller's services (they stop after)")
	}
	if r := running(a); len(r) > 0 {
		t.Errorf("still running after Stop: %v", r)
	}
}

// A service that fails to start unwinds, in reverse, the ones that had
// started: the app is left with nothing running.
func TestAppFailedStartUnwindsInReverse(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	var (
		a   *app.App
		mu  sync.Mutex
		log []string
	)
	probes := []lifecycle.Service{
		&probe{name: "first", a: &a, mu: &mu, log: &log},
		&probe{name: "second", a: &a, mu: &mu, log: &log},
		&probe{name: "third", fail: true, a: &a, mu: &mu, log: &log},
		&probe{name: "fourth", a: &a, mu: &mu, log: &log},
	}
	a, err := app.New(context.Background(), cfg, app.Deps{Logger: app.NewLogger(cfg, testkit.LogWriter(t)), Services: probes})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	err = a.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "third cannot start") {
		t.Fatalf("Start: %v, want the third's failure", err)
	}
	want := []string{"start first", "start second", "start third failed", "stop second", "stop first"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
	if a.Queue().Ready() {
		t.Error("the queue still runs after a failed start")
	}
	if r := running(a); len(r) > 0 {
		t.Errorf("still running after a failed start: %v", r)
	}
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
	var (
		a   *app.App
		mu  sync.Mutex
		log []string
	)
	probes := []lifecycle.Service{&probe{name: "first", a: &a, mu: &mu, log: &log}}
	a, err = app.New(context.Background(), cfg, app.Deps{Logger: app.NewLogger(cfg, testkit.LogWriter(t)), Services: probes})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	err = a.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "listen on --http-addr") {
		t.Fatalf("Start: %v, want the listen failure", err)
	}
	if want := []string{"start first", "stop first"}; !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
	if r := running(a); len(r) > 0 {
		t.Errorf("still running after a failed start: %v", r)
	}
}
