package google

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/queue/broker/brokertest"
)

// TestFleetBudgetFallsBackToAShare: a budget kept in a fleet's Redis that
// does not answer spends from its fallback (this mailroom's broker), with
// the project's units divided by the mailrooms it last saw, and says so;
// calls still succeed. The account's own limit is unchanged.
func TestFleetBudgetFallsBackToAShare(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { dead.Close() })
	local := brokertest.Embedded(t).Client()
	clk := &testClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	b, err := NewBudget(BudgetConfig{UserUnits: 1000, ProjectUnits: 300, Window: time.Minute, Pace: -1, Now: clk.Now,
		Fallback: local, Share: func() int { return 3 }}, dead)
	if err != nil {
		t.Fatal(err)
	}
	g, err := b.TrySpend(context.Background(), "a1", 100, PriorityLive)
	if err != nil || !g.OK {
		t.Fatalf("the first spend with the fleet's Redis down: %+v, %v; want it granted from the fallback", g, err)
	}
	if !b.FleetDown() {
		t.Error("FleetDown is false after the fleet's Redis failed")
	}
	// A third of the project's 300: 100 spent, the next unit is refused.
	if g := spend(t, b, "a2", 1, PriorityLive); g.OK {
		t.Errorf("a spend past the share (300/3) was granted: %+v", g)
	}
	u, err := b.Usage(context.Background(), "a1")
	if err != nil || u.ProjectLimit != 100 || u.ProjectUsed != 100 {
		t.Errorf("usage in the fallback: %+v, %v; want the project's share, 100 of 100", u, err)
	}
	if b.MineLastWindow() != 100 {
		t.Errorf("this process's units in the window: %d, want 100", b.MineLastWindow())
	}
}

// TestFleetBudgetWithoutFallbackUsesTheStore: with a working fleet's Redis,
// the whole project's units are there.
func TestFleetBudgetUsesTheFleetWhileItAnswers(t *testing.T) {
	t.Parallel()
	fleet, local := brokertest.Embedded(t).Client(), brokertest.Embedded(t).Client()
	clk := &testClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	b, err := NewBudget(BudgetConfig{UserUnits: 1000, ProjectUnits: 300, Window: time.Minute, Pace: -1, Now: clk.Now,
		Fallback: local, Share: func() int { return 3 }}, fleet)
	if err != nil {
		t.Fatal(err)
	}
	if g := spend(t, b, "a1", 250, PriorityLive); !g.OK {
		t.Fatalf("250 of the project's 300 refused: %+v", g)
	}
	if b.FleetDown() {
		t.Error("FleetDown with the fleet's Redis answering")
	}
	if n, _ := local.Keys(context.Background(), "*gmailquota*").Result(); len(n) != 0 {
		t.Errorf("the fallback holds %v; want nothing while the fleet answers", n)
	}
}
