package sheets

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
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

// TestQuotaProjectPace: near its limit, the project's calls are spread
// over its window at its rate, at most Lead ahead of it, so its slots free
// one at a time and waiting accounts are served in turn, the one that
// waited first first: no burst of freed slots goes to whoever comes back
// first. While the window has room beyond a lead's worth of calls, the
// pace does not bind: nobody waits for those slots, and spreading the
// calls would only delay a quiet account beside busy ones.
func TestQuotaProjectPace(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *broker.Broker) {
		ctx := context.Background()
		clock := &fakeClock{t: time.UnixMilli(1_900_000_000_000)}
		// 10 calls a second (the window and its margin) for the project:
		// near the limit, one each 100 ms, 300 ms (3 calls) ahead.
		q := NewQuota(QuotaConfig{Limit: 10, ProjectLimit: 10, Window: 999 * time.Millisecond, Margin: time.Millisecond, Grace: 500 * time.Millisecond,
			Lead: 300 * time.Millisecond, Now: clock.Now}, b.Client())
		acquire := func(account string) Grant {
			t.Helper()
			g, err := q.Acquire(ctx, account, "f"+account)
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
		// From idle, 7 calls at once: the window keeps room for more than
		// a lead's worth (3), so the pace lets them all through, where it
		// would have let 4 through.
		for i := range 7 {
			if !acquire("x").OK {
				t.Fatalf("call %d refused while the project's window had room", i+1)
			}
		}
		// With 3 slots left the pace binds, a lead ahead: one call now.
		if !acquire("a").OK {
			t.Fatal("the call the pace allows was refused")
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
		// account asking every 10 ms, never 11 calls within a window, and
		// about as many as the window frees (the 10 made by 200 ms leave
		// it from 1 s on, so about 16 by 2.2 s).
		var granted []time.Time
		for range 200 {
			clock.Add(10 * time.Millisecond)
			for _, acct := range []string{"a", "b", "c"} {
				if acquire(acct).OK {
					granted = append(granted, clock.Now())
				}
			}
		}
		for i := 10; i < len(granted); i++ {
			if d := granted[i].Sub(granted[i-10]); d < time.Second {
				t.Fatalf("11 calls within %s", d)
			}
		}
		if len(granted) < 14 {
			t.Fatalf("%d calls granted in 2s at 10 a second", len(granted))
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

// TestQuotaQuietAccountBesideBusyOnes: latency isolation between
// accounts. Three busy accounts each flush a burst of 2,000 rows over their
// 20 forms every 10 seconds, and a quiet account has two forms that get 2
// rows a second each (4 a second in all), with a flush delay of 1 s and
// Google's default quotas: 60 writes a minute per account and 300 per
// project, in a real minute for the emulator and the quota alike (neither
// window is compressed: compressing one without the other would let the
// quota and Google disagree). The broker makes waiting tasks ready once a
// second, as serve does by default.
//
// The run lasts 25 seconds of quiet rows: long enough for every busy
// account to spend its whole minute (60 writes each, 20 at each of 3
// bursts) and for their bursts to press the project (60 writes asked at
// once, twice what the project's pace lets through at once), and short
// enough that the quiet account's own writes (a flush every 1 to 1.5 s a
// form, about 40) stay under its own 60 a minute, so that nothing but the
// other accounts could delay them. The quiet
// rows' p99 from submission to the sheet must be at most the flush delay
// plus 1 s.
func TestQuotaQuietAccountBesideBusyOnes(t *testing.T) {
	const (
		busyAccounts = 3
		busyForms    = 20
		burst        = 2000
		burstEvery   = 10 * time.Second
		quietForms   = 2
		quietEvery   = 500 * time.Millisecond // per form
		run          = 25 * time.Second
		delay        = time.Second
	)
	e := newEnv(t, envOptions{
		cfg: Config{FlushDelay: delay, QuotaWindow: time.Minute, WritesPerMinute: 60, ReadsPerMinute: 60,
			ProjectWritesPerMinute: 300, ProjectReadsPerMinute: 300},
		fakeLimit: 60, fakeWindow: time.Minute,
		fake:         googlefake.Options{SheetsReadLimit: 60, SheetsProjectWriteLimit: 300, SheetsProjectReadLimit: 300},
		delayedCheck: time.Second,
	})
	var busy [][]FormView
	for a := range busyAccounts {
		acct := e.account(fmt.Sprintf("busy%d@example.com", a))
		var forms []FormView
		for range busyForms {
			forms = append(forms, e.form(acct, "q"))
		}
		busy = append(busy, forms)
	}
	quietAcct := e.account("quiet@example.com")
	var quiet []FormView
	quietOf := map[string]int{}
	for i := range quietForms {
		f := e.form(quietAcct, "q")
		quiet = append(quiet, f)
		quietOf[f.SpreadsheetID] = i
	}
	var (
		mu      sync.Mutex
		written = make([][]time.Time, quietForms) // when each quiet row reached its sheet
	)
	e.clients.mu.Lock()
	e.clients.onWrite = func(id string, n int) {
		now := time.Now()
		i, ok := quietOf[id]
		if !ok {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for range n {
			written[i] = append(written[i], now)
		}
	}
	e.clients.mu.Unlock()
	e.fake.ResetCounters()

	ctx, stop := context.WithTimeout(context.Background(), run)
	defer stop()
	var wg sync.WaitGroup
	for _, forms := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(burstEvery)
			defer tick.Stop()
			for {
				// A burst: 2,000 rows over the account's forms, from 20
				// concurrent submitters (as concurrent requests would).
				var bw sync.WaitGroup
				for _, f := range forms {
					bw.Add(1)
					go func() {
						defer bw.Done()
						e.submitN(f.ID, "b", burst/busyForms)
					}()
				}
				bw.Wait()
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	subs := make([][]store.Submission, quietForms)
	for i, f := range quiet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Offset so that the two forms' rows alternate.
			time.Sleep(time.Duration(i) * quietEvery / 2) // pacing the load, not waiting for a result
			tick := time.NewTicker(quietEvery)
			defer tick.Stop()
			for n := 0; ; n++ {
				subs[i] = append(subs[i], e.submit(f.ID, map[string]string{"q": fmt.Sprint("quiet ", n)}))
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
	wg.Wait()
	testkit.Eventually(t, 30*time.Second, "every quiet row written", func() bool {
		for i, f := range quiet {
			if e.formView(f.ID).RowsWritten != len(subs[i]) {
				return false
			}
		}
		return true
	})

	var lat []time.Duration
	for i, f := range quiet {
		checkOnceInOrder(t, subs[i], e.sheetRows(f.SpreadsheetID, f.Sheet))
		mu.Lock()
		times := slices.Clone(written[i])
		mu.Unlock()
		if len(times) != len(subs[i]) {
			t.Fatalf("quiet form %d: %d rows seen written, want %d", i, len(times), len(subs[i]))
		}
		for k, s := range subs[i] { // submitted in order, one at a time
			lat = append(lat, times[k].Sub(s.SubmittedAt))
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	st := e.fake.Sheets.Stats()
	t.Logf("quiet rows: %d, p50 %s, p99 %s, max %s; project's busiest window %d writes; quiet account's %d; Google refused %d; quota waits %v",
		len(lat), p50, p99, lat[len(lat)-1], st.ProjectMaxWritesInWindow, e.fake.Sheets.MaxWritesInWindow(quietAcct.Email),
		st.RejectedWrites, e.metric("mailroom_sheets_quota_waits_total"))
	if m := e.fake.Sheets.MaxWritesInWindow(quietAcct.Email); m >= 60 {
		t.Errorf("the quiet account made %d writes in a minute: its own quota bound, the test proves nothing", m)
	}
	if st.ProjectMaxWritesInWindow < 150 {
		t.Errorf("the project's busiest window held %d writes: the busy accounts never pressed it", st.ProjectMaxWritesInWindow)
	}
	if bound := delay + time.Second; p99 > bound {
		t.Errorf("the quiet account's p99 from submission to sheet is %s, over the flush delay + 1 s (%s)", p99, bound)
	}
}
