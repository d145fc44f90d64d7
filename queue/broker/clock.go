package broker

import (
	"context"
	"log/slog"
	"time"

	"mailroom/internal/lifecycle"
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

	lifecycle.Base // Start and Stop
}

func newClock(store fastForwarder, tick time.Duration, logger *slog.Logger) *clock {
	return &clock{store: store, tick: tick, logger: logger, now: time.Now}
}

// slowTickWarnEvery limits the slow-tick warning.
const slowTickWarnEvery = time.Minute

// Start runs the clock until Stop (lifecycle.Base's, which waits for
// it; safe to call more than once, and before Start).
func (c *clock) Start(ctx context.Context) error {
	return c.StartLoop(ctx, c.run)
}

func (c *clock) run(ctx context.Context) {
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
