package bench

import (
	"context"
	"fmt"
	"time"
)

// sleepCtx waits d, or until ctx ends (sleepUntil, in bench_fairness.go).
func sleepCtx(ctx context.Context, d time.Duration) error {
	return sleepUntil(ctx, time.Now().Add(d))
}

// waitFor polls cond every 5 ms until it holds, returns an error, ctx
// ends or d has passed (an error naming what).
func waitFor(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		if err := sleepCtx(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}
