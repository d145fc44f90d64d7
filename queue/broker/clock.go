package broker

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// fastForwarder is the part of miniredis the clock drives.
type fastForwarder interface {
	FastForward(time.Duration)
}

// clock advances the embedded store's TTLs with real elapsed time. miniredis
// decrements TTLs only when told to; its ClockTTL mode would do it on every
// command, walking every key each time, so a ticker does it instead.
type clock struct {
	store  fastForwarder
	tick   time.Duration
	logger *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

func newClock(store fastForwarder, tick time.Duration, logger *slog.Logger) *clock {
	return &clock{store: store, tick: tick, logger: logger, now: time.Now}
}

// slowTickWarnEvery limits the slow-tick warning.
const slowTickWarnEvery = time.Minute

// Start runs the clock until Stop or until ctx ends.
func (c *clock) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return errClockStarted
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	go c.run(ctx, c.done)
	return nil
}

// Stop stops the clock and waits for it. It is safe to call more than once,
// and before Start.
func (c *clock) Stop() {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (c *clock) run(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(c.tick)
	defer t.Stop()
	last := c.now()
	var warned time.Time // last slow-tick warning, at most one a minute
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// time.Now carries a monotonic reading, so a wall-clock jump neither
		// expires everything nor stops expiry.
		now := c.now()
		elapsed := now.Sub(last)
		last = now
		if elapsed <= 0 {
			continue
		}
		c.store.FastForward(elapsed)
		if took := c.now().Sub(now); took > c.tick/4 && now.Sub(warned) > slowTickWarnEvery {
			warned = now
			c.logger.Warn("clock tick was slow: too many keys in the embedded store?",
				"took", took, "clock_tick", c.tick)
		}
	}
}
