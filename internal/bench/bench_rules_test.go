package bench

import (
	"context"
	"testing"

	"mailroom/internal/app/apptest"
)

// TestBenchRulesQuick runs the rules benchmark scenarios in their quick
// form, so that they never rot. The story's counts hold at any size: one
// job of threads/50 batches for mailroom, five for the naive original.
func TestBenchRulesQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenarios")
	}
	for _, s := range Scenarios() {
		if s.Name != "rules-story" && s.Name != "rules-throughput" {
			continue
		}
		r, err := s.Run(context.Background(), Options{Quick: true, Exe: apptest.Binary(t)})
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for _, m := range r.Metrics {
			t.Logf("%s: %s = %.2f %s %s", s.Name, m.Name, m.Value, m.Unit, m.Target)
			switch m.Name {
			case "mailroom: batch tasks enqueued", "mailroom: batches that did Gmail work":
				if m.Value != 12 {
					t.Errorf("%s = %v, want 12 (600 threads in batches of 50, one job)", m.Name, m.Value)
				}
			case "naive: batch tasks enqueued", "naive: batches that did Gmail work":
				if m.Value != 60 {
					t.Errorf("%s = %v, want 60 (five jobs)", m.Name, m.Value)
				}
			}
		}
	}
}
