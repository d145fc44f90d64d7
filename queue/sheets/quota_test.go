package sheets

import (
	"context"
	"sync"
	"testing"
	"time"

	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

// fakeClock is a settable clock for the quota's unit tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestQuotaSlidingWindow(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
		q := NewQuota(QuotaConfig{Limit: 3, Window: time.Second, Margin: 100 * time.Millisecond, Now: clock.Now}, b.Client())
		for i := range 3 {
			g, err := q.Acquire(ctx, "acct", "f1")
			if err != nil || !g.OK || g.Used != i+1 {
				t.Fatalf("call %d: %+v %v", i, g, err)
			}
			clock.Add(100 * time.Millisecond)
		}
		// At +300ms the window (1.1s) holds 3 calls: refused until the
		// first leaves it at +1100ms.
		g, err := q.Acquire(ctx, "acct", "f1")
		if err != nil || g.OK || g.Wait != 800*time.Millisecond {
			t.Fatalf("fourth call: %+v %v, want a refusal with 800ms wait", g, err)
		}
		// Another account has its own quota.
		if g, err := q.Acquire(ctx, "other", "f9"); err != nil || !g.OK {
			t.Fatalf("other account: %+v %v", g, err)
		}
		use, err := q.Usage(ctx, "acct")
		if err != nil || use.Used != 3 || use.Limit != 3 || use.Waiting != 1 {
			t.Fatalf("usage %+v %v", use, err)
		}
		clock.Add(800 * time.Millisecond)
		if g, err := q.Acquire(ctx, "acct", "f1"); err != nil || !g.OK {
			t.Fatalf("after the wait: %+v %v", g, err)
		}
		// Never more than Limit calls in any window: hammer it.
		var granted []time.Time
		for range 400 {
			clock.Add(13 * time.Millisecond)
			g, err := q.Acquire(ctx, "acct", "f1")
			if err != nil {
				t.Fatal(err)
			}
			if g.OK {
				granted = append(granted, clock.Now())
			}
		}
		for i := 3; i < len(granted); i++ {
			if d := granted[i].Sub(granted[i-3]); d < 1100*time.Millisecond {
				t.Fatalf("4 calls within %s", d)
			}
		}
		if len(granted) < 12 {
			t.Fatalf("only %d grants in 5.2s at 3 per 1.1s", len(granted))
		}
	})
}

// TestQuotaFairness: a busy form that always has another batch cannot
// starve a quiet form of the same account: once the quiet form waits, it
// gets the next free slot, and waiters are served oldest first.
func TestQuotaFairness(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
		q := NewQuota(QuotaConfig{Limit: 2, Window: time.Second, Margin: time.Millisecond, Grace: 500 * time.Millisecond, Now: clock.Now}, b.Client())
		acquire := func(form string) Grant {
			t.Helper()
			g, err := q.Acquire(ctx, "acct", form)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		if !acquire("busy").OK || !acquire("busy").OK {
			t.Fatal("the first two calls were refused")
		}
		clock.Add(10 * time.Millisecond)
		quiet := acquire("quiet")
		third := acquire("third")
		if quiet.OK || third.OK {
			t.Fatal("granted over the limit")
		}
		// quiet is first in line: served when the first call leaves;
		// third when the second leaves.
		if quiet.Wait != 991*time.Millisecond || third.Wait != 991*time.Millisecond {
			t.Fatalf("waits %s %s", quiet.Wait, third.Wait)
		}
		clock.Add(quiet.Wait)
		// The busy form comes back first, but both waiters are ahead of it.
		if g := acquire("busy"); g.OK {
			t.Fatal("busy form jumped the line")
		}
		if !acquire("quiet").OK {
			t.Fatal("quiet form not served at its turn")
		}
		if !acquire("third").OK {
			t.Fatal("third form not served at its turn")
		}
		if g := acquire("busy"); g.OK {
			t.Fatal("busy form served over the limit")
		}

		// A waiter that never comes back loses its place after Grace.
		clock.Add(2 * time.Second)
		if !acquire("x").OK || !acquire("x").OK {
			t.Fatal("fresh window refused")
		}
		ghost := acquire("ghost")
		if ghost.OK {
			t.Fatal("ghost granted over the limit")
		}
		clock.Add(ghost.Wait + 600*time.Millisecond)
		if !acquire("late").OK {
			t.Fatal("a vanished waiter still holds its slot after the grace")
		}
	})
}

// TestQuotaProjectLevel: a call is granted only when both the account's
// and the project's budgets allow it; accounts take turns for the
// project's budget (the account that waited first is served first, even
// when another comes back sooner), and reads and writes count apart.
func TestQuotaProjectLevel(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
		// A lead of a whole window: the project's pace never binds here
		// (TestQuotaProjectPace tests it).
		cfg := QuotaConfig{Limit: 2, ProjectLimit: 3, Window: time.Second, Margin: time.Millisecond, Grace: 500 * time.Millisecond,
			Lead: time.Second, Now: clock.Now}
		writes := NewQuota(cfg, b.Client())
		cfg.Kind = "reads"
		reads := NewQuota(cfg, b.Client())
		acquire := func(q *Quota, account, form string) Grant {
			t.Helper()
			g, err := q.Acquire(ctx, account, form)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		for i, acct := range []string{"a", "a", "b"} { // at 0, 100 and 200ms
			if i > 0 {
				clock.Add(100 * time.Millisecond)
			}
			if !acquire(writes, acct, "f"+acct).OK {
				t.Fatalf("write %d refused", i+1)
			}
		}
		// b has room of its own, the project has none until the first call
		// leaves the window (1001ms after it, at 1001ms).
		if g := acquire(writes, "b", "fb"); g.OK || g.Wait != 801*time.Millisecond {
			t.Fatalf("b over the project's budget: %+v, want a refusal of 801ms", g)
		}
		clock.Add(10 * time.Millisecond)
		if g := acquire(writes, "c", "fc"); g.OK {
			t.Fatal("c jumped the project's line")
		}
		// Reads are counted apart.
		if !acquire(reads, "b", "fb").OK {
			t.Fatal("a read refused for the writes' budget")
		}
		use, err := writes.Usage(ctx, "b")
		if err != nil || use.Used != 1 || use.ProjectUsed != 3 || use.ProjectLimit != 3 {
			t.Fatalf("usage %+v %v", use, err)
		}
		// One slot frees at 1001ms: b waited first, so c waits for the next.
		clock.Add(791 * time.Millisecond)
		if g := acquire(writes, "c", "fc"); g.OK {
			t.Fatal("c served before b, who waited first")
		}
		if !acquire(writes, "b", "fb").OK {
			t.Fatal("b not served at its turn")
		}
		if g := acquire(writes, "a", "fa"); g.OK {
			t.Fatal("a served over the project's budget")
		}
	})
}

// TestQuotaProjectPace: the project's calls are spread over its window
// at its rate, at most Lead ahead of it, so its slots free one at a time
// and waiting accounts are served in turn, the one that waited first
// first: no burst of freed slots goes to whoever comes back first.
func TestQuotaProjectPace(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
		// 10 calls a second (the window and its margin) for the project:
		// one each 100 ms, 100 ms ahead.
		q := NewQuota(QuotaConfig{Limit: 10, ProjectLimit: 10, Window: 999 * time.Millisecond, Margin: time.Millisecond, Grace: 500 * time.Millisecond,
			Lead: 100 * time.Millisecond, Now: clock.Now}, b.Client())
		acquire := func(account string) Grant {
			t.Helper()
			g, err := q.Acquire(ctx, account, "f"+account)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		// From idle: the call due now and the one a lead ahead.
		if !acquire("a").OK || !acquire("a").OK {
			t.Fatal("the first two calls were refused")
		}
		ga := acquire("a")
		gb := acquire("b")
		if ga.OK || gb.OK || ga.Wait != 100*time.Millisecond || gb.Wait != 200*time.Millisecond {
			t.Fatalf("past the pace: a %+v, b %+v; want waits of 100ms and 200ms, their turns in line", ga, gb)
		}
		for _, step := range []struct {
			after   time.Duration
			account string
			ok      bool
			fail    string
		}{
			{100 * time.Millisecond, "c", false, "c, new, jumped the line at a's turn"},
			{0, "a", true, "a not served at its turn"},
			{0, "a", false, "a served again before b's turn"},
			{100 * time.Millisecond, "b", true, "b not served at its turn"},
		} {
			clock.Add(step.after)
			if acquire(step.account).OK != step.ok {
				t.Fatal(step.fail)
			}
		}
		// Never more than the project's rate: over two seconds of every
		// account asking every 10 ms, about 10 calls a second.
		granted := 0
		for range 200 {
			clock.Add(10 * time.Millisecond)
			for _, acct := range []string{"a", "b", "c"} {
				if acquire(acct).OK {
					granted++
				}
			}
		}
		if granted < 18 || granted > 22 {
			t.Fatalf("%d calls granted in 2s at 10 a second", granted)
		}
	})
}

// TestQuotaResumesSpentAfterLoss: when the broker lost the quota's log
// (SpentUntil says so), the quota refuses every call, of reads as of
// writes, until one window after the loss, as if that window were fully
// spent, reports the window as full, and then trusts the broker again.
func TestQuotaResumesSpentAfterLoss(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
		lost := clock.Now().Add(-200 * time.Millisecond)
		var asked []time.Duration
		var mu sync.Mutex
		spent := func(window time.Duration) time.Time {
			mu.Lock()
			asked = append(asked, window)
			mu.Unlock()
			if until := lost.Add(window); until.After(clock.Now()) {
				return until
			}
			return time.Time{}
		}
		for _, kind := range []string{"writes", "reads"} {
			q := NewQuota(QuotaConfig{Kind: kind, Limit: 3, ProjectLimit: 10, Window: time.Second, Margin: 100 * time.Millisecond, Now: clock.Now, SpentUntil: spent}, b.Client())
			g, err := q.Acquire(ctx, "acct", "f1")
			if err != nil || g.OK || g.Wait != 900*time.Millisecond {
				t.Fatalf("%s right after the loss: %+v %v, want a refusal until one window (1.1s) after it", kind, g, err)
			}
			use, err := q.Usage(ctx, "acct")
			if err != nil || use.Used != 3 || use.ProjectUsed != 10 || !use.SpentUntil.Equal(lost.Add(1100*time.Millisecond)) {
				t.Fatalf("%s usage while spent: %+v %v", kind, use, err)
			}
		}
		mu.Lock()
		if len(asked) == 0 || asked[0] != 1100*time.Millisecond {
			t.Errorf("SpentUntil asked for windows %v, want the log's window with its margin, 1.1s", asked)
		}
		mu.Unlock()
		clock.Add(900 * time.Millisecond)
		q := NewQuota(QuotaConfig{Limit: 3, Window: time.Second, Margin: 100 * time.Millisecond, Now: clock.Now, SpentUntil: spent}, b.Client())
		for i := range 3 {
			if g, err := q.Acquire(ctx, "acct", "f1"); err != nil || !g.OK {
				t.Fatalf("call %d one window after the loss: %+v %v", i, g, err)
			}
		}
		if g, err := q.Acquire(ctx, "acct", "f1"); err != nil || g.OK {
			t.Fatalf("fourth call: %+v %v, want the broker's own count to refuse it", g, err)
		}
		if use, err := q.Usage(ctx, "acct"); err != nil || !use.SpentUntil.IsZero() || use.Used != 3 {
			t.Fatalf("usage after the window: %+v %v", use, err)
		}
	})
}
