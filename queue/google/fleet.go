package google

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A fleet is several mailrooms on one Google project. Their Gmail budget
// lives in one Redis they share (MAILROOM_FLEET_REDIS_URL), spent by the
// same atomic scripts, so that together they stay within the project's
// units a minute and its accounts share them as on one machine (each
// account belongs to one mailroom; its own window is in the same place).
// When that Redis does not answer, each mailroom keeps its budget in its
// own broker with the project's units divided by the mailrooms it last
// saw, so the fleet still stays within the project's limit, and goes back
// to the fleet's Redis FleetRetry later. The Sheets quotas (queue/sheets)
// do the same with their reads and writes.

// FleetRetry is how long after a call the fleet's Redis did not answer the
// project's counts stay in the fallback before they try it again.
const FleetRetry = 5 * time.Second

// FleetState is whether a fleet's Redis answers, as one mailroom's
// project-wide counts see it (the Gmail budget's, the Sheets quotas'):
// after a call it did not answer, the counts go to the fallback for
// FleetRetry. The zero value is up.
type FleetState struct {
	mu        sync.Mutex
	downUntil time.Time
	down      bool
}

// IsDown reports whether calls go to the fallback now.
func (f *FleetState) IsDown(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down && now.Before(f.downUntil)
}

// MarkDown notes a failed call: the next FleetRetry goes to the fallback.
// It reports whether the fleet was up until now.
func (f *FleetState) MarkDown(now time.Time) (was bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was = !f.down
	f.down, f.downUntil = true, now.Add(FleetRetry)
	return was
}

// MarkUp notes a call the fleet's Redis answered; it reports whether it was
// down until now.
func (f *FleetState) MarkUp() (was bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	was = f.down
	f.down = false
	return was
}

// Unreachable reports whether err means the Redis did not answer (as
// opposed to an answer that is an error, or the caller giving up).
func Unreachable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// ShareOf is a mailroom's safe share of a project's limit while the
// fleet's Redis does not answer: the limit divided by the mailrooms it
// last saw (share nil or under 1: one), at least 1.
func ShareOf(limit int, share func() int) int {
	n := 1
	if share != nil {
		n = max(1, share())
	}
	return max(1, limit/n)
}

// store is where the budget is kept now: the fleet's Redis (or the only
// store), or the fallback while the fleet's Redis does not answer.
func (b *Budget) store() BudgetStore {
	if b.cfg.Fallback != nil && b.fleet.IsDown(b.cfg.Now()) {
		return b.cfg.Fallback
	}
	return b.rdb
}

// share is the project's units this budget may spend a window: all of
// them, or while the fleet's Redis does not answer, its share.
func (b *Budget) projectUnits() int {
	if b.cfg.Fallback == nil || !b.fleet.IsDown(b.cfg.Now()) || b.cfg.Share == nil {
		return b.cfg.ProjectUnits
	}
	return ShareOf(b.cfg.ProjectUnits, b.cfg.Share)
}

func (b *Budget) args(now time.Time) []any {
	return []any{now.UnixMilli(), (b.cfg.Window + b.cfg.Margin).Milliseconds(), budgetBuckets, b.cfg.Recover.Milliseconds(),
		b.cfg.UserUnits, b.projectUnits()}
}

// run runs a budget script on the store in use, with the budget's ARGV
// then extra; a fleet's Redis that does not answer sends it, and the
// calls of the next FleetRetry, to the fallback.
func (b *Budget) run(ctx context.Context, s *redis.Script, keys []string, now time.Time, extra ...any) *redis.Cmd {
	cmd := s.Run(ctx, b.store(), keys, append(b.args(now), extra...)...)
	if b.cfg.Fallback == nil {
		return cmd
	}
	if b.store() == b.cfg.Fallback {
		return cmd
	}
	if !Unreachable(cmd.Err()) {
		if b.fleet.MarkUp() {
			b.log.Info("the fleet's Redis answers again; the project's Gmail units are shared through it")
		}
		return cmd
	}
	if b.fleet.MarkDown(b.cfg.Now()) {
		b.log.Warn("the fleet's Redis does not answer; spending this mailroom's share of the project's Gmail units from its own broker",
			"share", b.projectUnits(), "err", cmd.Err())
	}
	return s.Run(ctx, b.cfg.Fallback, keys, append(b.args(now), extra...)...)
}

// FleetDown reports whether the budget is kept in the fallback because the
// fleet's Redis does not answer (false without a fleet).
func (b *Budget) FleetDown() bool {
	return b.cfg.Fallback != nil && b.fleet.IsDown(b.cfg.Now())
}

// MineLastWindow is the units this process was granted in the last window:
// its share of the project's (the fleet's) units.
func (b *Budget) MineLastWindow() int { return b.mine.sum(b.cfg.Now(), b.cfg.Window) }

// unitLog is a sliding log of units in per-second buckets.
type unitLog struct {
	mu      sync.Mutex
	buckets map[int64]int
}

func (l *unitLog) add(now time.Time, units int, window time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[int64]int{}
	}
	sec := now.Unix()
	l.buckets[sec] += units
	for k := range l.buckets {
		if time.Duration(sec-k)*time.Second > window+time.Second {
			delete(l.buckets, k)
		}
	}
}

func (l *unitLog) sum(now time.Time, window time.Duration) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	total, sec := 0, now.Unix()
	for k, v := range l.buckets {
		if time.Duration(sec-k)*time.Second < window {
			total += v
		}
	}
	return total
}
