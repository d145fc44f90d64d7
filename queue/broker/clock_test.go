package broker

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"mailroom/internal/testkit"
)

type fakeStore struct {
	mu    sync.Mutex
	total time.Duration
	calls int
}

func (f *fakeStore) FastForward(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total += d
	f.calls++
}

func (f *fakeStore) get() (time.Duration, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total, f.calls
}

func TestClockAdvancesByElapsedTime(t *testing.T) {
	t.Parallel()
	store := &fakeStore{}
	c := newClock(store, 10*time.Millisecond, slog.New(slog.DiscardHandler))
	_ = c.Stop(t.Context()) // before Start: a no-op

	start := time.Now()
	if err := c.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Errorf("second Start: err = %v, want nil (it does nothing)", err)
	}
	testkit.Eventually(t, 5*time.Second, "the clock to tick 5 times", func() bool {
		_, calls := store.get()
		return calls >= 5
	})
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	_ = c.Stop(t.Context()) // twice: a no-op

	total, calls := store.get()
	if total <= 0 || total > elapsed {
		t.Errorf("forwarded %s in %d ticks, want in (0, %s]", total, calls, elapsed)
	}
}
