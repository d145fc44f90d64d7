package sheets

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/queue/broker/brokertest"
)

// TestQuotaFleetFallsBackToAShare: a quota kept in a fleet's Redis that
// does not answer counts its calls in its fallback (this mailroom's
// broker), within the project's limit divided by the mailrooms it last saw,
// as the Gmail budget does; calls are still granted up to that share, its
// usage shows the share, and once the fleet's Redis answers again the
// calls are counted there.
func TestQuotaFleetFallsBackToAShare(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { dead.Close() })
	local := brokertest.Embedded(t).Client()
	clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
	q := NewQuota(QuotaConfig{Limit: 60, ProjectLimit: 9, Window: time.Minute, Now: clock.Now,
		Fallback: local, Share: func() int { return 3 }}, dead)
	ctx := context.Background()
	granted := 0
	for i := range 5 {
		g, err := q.Acquire(ctx, "a1", "form-"+string(rune('a'+i)))
		if err != nil {
			t.Fatalf("acquire %d with the fleet's Redis down: %v; want it counted in the fallback", i, err)
		}
		if g.OK {
			granted++
			if err := q.Settle(ctx, "a1", g); err != nil {
				t.Fatalf("settle in the fallback: %v", err)
			}
		}
		clock.Add(time.Millisecond)
	}
	if granted != 3 {
		t.Errorf("granted %d calls with the fleet's Redis down; want the share, 9/3 = 3", granted)
	}
	if !q.FleetDown() {
		t.Error("FleetDown is false after the fleet's Redis failed")
	}
	u, err := q.Usage(ctx, "a1")
	if err != nil || u.ProjectLimit != 3 || u.ProjectUsed != 3 || !u.FleetDown {
		t.Errorf("usage in the fallback: %+v, %v; want the project's share, 3 of 3, FleetDown", u, err)
	}
	if n, err := local.ZCard(ctx, q.quotaKeys("")[0]).Result(); err != nil || n != 3 {
		t.Errorf("the fallback's project log holds %d calls (%v); want 3", n, err)
	}
}

// TestQuotaFleetUsesTheFleet: with a fleet's Redis that answers, the calls
// are counted there, with the project's whole limit, and the fallback
// holds nothing.
func TestQuotaFleetUsesTheFleet(t *testing.T) {
	t.Parallel()
	fleet, local := brokertest.Embedded(t).Client(), brokertest.Embedded(t).Client()
	clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
	q := NewQuota(QuotaConfig{Limit: 60, ProjectLimit: 9, Window: time.Minute, Now: clock.Now,
		Fallback: local, Share: func() int { return 3 }}, fleet)
	ctx := context.Background()
	for i := range 5 {
		if g, err := q.Acquire(ctx, "a1", "form-"+string(rune('a'+i))); err != nil || !g.OK {
			t.Fatalf("acquire %d: %+v, %v; want granted within the project's 9", i, g, err)
		}
		clock.Add(time.Millisecond)
	}
	if q.FleetDown() {
		t.Error("FleetDown with the fleet's Redis answering")
	}
	u, err := q.Usage(ctx, "a1")
	if err != nil || u.ProjectLimit != 9 || u.ProjectUsed != 5 || u.FleetDown {
		t.Errorf("usage: %+v, %v; want 5 of the project's 9", u, err)
	}
	if n, _ := local.ZCard(ctx, q.quotaKeys("")[0]).Result(); n != 0 {
		t.Errorf("the fallback holds %d calls; want none while the fleet answers", n)
	}
}
