package bench

import (
	"context"
	"testing"
)

// TestBenchGmailFairnessQuick runs gmail-fairness in its quick form (8
// accounts, a 500-unit project budget per 6 s window): every account
// converges, and the emulator counted no window of the project over the
// budget. Times are logged, not judged.
func TestBenchGmailFairnessQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenario")
	}
	r, err := benchGmailFairness(context.Background(), Options{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]Metric{}
	for _, m := range r.Metrics {
		t.Logf("%s = %.2f %s %s", m.Name, m.Value, m.Unit, m.Target)
		seen[m.Name] = m
	}
	for _, n := range r.Notes {
		t.Log(n)
	}
	if m := seen["accounts converged"]; m.Value != 8 {
		t.Errorf("%v of 8 accounts converged", m.Value)
	}
	peak := seen["most project units in any window (emulator's count)"]
	if peak.Value <= 0 || peak.Value > 500 {
		t.Errorf("most project units in a window = %v, want at most the budget, 500 (and some)", peak.Value)
	}
	if spent := seen["project units spent (emulator's count)"].Value; spent <= 500 {
		t.Errorf("the project spent %v units, no more than one window's budget: the budget never bound", spent)
	}
}
