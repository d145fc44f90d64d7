package bench

import (
	"testing"
	"time"

	"mailroom/queue/google"
)

// TestGmailFloor checks the floor against sums worked by hand from
// Google's tables, the 2025 one and the 2026 one.
func TestGmailFloor(t *testing.T) {
	w := gmailWork{
		// 7 messages: one list page; two single messages and two threads
		// of 2 and 3.
		threads: []int{1, 1, 2, 3},
		watch:   true,
		labels:  2,
		// 1,500 adds of one label: two batchModify calls; none of
		// another; 999 removals: one.
		changes:     []int{1500, 0, 999},
		newMail:     4,
		newLabelled: 2,
		bodies:      1,
	}
	for _, c := range []struct {
		prices string
		want   map[string]int
	}{
		// 2025: messages.get 5 (a body too), threads.get 10 (both threads).
		{google.Prices2025, map[string]int{
			"labels.list": 1, "getProfile": 1, "messages.list": 5, "threads.get": 20, "messages.get": 10 + 20 + 5,
			"watch": 100, "labels.create": 10, "messages.batchModify": 150, "messages.modify": 10,
		}},
		// 2026: messages.get 20, a body 60, threads.get 40 (a thread of 2
		// ties with 2 x 20: one call).
		{google.Prices2026, map[string]int{
			"labels.list": 1, "getProfile": 1, "messages.list": 5, "threads.get": 80, "messages.get": 2*20 + 4*20 + 60,
			"watch": 100, "labels.create": 10, "messages.batchModify": 150, "messages.modify": 10,
		}},
	} {
		f := w.floor(google.MustPrices(c.prices))
		total := 0
		for m, u := range c.want {
			total += u
			if f.byMethod[m] != u {
				t.Errorf("%s prices, %s: %d units, want %d", c.prices, m, f.byMethod[m], u)
			}
		}
		if len(f.byMethod) != len(c.want) || f.units != total {
			t.Errorf("%s prices: floor %v, want %d units in %d methods", c.prices, f, total, len(c.want))
		}
	}
	// A sliding minute: the first window's units at once, the next
	// window's once they have left it. 6,327 units at 6,000 a minute take
	// one minute (the last 327 when the first 6,000 leave), 12,000 one,
	// 12,001 two.
	g := gmailFloor{units: 6327}
	for units, want := range map[int]time.Duration{6327: time.Minute, 12000: time.Minute, 12001: 2 * time.Minute, 66132: 11 * time.Minute} {
		if got := (gmailFloor{units: units}).least(6000, time.Minute); got != want {
			t.Errorf("least time of %d units at 6,000 a minute %s, want %s", units, got, want)
		}
	}
	if got := (gmailFloor{units: 10}).least(6000, time.Minute); got != 0 {
		t.Errorf("least time of a window's worth %s, want 0", got)
	}
	// At the quota's rate, 6,327 units are 6,327/6,000 of a minute.
	if got, want := g.atRate(6000, time.Minute), time.Duration(float64(time.Minute)*6327/6000); got != want {
		t.Errorf("time at the quota's rate %s, want %s", got, want)
	}
}

// TestGmailFloorIssueMailbox is issue 21's example: a mailbox of 2,500
// messages in 1,444 threads costs less fetched thread-aware than message
// by message.
func TestGmailFloorIssueMailbox(t *testing.T) {
	// 1,444 threads of 2,500 messages: 700 single, 744 of 2 or more.
	var sizes []int
	for range 700 {
		sizes = append(sizes, 1)
	}
	rest := 2500 - 700
	for i := range 744 {
		n := rest / (744 - i)
		sizes = append(sizes, n)
		rest -= n
	}
	f := gmailWork{threads: sizes}.floor(google.MustPrices(google.Prices2025))
	byMessage := 1 + 1 + 5*5 + 2500*5
	if want := 1 + 1 + 5*5 + 700*5 + 744*10; f.units != want || f.units >= byMessage {
		t.Errorf("floor %d units, want %d (message by message %d)", f.units, want, byMessage)
	}
}

// TestGmailQuotaFiguresJudgeTheLeastTime: the gmail-quota figures judge
// the time on the least time Google's sliding minute allows for the
// floor's units at the run's price list (target 1.10), and show the
// floor's time at the quota's rate beside it without a target; work that
// fits in the first minute has no least time and its time no target.
func TestGmailQuotaFiguresJudgeTheLeastTime(t *testing.T) {
	find := func(r Result, name string) (Metric, bool) {
		for _, m := range r.Metrics {
			if m.Name == name {
				return m, true
			}
		}
		return Metric{}, false
	}
	// 2026: 18,000 units at 6,000 a minute: 3 minutes at the rate, 2 the
	// least; 2.2 minutes taken.
	size := gqSizeOf(Options{}, google.Prices2026)
	run := gqRun{final: true, elapsed: 132 * time.Second, floor: gmailFloor{units: 18000}, units: 18000, calls: 1}
	var r Result
	gqFigures(&r, "mailroom", run, size, true)
	m, ok := find(r, "mailroom: time ÷ that least time")
	if !ok || m.Target != "<= 1.1" || m.Met == nil || !*m.Met || m.Value < 1.0999 || m.Value > 1.1001 {
		t.Errorf("time ÷ least time: %+v (found %v), want 1.1 judged <= 1.1 and met", m, ok)
	}
	m, ok = find(r, "mailroom: time ÷ the floor's time at the quota's rate")
	if !ok || m.Target != "" || m.Value < 0.7333 || m.Value > 0.7334 {
		t.Errorf("time ÷ the floor's time at the rate: %+v (found %v), want 2.2/3 without a target", m, ok)
	}
	if _, ok := find(r, "mailroom: Google's floor of time at the quota's rate (the floor's units at 6,000 a minute: minutes of one user's quota)"); !ok {
		t.Error("no floor of time at 6,000 a minute")
	}
	// 2025: 10,000 units fit in the first minute of 15,000: no least time.
	size = gqSizeOf(Options{}, google.Prices2025)
	if size.prices.UserUnitsPerMinute != 15000 || size.prices.MessagesGet != 5 {
		t.Fatalf("the 2025 run's prices: %+v", size.prices)
	}
	r = Result{}
	gqFigures(&r, "mailroom", gqRun{final: true, elapsed: 30 * time.Second, floor: gmailFloor{units: 10000}, units: 10000, calls: 1}, size, true)
	if m, ok := find(r, "mailroom: time ÷ that least time"); ok {
		t.Errorf("work within the first minute has a least-time ratio: %+v", m)
	}
	if _, ok := find(r, "mailroom: the most units spent in any minute ÷ the account's 15,000 (1: the limit bound)"); !ok {
		t.Error("the 2025 run does not name its 15,000 a minute")
	}
}
