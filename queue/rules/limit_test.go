package rules

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

func TestLimiterRefusesWithRetryAfterAndGivesBack(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		l := NewLimiter(b.Client(), 3, time.Minute)
		var got []*Reservation
		for range 3 {
			r, err := l.Reserve(ctx, "u1")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, r)
		}
		_, err := l.Reserve(ctx, "u1")
		var refused *RefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("4th save: got %v, want a refusal", err)
		}
		if refused.RetryAfter <= 55*time.Second || refused.RetryAfter > time.Minute {
			t.Errorf("RetryAfter = %s, want just under a minute", refused.RetryAfter)
		}
		if _, err := l.Reserve(ctx, "u2"); err != nil {
			t.Errorf("another user is limited too: %v", err)
		}
		if err := got[1].Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Reserve(ctx, "u1"); err != nil {
			t.Errorf("a cancelled save still counts: %v", err)
		}
	})
}

// TestLimiterHasNoDoubleBurstAtTheWindowEdge replays the hole of a fixed
// window: the limit used up just before an edge, then a burst just after it.
func TestLimiterHasNoDoubleBurstAtTheWindowEdge(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		var now time.Time
		l := NewLimiter(b.Client(), 5, time.Second)
		l.now = func() time.Time { return now }
		try := func(at time.Duration) bool {
			now = base.Add(at)
			_, err := l.Reserve(ctx, "edge")
			if err != nil && !errors.As(err, new(*RefusedError)) {
				t.Fatal(err)
			}
			return err == nil
		}
		for i := range 5 {
			if !try(900*time.Millisecond + time.Duration(i)*10*time.Millisecond) {
				t.Fatalf("save %d before the edge refused", i)
			}
		}
		for i := range 20 {
			if try(1000*time.Millisecond + time.Duration(i)*40*time.Millisecond) {
				t.Fatalf("save at %s after the edge accepted: 6 saves within one second", time.Duration(i)*40*time.Millisecond)
			}
		}
		if !try(1900 * time.Millisecond) {
			t.Error("save a full window after the first was refused")
		}
	})
}

// TestLimiterBurstStraddlingTheEdge hammers the limiter from many
// goroutines for more than two windows with the broker's own clock, and
// checks every window of the log, at every offset.
func TestLimiterBurstStraddlingTheEdge(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		t.Parallel()
		const limit, window = 5, 400 * time.Millisecond
		ctx := context.Background()
		l := NewLimiter(b.Client(), limit, window)
		var (
			mu       sync.Mutex
			accepted []time.Time
			refused  int
			wg       sync.WaitGroup
		)
		stop := time.Now().Add(2*window + window/2)
		for range 20 {
			wg.Go(func() {
				for time.Now().Before(stop) {
					r, err := l.Reserve(ctx, "burst")
					mu.Lock()
					switch {
					case err == nil:
						accepted = append(accepted, r.At)
					case errors.As(err, new(*RefusedError)):
						refused++
					default:
						t.Error(err)
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		slices.SortFunc(accepted, func(a, b time.Time) int { return a.Compare(b) })
		for i, at := range accepted {
			n := 0
			for _, other := range accepted[i:] {
				if other.Sub(at) < window {
					n++
				}
			}
			if n > limit {
				t.Fatalf("%d saves accepted within %s of %s (limit %d)", n, window, at.Format("15:04:05.000"), limit)
			}
		}
		if len(accepted) < 2*limit || refused == 0 {
			t.Errorf("accepted %d and refused %d: want the limit reached in each window", len(accepted), refused)
		}
	})
}
