package bench

import (
	"context"
	"strings"
	"testing"

	"mailroom/internal/testkit"
)

// TestBenchGmailQuotaQuick runs the gmail-quota scenario in its quick form
// (480 messages, time compressed 20x), so that it never rots: both runs
// produce their figures, mailroom's mirror and labels end final (the
// scenario checks them message by message against the emulator, and
// fails when they are not), and the push-to-label times were measured.
// It asserts no timing.
func TestBenchGmailQuotaQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenario")
	}
	r, err := benchGmailQuotaOld(context.Background(), Options{Quick: true, Progress: testkit.LogWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, m := range r.Metrics {
		t.Logf("%s = %.2f %s %s", m.Name, m.Value, m.Unit, m.Target)
		got[m.Name] = m.Value
	}
	for _, name := range []string{"mailroom", "old limiters"} {
		for _, fig := range []string{"time until the mirror and every label are final", "Google's floor of time at the quota's rate (the floor's units at 6,000 a minute: minutes of one user's quota)",
			"the least time Google's sliding minute allows (the floor's units, a minute's worth at once each time the last has left the window)", "time ÷ that least time", "time ÷ the floor's time at the quota's rate",
			"Gmail units spent", "Google's floor of units (the least Google's table and call limits allow)", "Gmail calls (refused ones included)",
			"quota refusals ÷ Gmail calls", "p99 push to label of a new matching message", "new messages matching a rule saved before they arrived (measured)"} {
			if _, ok := got[name+": "+fig]; !ok {
				t.Errorf("no figure %q", name+": "+fig)
			}
		}
		if got[name+": new messages matching a rule saved before they arrived (measured)"] == 0 {
			t.Errorf("%s: no new matching message was measured", name)
		}
		// Google's floor is a lower bound of any program's units: a run
		// under it did not do the work, or the floor is wrong.
		if spent, floor := got[name+": Gmail units spent"], got[name+": Google's floor of units (the least Google's table and call limits allow)"]; spent < floor {
			t.Errorf("%s: %v units spent, under Google's floor (%v): the work was not done, or the floor is wrong", name, spent, floor)
		}
	}
	if got["mailroom: mirror and every label final (1 yes, 0 not by the deadline)"] != 1 {
		t.Error("mailroom's mirror and labels did not end final")
	}
	for _, n := range r.Notes {
		t.Log(n)
	}
}

// TestBenchGmailQuota2025Quick runs gmail-quota-2025 in its quick form:
// mailroom alone, the emulator charging the 2025 prices and the app
// running on them, its mirror and labels final, its floor priced by that
// list (no old limiters' run).
func TestBenchGmailQuota2025Quick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenario")
	}
	r, err := benchGmailQuota2025(context.Background(), Options{Quick: true, Progress: testkit.LogWriter(t)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, m := range r.Metrics {
		got[m.Name] = m.Value
		if strings.HasPrefix(m.Name, "old limiters") {
			t.Errorf("an old limiters' figure at the 2025 prices: %s", m.Name)
		}
	}
	if got["mailroom: mirror and every label final (1 yes, 0 not by the deadline)"] != 1 {
		t.Error("mailroom's mirror and labels did not end final")
	}
	spent, floor := got["mailroom: Gmail units spent"], got["mailroom: Google's floor of units (the least Google's table and call limits allow)"]
	if floor == 0 || spent < floor {
		t.Errorf("%v units spent, Google's floor %v: the work was not done, or the floor is wrong", spent, floor)
	}
	if _, ok := got["mailroom: the most units spent in any minute ÷ the account's 15,000 (1: the limit bound)"]; !ok {
		t.Error("the run is not measured against 2025's 15,000 a minute")
	}
}
