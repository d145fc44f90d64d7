package google

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"mailroom/internal/googlefake"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

// testClock is a settable clock.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newBudget(t *testing.T, b *broker.Broker, cfg BudgetConfig) (*Budget, *testClock) {
	t.Helper()
	clk := &testClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	if cfg.Now == nil {
		cfg.Now = clk.Now
	}
	bud, err := NewBudget(cfg, b.Client())
	if err != nil {
		t.Fatal(err)
	}
	return bud, clk
}

func spend(t *testing.T, b *Budget, account string, units int, p Priority) Grant {
	t.Helper()
	g, err := b.TrySpend(context.Background(), account, units, p)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The window slides: units spent leave it a window later, never earlier,
// and a refusal names the wait until they do.
func TestBudgetSlidingWindow(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 100})
		if g := spend(t, bud, "a", 60, PriorityLive); !g.OK || g.Used != 60 {
			t.Fatalf("first spend: %+v", g)
		}
		clk.Advance(30 * time.Second)
		if g := spend(t, bud, "a", 40, PriorityLive); !g.OK {
			t.Fatalf("second spend (100 of 100): %+v", g)
		}
		g := spend(t, bud, "a", 5, PriorityLive)
		if g.OK {
			t.Fatal("a spend over the limit was granted")
		}
		// The 60 units of 12:00:00 leave the window (a minute and the 1 s
		// margin) once all of their bucket has: at 12:01:02 at the latest.
		if g.Wait < 31*time.Second || g.Wait > 32*time.Second {
			t.Errorf("wait %s, want 31-32s", g.Wait)
		}
		clk.Advance(29 * time.Second) // 12:00:59: still inside
		if g := spend(t, bud, "a", 5, PriorityLive); g.OK {
			t.Fatal("granted before the first units left the window")
		}
		clk.Advance(g.Wait - 29*time.Second)
		if g := spend(t, bud, "a", 60, PriorityLive); !g.OK {
			t.Fatalf("after the wait: %+v", g)
		}
		if g := spend(t, bud, "b", 100, PriorityLive); !g.OK {
			t.Errorf("another account has a budget of its own: %+v", g)
		}
		u, err := bud.Usage(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if u.Used != 100 || u.Limit != 100 || u.Today != 260 {
			t.Errorf("usage = %+v, want 100 of 100, 260 today", u)
		}
	})
}

// Live work is served first: a share of the budget is kept for it, and
// while live work waits, reclassify and bulk wait behind it; reclassify
// goes before bulk.
func TestBudgetPriorities(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 1000, Pace: -1})
		// Bulk fills what it may: 1000 minus the 20 kept for live work.
		if g := spend(t, bud, "a", 980, PriorityBulk); !g.OK {
			t.Fatalf("bulk 980: %+v", g)
		}
		if g := spend(t, bud, "a", 5, PriorityBulk); g.OK {
			t.Fatal("bulk took the share kept for live work")
		}
		if g := spend(t, bud, "a", 5, PriorityLive); !g.OK {
			t.Fatalf("live refused with its share free: %+v", g)
		}
		// Live asks for more than is left: it waits, and so does every
		// lower priority until it is served.
		if g := spend(t, bud, "a", 50, PriorityLive); g.OK {
			t.Fatal("live over the limit granted")
		}
		clk.Advance(62 * time.Second)
		if g := spend(t, bud, "a", 5, PriorityReclassify); g.OK || g.Reason != refusalReasons[2] {
			t.Fatalf("reclassify went before waiting live work: %+v", g)
		}
		if g := spend(t, bud, "a", 50, PriorityLive); !g.OK {
			t.Fatalf("live after the window: %+v", g)
		}
		// Reclassify waits, then bulk waits behind it.
		if g := spend(t, bud, "a", 930, PriorityReclassify); !g.OK {
			t.Fatalf("reclassify 930: %+v", g)
		}
		if g := spend(t, bud, "a", 50, PriorityReclassify); g.OK {
			t.Fatal("reclassify over its cap granted")
		}
		if g := spend(t, bud, "a", 1, PriorityBulk); g.OK || g.Reason != refusalReasons[2] {
			t.Fatalf("bulk went before waiting reclassify work: %+v", g)
		}
	})
}

// pacedCaller asks for units as Spend does: once the pace refused it, it
// asks again with its turn reserved.
type pacedCaller struct {
	t        *testing.T
	b        *Budget
	account  string
	reserved bool
	due      time.Time // when a refused caller asks again
}

func (c *pacedCaller) spend(units int, p Priority) Grant {
	c.t.Helper()
	g, err := c.b.TrySpendReserved(context.Background(), c.account, units, p, c.reserved)
	if err != nil {
		c.t.Fatal(err)
	}
	c.reserved = !g.OK && g.Reserved
	if !g.OK {
		c.due = c.b.cfg.Now().Add(g.Wait)
	}
	return g
}

// A fresh account's work below live spends its first window at once
// (Google's sliding minute allows it; pacing it out cost the first sync
// most of a minute against Google's least time), all but the third kept
// for live work, which finds its units there all window long although
// nothing leaves the window before it has passed; the share shrinks with
// what is left of the window, so bulk work spends the rest of the window
// as it goes and not a minute later. Then, busy, the work
// spends whatever leaves the window at once, up to the cap below live,
// and never more than the limit in any window.
func TestBudgetFirstWindowSpendsAtOnce(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 6000, ProjectUnits: 1_200_000})
		c := &pacedCaller{t: t, b: bud, account: "a"}
		granted := 0
		for c.spend(20, PriorityBulk).OK {
			granted += 20
		}
		if granted < 3900 || granted > 4000 {
			t.Fatalf("a fresh account's bulk work took %d units at once, want about two thirds of 6,000 (the rest kept for live work)", granted)
		}
		// Live mail all window long: a new message a second (a read and a
		// label, 25 units) while bulk takes what the shrinking share frees.
		for i := range 59 {
			clk.Advance(time.Second)
			if g := spend(t, bud, "a", 25, PriorityLive); !g.OK {
				t.Fatalf("live work %d s into the first window: %+v, want its units at once", i+1, g)
			}
			took := false
			for c.spend(20, PriorityBulk).OK {
				took = true
			}
			u, err := bud.Usage(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			if share := 2000 * (59 - i) / 60; took && u.Used > 6000-share {
				t.Fatalf("%d s into the first window bulk work filled it to %d, past the %d kept for live work then", i+1, u.Used, share)
			}
		}
		if u, err := bud.Usage(context.Background(), "a"); err != nil || u.Used < 5800 {
			t.Fatalf("the first window ends holding %+v (%v), want it spent (5,800 or more)", u, err)
		}
		// The first burst leaves the window: bulk takes what it frees at
		// once, up to the cap below live (5,880), with live's units still
		// in the window.
		clk.Advance(2 * time.Second)
		again := 0
		for c.spend(20, PriorityBulk).OK {
			again += 20
		}
		u, err := bud.Usage(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if again < 3800 || u.Used > 5880 || u.Used < 5860 {
			t.Fatalf("a window on, bulk took %d units at once and the window holds %d, want the 3,900 or so freed and 5,860 to 5,880", again, u.Used)
		}
		// Busy, it keeps taking what leaves, never past the limit.
		for range 300 {
			clk.Advance(time.Second)
			spend(t, bud, "a", 25, PriorityLive)
			for c.spend(20, PriorityBulk).OK {
			}
			if u, err := bud.Usage(context.Background(), "a"); err != nil || u.Used > 6000 || u.Used < 5800 {
				t.Fatalf("busy, the window holds %+v (%v), want it full and within the limit", u, err)
			}
		}
	})
}

// The first burst's callers, refused, hand their tasks back and may come
// back late (the task engine runs other work first), as the burst leaves,
// more than a window after they last spent: the busy period goes on, and
// they take the whole window freed, not a first window's share again.
func TestBudgetBurstCallersComingBackStayBusy(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 6000, ProjectUnits: 1_200_000})
		c := &pacedCaller{t: t, b: bud, account: "a"}
		for c.spend(20, PriorityBulk).OK {
		}
		g, err := bud.trySpend(context.Background(), "a", 20, PriorityBulk, false, time.Millisecond)
		if err != nil || g.OK || g.Wait < 15*time.Second || g.Wait > 20*time.Second {
			t.Fatalf("bulk past its first window's share: %+v (%v), want a wait until the share has shrunk by a tenth of the window (18 s)", g, err)
		}
		clk.Advance(61500 * time.Millisecond) // the task engine brings it back late
		granted := 0
		for c.spend(20, PriorityBulk).OK {
			granted += 20
		}
		if granted < 5800 {
			t.Fatalf("coming back as the burst left, bulk took %d units, want the window freed (5,880)", granted)
		}
	})
}

// In a busy window the units that trickle out are live work's own, and
// live work takes them again: work below live that finds the window full
// is told to wait until a tenth of it frees, not for the next second's
// trickle, and a task handed back for that wait asks
// to come back a little early, to wait the rest in the task.
func TestBudgetBusyWindowWaitsForAUsefulShare(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 6000, ProjectUnits: 1_200_000, MaxWait: time.Second})
		c := &pacedCaller{t: t, b: bud, account: "a"}
		live := func() {
			if g := spend(t, bud, "a", 25, PriorityLive); !g.OK {
				t.Fatalf("live work: %+v", g)
			}
		}
		for c.spend(20, PriorityBulk).OK {
		}
		for range 60 {
			clk.Advance(time.Second)
			live()
			c.spend(20, PriorityBulk)
		}
		clk.Advance(2 * time.Second)
		for c.spend(20, PriorityBulk).OK { // the burst left: bulk fills the window
		}
		clk.Advance(time.Second)
		live()
		g, err := bud.trySpend(context.Background(), "a", 20, PriorityBulk, false, time.Millisecond)
		if err != nil || g.OK || g.Wait < 5*time.Second {
			t.Fatalf("bulk in a full busy window: %+v (%v), want the wait until a tenth of the window frees, not the next trickle", g, err)
		}
		ctx := WithPriority(context.Background(), PriorityBulk)
		err = bud.Spend(ctx, "a", 20)
		if d, limited := RetryAfter(err); !limited || d < g.Wait-3*time.Second || d > g.Wait-time.Second {
			t.Fatalf("handed back for %s: %v (retry after %s), want to come back about 2 s early", g.Wait, err, d)
		}
		// A tenth of the window (600 units below the cap of 5,880) is free
		// when the wait is over, and not a second and a half before.
		free := func() int {
			u, err := bud.Usage(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			return 5880 - u.Used
		}
		clk.Advance(g.Wait - 1500*time.Millisecond)
		if f := free(); f >= 600 {
			t.Fatalf("%d units free 1.5 s before the wait of %s is over: the wait was longer than a tenth of the window's", f, g.Wait)
		}
		clk.Advance(1500 * time.Millisecond)
		if f := free(); f < 600 {
			t.Fatalf("%d units free when the wait of %s is over, want a tenth of the window (600)", f, g.Wait)
		}
	})
}

// A busy period ends when no work below live has asked for a whole
// window: the next one keeps live work's share in its first window again.
func TestBudgetIdleAccountKeepsLiveShareAgain(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 1000, ProjectUnits: 100_000})
		c := &pacedCaller{t: t, b: bud, account: "a"}
		for c.spend(10, PriorityBulk).OK {
		}
		g := c.spend(10, PriorityBulk) // the first window's share: refused
		if g.OK || g.Reason != refusalReasons[3] || g.Wait <= 0 || g.Wait > 20*time.Second {
			t.Fatalf("bulk in its first window past the share: %+v, want the wait until the share has shrunk by a tenth", g)
		}
		clk.Advance(2 * time.Minute)
		granted := 0
		for c.spend(10, PriorityBulk).OK {
			granted += 10
		}
		if granted < 650 || granted > 670 {
			t.Fatalf("after an idle window bulk took %d units at once, want two thirds of 1,000", granted)
		}
	})
}

// Accounts that share a binding project budget spend it evenly too: at
// most a pace ahead of the project's rate, so no account takes the
// project's window at once, the accounts progress together, and live work
// finds units while bulk work keeps the project's window full.
func TestBudgetProjectPacing(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 6000, ProjectUnits: 1000})
		callers := make([]*pacedCaller, 10)
		for i := range callers {
			callers[i] = &pacedCaller{t: t, b: bud, account: fmt.Sprintf("acct%d", i)}
		}
		// round lets every account whose turn is due ask, in a random order
		// (callers race), until the budget says wait; it returns the units
		// granted to each.
		rnd := rand.New(rand.NewPCG(1, 2))
		round := func() []int {
			got := make([]int, len(callers))
			for _, i := range rnd.Perm(len(callers)) {
				c := callers[i]
				if clk.Now().Before(c.due) {
					continue
				}
				for c.spend(10, PriorityBulk).OK {
					got[i] += 10
				}
			}
			return got
		}
		first := round()
		// From idle, work below live may take two leads' worth at once (a
		// pause of up to a lead is made up, and it may run a lead ahead): a
		// lead is a tenth of the pace, so about 20 of the project's 980.
		if slices.Max(first) > 40 || slices.Max(first) == 0 {
			t.Fatalf("from idle the accounts took %v units at once; want about a fiftieth of the project's 980 in all", first)
		}
		g, err := bud.trySpend(context.Background(), "acct0", 10, PriorityBulk, false, time.Millisecond)
		if err != nil || g.OK || g.Reason != refusalReasons[reasonProjectPace] || g.Wait > 7*time.Second {
			t.Fatalf("bulk past the project's pace: %+v, want a project pacing wait of at most the pace", g)
		}
		if g := spend(t, bud, "acct9", 20, PriorityLive); !g.OK {
			t.Fatalf("live work is not paced by the project: %+v", g)
		}
		total := make([]int, len(callers)) // after the first round
		for range 1500 {
			clk.Advance(100 * time.Millisecond)
			for i, n := range round() {
				total[i] += n
			}
			if u, err := bud.Usage(context.Background(), "acct0"); err != nil || u.ProjectUsed > 1000 {
				t.Fatalf("the project's window holds %+v (%v), over its 1000", u, err)
			}
		}
		// 2.5 windows of paced work: about 2,450 units, shared out.
		lo, hi, sum := slices.Min(total), slices.Max(total), 0
		for _, n := range total {
			sum += n
		}
		if sum < 2200 || sum > 2800 {
			t.Fatalf("the accounts spent %d units in 2.5 windows of a 1000-unit project (each: %v), want about 2,450", sum, total)
		}
		if hi-lo > 40 {
			t.Fatalf("the accounts did not progress together: %v (spread %d units)", total, hi-lo)
		}
	})
}

// A call's units are stamped again when Google has answered (Settle):
// Google counted the call between the grant and the answer, so the units
// leave the budget's window no earlier than Google's, with no margin, even
// when the call waited long for an in-flight slot.
func TestBudgetSettleRestampsUnits(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 100, ProjectUnits: 1000, Pace: -1})
		g := spend(t, bud, "a", 100, PriorityLive)
		if !g.OK {
			t.Fatal(g)
		}
		clk.Advance(5500 * time.Millisecond) // the answer came 5.5 s later
		if err := bud.Settle(context.Background(), "a", 100, g.At); err != nil {
			t.Fatal(err)
		}
		clk.Advance(56 * time.Second) // 61.5 s after the grant, 56 after the answer
		if g := spend(t, bud, "a", 1, PriorityLive); g.OK {
			t.Fatal("the units left the window a minute after the grant, before Google's count of them (at the answer) had")
		}
		u, err := bud.Usage(context.Background(), "a")
		if err != nil || u.Used != 100 || u.ProjectUsed != 100 {
			t.Fatalf("usage %+v (%v): want the 100 units in the account's and the project's window", u, err)
		}
		clk.Advance(5 * time.Second) // a minute and a bucket after the answer
		if g := spend(t, bud, "a", 100, PriorityLive); !g.OK {
			t.Fatalf("a minute after the answer: %+v", g)
		}
		// A call answered in the bucket it was granted in writes nothing.
		if err := bud.Settle(context.Background(), "a", 100, clk.Now()); err != nil {
			t.Fatal(err)
		}
		if u, _ := bud.Usage(context.Background(), "a"); u.Used != 100 {
			t.Fatalf("usage %+v after a settle in the same bucket, want 100", u)
		}
	})
}

// A refusal from Google shrinks the account's budget to 90% of what it
// spent and blocks it until Google's retry time; it grows back over
// Recover. A project refusal shrinks the project's.
func TestBudgetAdaptsToGoogle(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 1000, ProjectUnits: 10_000})
		if g := spend(t, bud, "a", 500, PriorityLive); !g.OK {
			t.Fatal(g)
		}
		if err := bud.Refused(ctx, "a", ScopeAccount, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if g := spend(t, bud, "a", 1, PriorityLive); g.OK || g.Wait != 10*time.Second {
			t.Fatalf("inside Google's retry time: %+v", g)
		}
		clk.Advance(10 * time.Second)
		u, _ := bud.Usage(ctx, "a")
		// 450 at the refusal, growing by e every 10 minutes: 457 after 10 s.
		if u.Limit < 450 || u.Limit > 460 {
			t.Fatalf("limit after the refusal = %d, want about 457", u.Limit)
		}
		if g := spend(t, bud, "a", 100, PriorityLive); g.OK {
			t.Fatal("spent past the shrunk limit")
		}
		clk.Advance(5 * time.Minute)
		if u, _ := bud.Usage(ctx, "a"); u.Limit < 740 || u.Limit > 770 {
			t.Errorf("limit 5 minutes later = %d, want about 450 × e^(310s/10min) = 754", u.Limit)
		}
		clk.Advance(10 * time.Minute)
		if u, _ := bud.Usage(ctx, "a"); u.Limit != 1000 {
			t.Errorf("limit later = %d, want the setting 1000 (and no more)", u.Limit)
		}
		// The project: another account's refusal names the project.
		if g := spend(t, bud, "b", 900, PriorityLive); !g.OK {
			t.Fatal(g)
		}
		if err := bud.Refused(ctx, "b", ScopeProject, time.Second); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		if u, _ := bud.Usage(ctx, "c"); u.ProjectLimit > 900 {
			t.Errorf("project limit after a project refusal = %d, want at most 900", u.ProjectLimit)
		}
	})
}

// An account that spent before a restart, whose budget the broker lost,
// resumes at half its setting, not at full.
func TestBudgetResumesConservatively(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 1000})
		if err := bud.Resume(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if g := spend(t, bud, "a", 400, PriorityLive); !g.OK {
			t.Fatalf("400 of half the setting: %+v", g)
		}
		if g := spend(t, bud, "a", 200, PriorityLive); g.OK || g.Limit != 500 {
			t.Fatalf("a resumed account spent more than half its setting: %+v", g)
		}
		// A budget the broker still holds is kept as it is.
		clk.Advance(10 * time.Minute)
		if g := spend(t, bud, "b", 900, PriorityLive); !g.OK {
			t.Fatal(g)
		}
		if err := bud.Resume(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if u, _ := bud.Usage(ctx, "b"); u.Used != 900 || u.Limit != 1000 {
			t.Errorf("resume changed a held budget: %+v", u)
		}
	})
}

// With the broker's loss hook (queue.Watch.SpentUntil), a window the
// broker lost counts as fully spent until the hook's time, for every
// account, priority and the project; then the budget spends its full
// setting at once (the window is empty), and Resume changes nothing.
func TestBudgetLostWindowCountsAsSpent(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		var lostAt time.Time
		var asked time.Duration
		cfg := BudgetConfig{UserUnits: 1000, Window: time.Minute, SpentUntil: func(w time.Duration) time.Time {
			asked = w
			return lostAt.Add(w)
		}}
		bud, clk := newBudget(t, b, cfg)
		lostAt = clk.Now().Add(-10 * time.Second)
		if err := bud.Resume(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []Priority{PriorityLive, PriorityReclassify, PriorityBulk} {
			g := spend(t, bud, "a", 1, p)
			want := 50 * time.Second // the loss plus Google's minute (no margin: see Settle)
			if g.OK || g.Wait != want || g.Reason != reasonLost {
				t.Fatalf("%s call right after the loss: %+v, want refused for %s (%s)", p, g, want, reasonLost)
			}
		}
		if asked != time.Minute {
			t.Errorf("asked for a window of %s, want the budget's (Google's minute)", asked)
		}
		if u, _ := bud.Usage(ctx, "a"); u.LostUntil.IsZero() {
			t.Errorf("Usage does not say the window counts as spent: %+v", u)
		}
		clk.Advance(50 * time.Second)
		if g := spend(t, bud, "a", 980, PriorityLive); !g.OK || g.Limit != 1000 {
			t.Fatalf("after the lost window: %+v, want the full setting", g)
		}
		if u, _ := bud.Usage(ctx, "a"); !u.LostUntil.IsZero() {
			t.Errorf("Usage still says the window counts as spent: %+v", u)
		}
	})
}

// The last 2% of the project's window (at least 20 units) is kept for
// live work, as the account's is: a project whose window work below live
// filled still serves a new message at once.
func TestBudgetProjectKeepsAShareForLive(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, _ := newBudget(t, b, BudgetConfig{UserUnits: 10_000, ProjectUnits: 1000, Pace: -1})
		if g := spend(t, bud, "a", 960, PriorityBulk); !g.OK {
			t.Fatalf("bulk under the project's cap: %+v", g)
		}
		if g := spend(t, bud, "b", 30, PriorityReclassify); g.OK || g.Reason != refusalReasons[reasonProject] {
			t.Fatalf("work below live into the project's share kept for live work: %+v", g)
		}
		if g := spend(t, bud, "b", 40, PriorityLive); !g.OK {
			t.Fatalf("live work in the project's share kept for it: %+v", g)
		}
		if g := spend(t, bud, "c", 1, PriorityLive); g.OK || g.Reason != refusalReasons[reasonProject] {
			t.Fatalf("over the project's limit: %+v", g)
		}
	})
}

// Through the adapter, against the strict emulator: calls wait for the
// budget instead of being refused by Google, every unit the emulator
// counts was spent from the budget, and a long wait hands the task back
// as rate limited (no failure).
func TestGmailCallsSpendTheBudget(t *testing.T) {
	ctx := WithPriority(context.Background(), PriorityLive)
	fake := googlefake.StartForTest(t, googlefake.Options{GmailUserUnitsPerMinute: 30, GmailQuotaWindow: time.Second})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	reg := prometheus.NewRegistry()
	gm := budgetedGmail(t, fake, refresh, BudgetConfig{UserUnits: 30, Window: time.Second, MaxWait: 5 * time.Second, Registerer: reg})
	start := time.Now()
	for range 12 { // 60 units at 30 a second
		if _, err := gm.Labels(ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, err := gm.ListMessages(ctx, "", 10); err != nil {
			t.Fatal(err)
		}
		if _, _, err := gm.Profile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < time.Second {
		t.Errorf("84 units at 30 a second took %s: the budget did not hold them back", el)
	}
	if r := fake.Gmail.QuotaRefusals(ann); len(r) != 0 {
		t.Errorf("Google refused: %v", r)
	}
	spent := gathered(t, reg, "mailroom_gmail_quota_units_total")
	if got := fake.Gmail.QuotaUnits(ann); got != 84 || spent != 84 {
		t.Errorf("emulator counted %d units, the budget spent %v; want 84 each", got, spent)
	}
	// A call that cannot wait long enough is refused (its task is handed back).
	short, err := NewBudget(BudgetConfig{UserUnits: 1, Window: time.Minute, MaxWait: time.Millisecond}, brokertest.Embedded(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	c2 := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Budget: short})
	gm2, _ := c2.Gmail(ctx, "acc-1", c2.TokenSource(Token{RefreshToken: refresh}, nil))
	if _, err := gm2.Labels(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = gm2.Labels(ctx)
	if d, limited := RetryAfter(err); !limited || !errors.Is(err, ErrQuotaWait) || d < 50*time.Second {
		t.Errorf("second call: %v (wait %s), want a refusal (ErrQuotaWait) of about a minute", err, d)
	}
}

// A refusal by Google (the emulator's limit below the budget's) becomes a
// refusal (Refused) with Google's retry time and shrinks the budget.
func TestGmailRefusalShrinksTheBudget(t *testing.T) {
	ctx := WithPriority(context.Background(), PriorityLive)
	fake := googlefake.StartForTest(t, googlefake.Options{GmailUserUnitsPerMinute: 10})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	bud, err := NewBudget(BudgetConfig{UserUnits: 6000}, brokertest.Embedded(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Budget: bud, Registerer: reg})
	gm, _ := c.Gmail(ctx, "acc-1", c.TokenSource(Token{RefreshToken: refresh}, nil))
	for range 2 {
		if _, _, err := gm.ListMessages(ctx, "", 10); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err = gm.ListMessages(ctx, "", 10)
	d, limited := RetryAfter(err)
	if !limited || d < 50*time.Second || d > 61*time.Second {
		t.Fatalf("refused call: %v (wait %s), want refused until the emulator's window frees (~60s)", err, d)
	}
	if n := gatheredLabel(t, reg, "mailroom_google_rate_limited_total", "gmail"); n != 1 {
		t.Errorf("mailroom_google_rate_limited_total{api=gmail} = %v, want 1", n)
	}
	if n := gatheredLabel(t, reg, "mailroom_google_rate_limited_total", "sheets"); n != 0 {
		t.Errorf("mailroom_google_rate_limited_total{api=sheets} = %v, want 0 (and present)", n)
	}
	u, err := bud.Usage(ctx, "acc-1")
	if err != nil {
		t.Fatal(err)
	}
	if u.Limit > 60 || u.BlockedUntil.Before(time.Now().Add(50*time.Second)) {
		t.Errorf("usage after Google's refusal = %+v, want the limit shrunk (to 1%% of 6,000) and blocked ~60s", u)
	}
}

// gathered returns the value of the counter named in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}

// gatheredLabel returns the value of the counter named in reg whose only
// label has value v.
func gatheredLabel(t *testing.T, reg *prometheus.Registry, name, v string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == v {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{%s}", name, v)
	return 0
}

// A call Google refused for quota, with a short retry time, is made again
// in its task once the shrunk budget lets it: the caller sees no error.
func TestGmailRefusedCallIsMadeAgain(t *testing.T) {
	ctx := WithPriority(context.Background(), PriorityLive)
	fake := googlefake.StartForTest(t, googlefake.Options{GmailUserUnitsPerMinute: 10, GmailQuotaWindow: time.Second})
	const ann = "ann@example.com"
	refresh := fake.AddAccount(ann)
	bud, err := NewBudget(BudgetConfig{Window: time.Second}, brokertest.Embedded(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Budget: bud})
	gm, _ := c.Gmail(ctx, "acc-1", c.TokenSource(Token{RefreshToken: refresh}, nil))
	for i := range 4 {
		if _, _, err := gm.ListMessages(ctx, "", 10); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if r := fake.Gmail.QuotaRefusals(ann)[googlefake.ReasonUserRateLimit]; r == 0 {
		t.Error("Google refused nothing: the test did not reach its limit")
	}
	if got := fake.Gmail.QuotaUnits(ann); got != 20 {
		t.Errorf("Google counted %d units, want the 4 calls' 20", got)
	}
}

// A wait too long for the task names its cause: the project's window
// (ErrProjectQuotaWait, which is an ErrQuotaWait) or the account's own
// budget (ErrQuotaWait alone).
func TestBudgetProjectWaitIsNamed(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, _ := newBudget(t, b, BudgetConfig{UserUnits: 100, ProjectUnits: 150, MaxWait: time.Millisecond, Pace: -1})
		ctx := WithPriority(context.Background(), PriorityBulk)
		if err := bud.Spend(ctx, "a", 60); err != nil {
			t.Fatal(err)
		}
		err := bud.Spend(ctx, "a", 60) // past a's 100 (less the live reserve)
		if _, limited := RetryAfter(err); !limited || !errors.Is(err, ErrQuotaWait) || errors.Is(err, ErrProjectQuotaWait) {
			t.Fatalf("a over its own budget: %v", err)
		}
		if err := bud.Spend(ctx, "b", 60); err != nil {
			t.Fatal(err)
		}
		err = bud.Spend(ctx, "c", 60) // past the project's 150
		if _, limited := RetryAfter(err); !limited || !errors.Is(err, ErrProjectQuotaWait) || !errors.Is(err, ErrQuotaWait) {
			t.Fatalf("c over the project's budget: %v", err)
		}
	})
}

// An account's in-flight slots hold at most MaxInFlight calls, and are
// forgotten once no caller holds or waits for one (a process that has seen
// many accounts keeps no slots for the idle ones).
func TestBudgetInFlightSlots(t *testing.T) {
	bud, err := NewBudget(BudgetConfig{MaxInFlight: 2}, brokertest.Embedded(t).Client())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r1, err := bud.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := bud.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := bud.acquire(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third call of a with 2 in flight: %v, want to wait until its deadline", err)
	}
	rb, err := bud.acquire(ctx, "b")
	if err != nil {
		t.Fatalf("b waited for a's slots: %v", err)
	}
	rb()
	r1()
	r3, err := bud.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r2()
	r3()
	bud.mu.Lock()
	left := len(bud.inFlight)
	bud.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d accounts' slots kept with no call in flight, want 0", left)
	}
}

// interleave is a go-redis hook that runs during once, right after the
// first command moving units out of a bucket (HINCRBY of a negative count
// on a bucket log) that is not inside a MULTI: Redis may run another
// client's commands between two commands sent apart, or between those of
// a plain pipeline, so the hook does it here, every time. Commands of a
// MULTI ... EXEC pass as one.
type interleave struct {
	once   sync.Once
	during func(ctx context.Context)
}

type interleaving struct{}

func (h *interleave) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *interleave) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(ctx, cmd)
		return err
	}
}

func (h *interleave) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() == "multi" || ctx.Value(interleaving{}) != nil {
			return next(ctx, cmds)
		}
		var first error
		for i := range cmds {
			if err := next(ctx, cmds[i:i+1]); err != nil && first == nil {
				first = err
			}
			h.after(ctx, cmds[i])
		}
		return first
	}
}

func (h *interleave) after(ctx context.Context, cmd redis.Cmder) {
	args := cmd.Args()
	if ctx.Value(interleaving{}) != nil || cmd.Name() != "hincrby" || len(args) != 4 ||
		!strings.HasSuffix(fmt.Sprint(args[1]), ":b") || !strings.HasPrefix(fmt.Sprint(args[3]), "-") {
		return
	}
	h.once.Do(func() { h.during(context.WithValue(ctx, interleaving{}, true)) })
}

// Settle moves a call's units out of the bucket of its grant and into the
// bucket of its answer, for the account and the project, in one MULTI: a
// spend between the two moves would find the units in neither bucket and
// be granted too many. The hook lets another worker's spend of the same
// account run between any two commands Settle sends apart; the window
// must still never hold more than the limit.
func TestBudgetSettleIsAtomic(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		cfg := BudgetConfig{UserUnits: 100, ProjectUnits: 1000, Pace: -1}
		bud, clk := newBudget(t, b, cfg)
		cfg.Now = clk.Now
		other, err := NewBudget(cfg, b.Client()) // another worker's
		if err != nil {
			t.Fatal(err)
		}
		var between *Grant
		b.Client().AddHook(&interleave{during: func(ctx context.Context) {
			g, err := other.TrySpend(ctx, "a", 100, PriorityLive)
			if err != nil {
				t.Error(err)
			}
			between = &g
		}})
		g := spend(t, bud, "a", 100, PriorityLive)
		if !g.OK {
			t.Fatal(g)
		}
		clk.Advance(5 * time.Second) // Google answered 5 s later: another bucket
		if err := bud.Settle(ctx, "a", 100, g.At); err != nil {
			t.Fatal(err)
		}
		if between != nil && between.OK {
			t.Errorf("a spend between Settle's moves was granted 100 units while the window held the settled call's 100: %+v", *between)
		}
		if u, err := bud.Usage(ctx, "a"); err != nil || u.Used != 100 || u.ProjectUsed != 100 {
			t.Fatalf("usage after the settle: %+v (%v); want the call's 100 units only, in the account's and the project's window", u, err)
		}
		if g := spend(t, other, "a", 100, PriorityLive); g.OK {
			t.Fatalf("another 100 units granted after the settle: %+v", g)
		}
	})
}

// Every shape in which Google refuses a Gmail call for quota, through the
// adapter against the emulator's fault in that shape: a refusal of the
// user shrinks and blocks that account only, however many accounts are
// refused so; a refusal of the calls in flight blocks the account and
// shrinks nothing; a refusal that names no scope is charged to the account
// alone, and to the project (every account blocked, the project's budget
// shrunk) once a second account is refused the same way within the
// window. Google's retry time (Retry-After, or the time in its message)
// is the wait in every case.
func TestBudgetRefusalShapes(t *testing.T) {
	const (
		account = iota
		concurrent
		unscoped
	)
	scope := map[googlefake.RefusalShape]int{
		googlefake.RefusalUserDocumented:    account,
		googlefake.RefusalQueriesPerUser:    account,
		googlefake.RefusalTotalQueryCost:    account,
		googlefake.RefusalUserRateRetry:     account,
		googlefake.RefusalResourceExhausted: unscoped,
		googlefake.RefusalProject:           unscoped,
		googlefake.RefusalConcurrent:        concurrent,
	}
	const retry = 7 * time.Second
	for _, shape := range googlefake.RefusalShapes() {
		want, ok := scope[shape]
		if !ok {
			t.Fatalf("no expectation for the shape %s", shape)
		}
		t.Run(string(shape), func(t *testing.T) {
			brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
				ctx := WithPriority(context.Background(), PriorityLive)
				fake := googlefake.StartForTest(t, googlefake.Options{})
				const ann, bob = "ann@example.com", "bob@example.com"
				refresh := map[string]string{ann: fake.AddAccount(ann), bob: fake.AddAccount(bob)}
				bud, err := NewBudget(BudgetConfig{UserUnits: 1000, ProjectUnits: 100_000, MaxWait: time.Second}, b.Client())
				if err != nil {
					t.Fatal(err)
				}
				c := New(Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1, Budget: bud})
				gm := map[string]*Gmail{}
				for _, who := range []string{ann, bob} {
					if gm[who], err = c.Gmail(ctx, who, c.TokenSource(Token{RefreshToken: refresh[who]}, nil)); err != nil {
						t.Fatal(err)
					}
					if _, err := gm[who].Labels(ctx); err != nil {
						t.Fatal(err)
					}
				}
				// refuse makes Google refuse who's next call in the shape and
				// checks the answer is refused for Google's retry time.
				refuse := func(who string) {
					t.Helper()
					if _, err := fake.InjectFault(googlefake.Fault{Account: who, Refusal: shape, RetryAfter: retry, Times: 1}); err != nil {
						t.Fatal(err)
					}
					_, err := gm[who].Labels(ctx)
					if d, limited := RetryAfter(err); !limited || d < retry-2*time.Second || d > retry {
						t.Fatalf("%s refused in the shape %s: %v (wait %s), want refused for Google's %s", who, shape, err, d, retry)
					}
				}
				usage := func(who string) Usage {
					t.Helper()
					u, err := bud.Usage(ctx, who)
					if err != nil {
						t.Fatal(err)
					}
					return u
				}
				blocked := func(u Usage) bool {
					left := time.Until(u.BlockedUntil)
					return left > retry-2*time.Second && left <= retry
				}
				refuse(ann)
				a, o := usage(ann), usage(bob)
				if want == concurrent && (a.Limit != 1000 || !blocked(a)) {
					t.Errorf("ann after too many calls in flight: %+v, want her budget whole and her calls blocked for %s", a, retry)
				}
				if want != concurrent && (a.Limit >= 1000 || !blocked(a)) {
					t.Errorf("ann after her refusal: %+v, want her budget shrunk and her calls blocked for %s", a, retry)
				}
				if o.Limit != 1000 || o.ProjectLimit != 100_000 || !o.BlockedUntil.IsZero() {
					t.Errorf("bob after ann's refusal: %+v, want his budget and the project's at their settings, not blocked", o)
				}
				// Bob is refused the same way.
				refuse(bob)
				a, o = usage(ann), usage(bob)
				if want == unscoped {
					if o.ProjectLimit >= 100_000 || !blocked(a) || !blocked(o) {
						t.Errorf("after two accounts were refused naming no scope: ann %+v, bob %+v; want the project's budget shrunk and both blocked", a, o)
					}
					return
				}
				if o.ProjectLimit != 100_000 || !blocked(o) {
					t.Errorf("bob after his own refusal: %+v, want the project's budget at its setting and his calls blocked", o)
				}
				if want == account && o.Limit >= 1000 {
					t.Errorf("bob after his own refusal: %+v, want his budget shrunk", o)
				}
			})
		})
	}
}

// A refusal that names no scope is the account's, unless another account
// was refused so within the window: then the project's. One account
// refused so again and again stays its own.
func TestBudgetUnscopedRefusals(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 1000, ProjectUnits: 100_000})
		refused := func(who string) (Usage, Usage) {
			t.Helper()
			spend(t, bud, who, 100, PriorityLive) // granted the first time
			if err := bud.Refused(ctx, who, ScopeUnscoped, time.Second); err != nil {
				t.Fatal(err)
			}
			u, err := bud.Usage(ctx, who)
			if err != nil {
				t.Fatal(err)
			}
			o, err := bud.Usage(ctx, "someone-else")
			if err != nil {
				t.Fatal(err)
			}
			return u, o
		}
		for range 3 {
			if u, o := refused("a"); u.Limit >= 1000 || o.ProjectLimit != 100_000 || !o.BlockedUntil.IsZero() {
				t.Fatalf("a refused again and again: a %+v, another %+v; want a's budget alone shrunk", u, o)
			}
			clk.Advance(2 * time.Second)
		}
		clk.Advance(time.Minute)
		if u, o := refused("b"); u.Limit >= 1000 || o.ProjectLimit != 100_000 {
			t.Fatalf("b refused a window after a: b %+v, another %+v; want b's budget alone shrunk", u, o)
		}
		clk.Advance(10 * time.Second)
		if u, o := refused("c"); u.Limit != 1000 || o.ProjectLimit >= 100_000 || o.BlockedUntil.IsZero() {
			t.Fatalf("c refused within b's window: c %+v, another %+v; want the project's budget shrunk and every account blocked, c's own untouched", u, o)
		}
	})
}

// A priority's waiting mark holds while its largest refused call waits: a
// smaller call of the same priority that still fits is served without
// taking the mark away (a thread-aware full sync mixes 10-unit
// threads.get with 5-unit messages.get; the one refused may have handed
// its task back, and the account's status must still say bulk work waits).
func TestBudgetWaitingMarkOutlivesSmallerGrants(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, _ := newBudget(t, b, BudgetConfig{UserUnits: 100, Pace: -1})
		// Bulk may spend 80 (20 are kept for live work).
		if g := spend(t, bud, "a", 72, PriorityBulk); !g.OK {
			t.Fatalf("bulk 72: %+v", g)
		}
		if g := spend(t, bud, "a", 10, PriorityBulk); g.OK {
			t.Fatalf("bulk 10 past the cap granted: %+v", g)
		}
		if g := spend(t, bud, "a", 5, PriorityBulk); !g.OK {
			t.Fatalf("bulk 5 within the cap: %+v", g)
		}
		u, err := bud.Usage(context.Background(), "a")
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(u.Waiting, PriorityBulk) {
			t.Errorf("waiting %v after a smaller grant, want bulk still waiting", u.Waiting)
		}
		// A call as large as the one refused, served, ends the wait.
		bud2, clk := newBudget(t, b, BudgetConfig{UserUnits: 100, Pace: -1})
		if g := spend(t, bud2, "b", 72, PriorityBulk); !g.OK {
			t.Fatalf("bulk 72: %+v", g)
		}
		if g := spend(t, bud2, "b", 10, PriorityBulk); g.OK {
			t.Fatal("bulk 10 past the cap granted")
		}
		clk.Advance(62 * time.Second)
		if g := spend(t, bud2, "b", 10, PriorityBulk); !g.OK {
			t.Fatalf("bulk 10 after the window: %+v", g)
		}
		if u, err := bud2.Usage(context.Background(), "b"); err != nil || len(u.Waiting) != 0 {
			t.Errorf("waiting %v (%v) after the refused call's size was served, want none", u.Waiting, err)
		}
	})
}

// The account's status says work waits for as long as a refused call
// was told to wait, even when another call of its priority is served
// meanwhile: the one refused may sleep in its queue, its task handed
// back, while a later one fits in the units that trickle out (before, the
// status came and went between calls' turns).
func TestBudgetWaitingLastsTheRefusedCallsWait(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		bud, clk := newBudget(t, b, BudgetConfig{UserUnits: 1000, ProjectUnits: 1_000_000})
		waiting := func() bool {
			t.Helper()
			u, err := bud.Usage(context.Background(), "a")
			if err != nil {
				t.Fatal(err)
			}
			return slices.Contains(u.Waiting, PriorityBulk)
		}
		for range 30 { // live work, 10 units a second for 30 s
			if g := spend(t, bud, "a", 10, PriorityLive); !g.OK {
				t.Fatalf("live: %+v", g)
			}
			clk.Advance(time.Second)
		}
		for spend(t, bud, "a", 20, PriorityBulk).OK { // a full sync's first burst
		}
		refused := spend(t, bud, "a", 20, PriorityBulk)
		if refused.OK || refused.Wait < 10*time.Second {
			t.Fatalf("bulk past its first window's share: %+v, want a wait until the share has shrunk by a tenth of the window", refused)
		}
		until := clk.Now().Add(refused.Wait)
		clk.Advance(3 * time.Second) // the share has shrunk by 17 units
		if g := spend(t, bud, "a", 20, PriorityBulk); !g.OK {
			t.Fatalf("bulk that fits the trickle: %+v", g)
		}
		if !waiting() {
			t.Errorf("%s before the refused call's wait is over, another served: the status says bulk work no longer waits", until.Sub(clk.Now()))
		}
		clk.Advance(until.Sub(clk.Now()) + 3*time.Second)
		if waiting() {
			t.Error("bulk work still shown waiting after the refused call's wait is over, none refused since")
		}
	})
}

// A call waiting in its task for budget waits through BudgetConfig.Wait
// (the app gives the queue's, which hands the task back when its queue
// stops), and the wait's error comes back as it is; without one, a timer
// that ctx ends.
func TestSpendWaitsThroughTheWaitHook(t *testing.T) {
	t.Parallel()
	errStop := errors.New("the queue stops")
	var waited []time.Duration
	hook := func(_ context.Context, d time.Duration) error {
		waited = append(waited, d)
		return errStop
	}
	b := brokertest.Embedded(t)
	bud, _ := newBudget(t, b, BudgetConfig{UserUnits: 100, Pace: -1, MaxWait: 2 * time.Minute, Wait: hook})
	ctx := WithPriority(context.Background(), PriorityLive)
	if err := bud.Spend(ctx, "a", 100); err != nil {
		t.Fatal(err)
	}
	if err := bud.Spend(ctx, "a", 1); !errors.Is(err, errStop) || len(waited) != 1 || waited[0] <= 0 {
		t.Fatalf("spend over the window: %v after waits %v, want the hook's error after one wait", err, waited)
	}
	plain, _ := newBudget(t, b, BudgetConfig{UserUnits: 100, Pace: -1, MaxWait: 2 * time.Minute})
	if err := plain.Spend(ctx, "b", 100); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := plain.Spend(cctx, "b", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("spend over the window without a hook: %v, want ctx's error", err)
	}
}
