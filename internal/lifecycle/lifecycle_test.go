package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"mailroom/internal/lifecycle"
	"mailroom/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// ticker is a service as the app's are: it embeds Base and writes only its
// Start; its loop counts ticks until the run ends.
type ticker struct {
	lifecycle.Base
	ticks    atomic.Int64
	loops    atomic.Int64  // loops started
	release  chan struct{} // when set, the loop waits for it before it returns
	returned atomic.Bool   // the loop has returned
}

func (s *ticker) Start(ctx context.Context) error {
	return s.StartLoop(ctx, func(ctx context.Context) {
		s.loops.Add(1)
		for ctx.Err() == nil {
			s.ticks.Add(1)
			select {
			case <-ctx.Done():
			case <-time.After(time.Millisecond):
			}
		}
		if s.release != nil {
			<-s.release
		}
		s.returned.Store(true)
	})
}

var _ lifecycle.Service = (*ticker)(nil)

// TestSecondStartDoesNothing: a second Start while the service runs
// returns nil (as River's) and starts nothing: one loop runs, and one Stop
// ends it.
func TestSecondStartDoesNothing(t *testing.T) {
	s := &ticker{}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("second Start: %v, want nil", err)
	}
	testkit.Eventually(t, 2*time.Second, "the loop to tick", func() bool { return s.ticks.Load() > 0 })
	if n := s.loops.Load(); n != 1 {
		t.Fatalf("%d loops run after two Starts, want 1", n)
	}
	if !s.Running() {
		t.Fatal("the service stopped running after a second Start")
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("still running after Stop")
	}
	// Stopped, it starts again.
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestStopWithoutStartDoesNothing(t *testing.T) {
	s := &ticker{}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if s.Running() {
		t.Fatal("running after a Stop without Start")
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopWaitsForTheLoop(t *testing.T) {
	s := &ticker{release: make(chan struct{})}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while the loop was still running", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(s.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if !s.returned.Load() {
		t.Fatal("Stop returned before the loop did")
	}
}

func TestStopIsBoundedByItsContext(t *testing.T) {
	s := &ticker{release: make(chan struct{})}
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with an expired context: %v, want DeadlineExceeded", err)
	}
	close(s.release) // let the loop end (goleak checks it does)
}

func TestTheRunOutlivesStartsContext(t *testing.T) {
	s := &ticker{}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	n := s.ticks.Load()
	testkit.Eventually(t, 2*time.Second, "the loop to tick on after Start's context ended", func() bool { return s.ticks.Load() >= n+3 })
	if s.returned.Load() {
		t.Fatal("the loop ended with Start's context; it must run until Stop")
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// fake records its starts and stops in a shared log.
type fake struct {
	name    string
	failing bool
	mu      *sync.Mutex
	log     *[]string
}

func (f *fake) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failing {
		*f.log = append(*f.log, "start "+f.name+" failed")
		return errors.New(f.name + " failed")
	}
	*f.log = append(*f.log, "start "+f.name)
	return nil
}

func (f *fake) Stop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	*f.log = append(*f.log, "stop "+f.name)
	return nil
}

func fakes(log *[]string, failing string, names ...string) lifecycle.Sequence {
	mu := &sync.Mutex{}
	var s lifecycle.Sequence
	for _, n := range names {
		s = append(s, &fake{name: n, failing: n == failing, mu: mu, log: log})
	}
	return s
}

func TestSequenceStartsInOrderAndStopsInReverse(t *testing.T) {
	var log []string
	s := fakes(&log, "", "a", "b", "c")
	if err := s.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
}

func TestSequenceUnwindsAFailedStartInReverse(t *testing.T) {
	var log []string
	s := fakes(&log, "c", "a", "b", "c", "d")
	err := s.Start(t.Context())
	if err == nil || err.Error() != "c failed" {
		t.Fatalf("Start: %v, want c's failure", err)
	}
	want := []string{"start a", "start b", "start c failed", "stop b", "stop a"}
	if !slices.Equal(log, want) {
		t.Fatalf("got %q, want %q", log, want)
	}
}
