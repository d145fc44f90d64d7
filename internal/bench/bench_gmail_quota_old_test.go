package bench

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/queue"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/google"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The old limiters spend each Gmail call from the limiter the design before
// the budget spent it from, at Google's cost (the 2026 list, the benches'),
// and refuse as it did.
func TestOldLimitersByCallKind(t *testing.T) {
	const base = "http://google.test/gmail/v1/users/me/"
	reclassify := google.WithPriority(context.Background(), google.PriorityReclassify)
	live := google.WithPriority(context.Background(), google.PriorityLive)
	for _, c := range []struct {
		ctx          context.Context
		method, path string
		units, kind  int
	}{
		{reclassify, http.MethodPost, "messages/batchModify", 50, oldRules},
		{reclassify, http.MethodGet, "messages/18c0?format=full", 60, oldRules},
		{reclassify, http.MethodGet, "labels", 0, oldNone},
		{live, http.MethodGet, "messages/18c0?format=metadata", 20, oldGmail},
		{context.Background(), http.MethodGet, "messages?maxResults=500", 5, oldGmail},
		{context.Background(), http.MethodGet, "threads/18c0?format=metadata", 40, oldGmail},
		{live, http.MethodGet, "history?startHistoryId=5", 2, oldGmail},
		{live, http.MethodGet, "labels", 1, oldGmail},
		{live, http.MethodGet, "profile", 1, oldGmail},
		{live, http.MethodPost, "watch", 100, oldGmail},
		{live, http.MethodPost, "messages/18c0/modify", 0, oldNone},
		{live, http.MethodPost, "labels", 0, oldNone},
	} {
		req, err := http.NewRequestWithContext(c.ctx, c.method, base+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if units, kind := oldKind(req, benchPrices()); units != c.units || kind != c.kind {
			t.Errorf("%s %s: %d units from limiter %d, want %d from %d", c.method, c.path, units, kind, c.units, c.kind)
		}
	}

	b := brokertest.Embedded(t)
	var sent atomic.Int64
	l := newOldLimiters(1)
	l.prices = google.MustPrices(google.Prices2025) // the burst below is counted in 5-unit gets
	l.base = roundTripFunc(func(*http.Request) (*http.Response, error) {
		sent.Add(1)
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	})
	l.setBroker(b.Client())
	do := func(ctx context.Context, method, path string) error {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, nil)
		_, err := l.RoundTrip(req)
		return err
	}
	// The reclassify's share: 10,000 units a minute, in one burst at most.
	for i := range 200 {
		if err := do(reclassify, http.MethodPost, "messages/batchModify"); err != nil {
			t.Fatalf("batchModify %d (%d units): %v", i+1, (i+1)*50, err)
		}
	}
	err := do(reclassify, http.MethodPost, "messages/batchModify")
	if wait, limited := queue.RetryAfter(err); !limited || wait <= 0 || wait > 300*time.Millisecond {
		t.Errorf("the 201st batchModify (10,050 units in a minute): %v, want rate limited for up to 300 ms", err)
	}
	// The Gmail pipeline's: bursts of 1,000 units at 250 a second; a call
	// waits in its task up to 2 s, a longer wait hands the task back.
	for i := range 200 {
		if err := do(live, http.MethodGet, "messages/18c0"); err != nil {
			t.Fatalf("get %d: %v", i+1, err)
		}
	}
	var (
		mu     sync.Mutex
		waited []time.Duration
		wg     sync.WaitGroup
	)
	for range 150 { // 750 units more: 3 s at 250 a second
		wg.Go(func() {
			err := do(live, http.MethodGet, "messages/18c0")
			if wait, limited := queue.RetryAfter(err); limited {
				mu.Lock()
				waited = append(waited, wait)
				mu.Unlock()
			} else if err != nil {
				t.Errorf("get: %v", err)
			}
		})
	}
	wg.Wait()
	// The first 100 (500 units, 2 s) wait in their tasks; of the other 50
	// those asked for before the bucket refilled enough are handed back.
	if len(waited) == 0 || len(waited) > 50 {
		t.Errorf("%d of 150 gets over a full burst were handed back, want 1 to 50 (those that would wait over 2 s)", len(waited))
	}
	for _, w := range waited {
		if w <= 2*time.Second {
			t.Errorf("a get was handed back with a wait of %s, which the old limiter waited out in the task", w)
		}
	}
	if want := int64(400 + 150 - len(waited)); sent.Load() != want {
		t.Errorf("%d requests reached Google, want %d", sent.Load(), want)
	}
}
