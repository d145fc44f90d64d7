package queue

import (
	"context"
	"errors"
	"time"
)

// ErrStopping is the cause of the error Wait returns when the queue that
// runs the task begins to stop.
var ErrStopping = errors.New("queue: stopping; the task is handed back")

type stoppingKey struct{}

// withStopping gives a handler's context the queue's stop signal.
func withStopping(ctx context.Context, stopping <-chan struct{}) context.Context {
	return context.WithValue(ctx, stoppingKey{}, stopping)
}

// Stopping returns a channel that is closed when the queue running the task
// of ctx begins to stop (nil, which never fires, outside a task). A handler
// that waits for something other than its own work (quota, its turn)
// should give the task back then, so that a shutdown only waits for work in
// progress.
func Stopping(ctx context.Context) <-chan struct{} {
	ch, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	return ch
}

// HandBack is the error a handler returns to give its task back at a
// stop: rate-limited, so that it counts as no failure, and run again after
// about wait (at the next start when the process exits).
func HandBack(wait time.Duration) error { return RateLimited(ErrStopping, wait) }

// Wait pauses a handler for d. It returns ctx's error when ctx ends first,
// and HandBack(d) when the queue begins to stop first.
func Wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-Stopping(ctx):
		return HandBack(d)
	case <-t.C:
		return nil
	}
}
