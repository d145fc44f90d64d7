// Package lifecycle is the one lifecycle every background service of
// mailroom follows (the alerter, the broker watch and clock, the queue,
// the pipelines' loops, the demo's traffic, HTTP): a Service starts and
// stops; Base, embedded in a service, owns its started guard, the context
// its goroutines run in and the wait for them at Stop; a Sequence starts
// services in order, stops them in reverse and unwinds what had started
// when a start fails. After river's startstop package.
//
// It imports nothing of mailroom's, so every floor may use it (the broker
// too).
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Service is a part of the app that runs in the background between Start
// and Stop. Start returns once the service runs (its loops run in their
// own goroutines, until Stop, not until Start's ctx ends); a second Start
// while it runs does nothing and returns nil (as River's). Stop ends it and waits for its
// goroutines, at most until ctx ends; a Stop of a service that does not
// run (never started, or stopped already) does nothing.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Base is embedded by a service: it gives the service its started guard,
// its run's context and the wait for its goroutines, so the service writes
// only its Start (Begin, returning at once when a run is under way, then
// Run.Go for each loop) and, when it has work
// of its own to do at stop, its Stop (Ending, then Run.End). A service
// that is one loop starts it with StartLoop, and one with nothing to do at
// stop uses Base's Stop. The zero Base is ready.
type Base struct {
	mu  sync.Mutex
	run *Run
}

// Run is one run of a service, from Begin to End.
type Run struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Begin starts a run of the service; ok is false, and the run nil, when
// one is under way already (the caller's Start then does nothing). The
// run's context keeps ctx's values but not its cancellation or deadline:
// it ends at Stop, however the caller's ctx ends.
func (b *Base) Begin(ctx context.Context) (r *Run, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.run != nil {
		return nil, false
	}
	r = &Run{}
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	b.run = r
	return r, true
}

// StartLoop begins a run and runs loop in it until Stop; while a run is
// under way it does nothing.
func (b *Base) StartLoop(ctx context.Context, loop func(ctx context.Context)) error {
	if r, ok := b.Begin(ctx); ok {
		r.Go(loop)
	}
	return nil
}

// Tick calls fn once per interval until ctx ends (a loop's usual body);
// the first call is one interval away.
func Tick(ctx context.Context, interval time.Duration, fn func(ctx context.Context)) {
	TickOrKick(ctx, interval, nil, fn)
}

// TickOrKick is Tick that also calls fn at once whenever kick receives (a
// nil kick never does).
func TickOrKick(ctx context.Context, interval time.Duration, kick <-chan struct{}, fn func(ctx context.Context)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-kick:
		}
		fn(ctx)
	}
}

// Ending takes the service's run for the caller to end (Run.End), nil
// when the service does not run. From here on Running is false and Begin
// may start a new run.
func (b *Base) Ending() *Run {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.run
	b.run = nil
	return r
}

// Stop ends the service's run, if any, and waits for its goroutines at
// most until ctx ends.
func (b *Base) Stop(ctx context.Context) error {
	if r := b.Ending(); r != nil {
		return r.End(ctx)
	}
	return nil
}

// Running reports whether a run is under way.
func (b *Base) Running() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.run != nil
}

// Context is the run's context: it ends when the run ends.
func (r *Run) Context() context.Context { return r.ctx }

// Go runs fn with the run's context in a goroutine that End waits for.
func (r *Run) Go(fn func(ctx context.Context)) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		fn(r.ctx)
	}()
}

// End cancels the run's context and waits for its goroutines, at most
// until ctx ends (then it returns ctx's error and the goroutines finish on
// their own).
func (r *Run) End(ctx context.Context) error {
	r.cancel()
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lifecycle: stop: %w", ctx.Err())
	}
}

// Sequence is services in their start order: each starts after the ones
// before it and stops before them.
type Sequence []Service

// Start starts the services in order. When one fails, the ones that had
// started are stopped in reverse order and Start returns the failure
// (with any error of that unwinding).
func (s Sequence) Start(ctx context.Context) error {
	for i, svc := range s {
		if err := svc.Start(ctx); err != nil {
			return errors.Join(err, s[:i].Stop(context.WithoutCancel(ctx)))
		}
	}
	return nil
}

// Stop stops every service in reverse order, each whatever the ones
// before it answered, and joins their errors.
func (s Sequence) Stop(ctx context.Context) error {
	var errs []error
	for i := len(s) - 1; i >= 0; i-- {
		if err := s[i].Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
