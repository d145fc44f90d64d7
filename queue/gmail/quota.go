package gmail

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"mailroom/queue"
)

// Gmail quota units per call (NOTES.md).
const (
	unitsProfile = 1
	unitsList    = 5
	unitsGet     = 5
	unitsHistory = 2
	unitsLabels  = 1
	unitsWatch   = 100
	unitsStop    = 50
)

// quota spreads each account's Gmail calls under its per-user rate: a call
// waits for its units, and when the wait would be long it gives its task
// back as rate limited instead of holding a worker.
type quota struct {
	perSecond float64
	burst     int
	maxWait   time.Duration

	mu       sync.Mutex
	limiters map[string]*rate.Limiter
}

func newQuota(perSecond float64, burst int, maxWait time.Duration) *quota {
	return &quota{perSecond: perSecond, burst: burst, maxWait: maxWait, limiters: map[string]*rate.Limiter{}}
}

func (q *quota) limiter(accountID string) *rate.Limiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.limiters[accountID]
	if l == nil {
		l = rate.NewLimiter(rate.Limit(q.perSecond), q.burst)
		q.limiters[accountID] = l
	}
	return l
}

// spend waits until the account may spend units, or returns a rate-limited
// error naming the wait when it is longer than maxWait.
func (q *quota) spend(ctx context.Context, accountID string, units int) error {
	r := q.limiter(accountID).ReserveN(time.Now(), min(units, q.burst))
	if !r.OK() {
		return fmt.Errorf("gmail: quota: %d units exceed the burst", units)
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	if d > q.maxWait {
		r.Cancel()
		return queue.RateLimited(fmt.Errorf("gmail: account %s is over its Gmail quota", accountID), d)
	}
	if err := queue.Wait(ctx, d); err != nil {
		r.Cancel()
		return err
	}
	return nil
}

func (q *quota) forget(accountID string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	delete(q.limiters, accountID)
}
