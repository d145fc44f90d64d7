package queue

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Every is a background loop with the app's loop lifecycle (Start, Stop):
// it runs its func once per interval until Stop, and logs the errors.
type Every struct {
	name     string
	interval time.Duration
	log      *slog.Logger
	fn       func(context.Context) error

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewEvery returns a loop that runs fn every interval; name names it in
// the log.
func NewEvery(name string, interval time.Duration, log *slog.Logger, fn func(context.Context) error) *Every {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Every{name: name, interval: interval, log: log, fn: fn}
}

// Start runs the loop until Stop; the first run is one interval away.
func (e *Every) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancel != nil {
		return nil
	}
	ctx, e.cancel = context.WithCancel(context.WithoutCancel(ctx))
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		t := time.NewTicker(e.interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := e.fn(ctx); err != nil && ctx.Err() == nil {
				e.log.Error(e.name, "err", err)
			}
		}
	}()
	return nil
}

// Stop ends the loop and waits for a run in progress.
func (e *Every) Stop() {
	e.mu.Lock()
	cancel := e.cancel
	e.cancel = nil
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	e.wg.Wait()
}
