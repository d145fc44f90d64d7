package bench

import (
	"context"
	"testing"
)

// TestBenchSheetsQuick runs the Sheets benchmark scenarios in their quick
// form, so that they never rot; figures are logged, not judged, except the
// broker's bytes per waiting row, which must be none at any size.
func TestBenchSheetsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenarios")
	}
	for _, s := range Scenarios() {
		switch s.Name {
		case "sheets-story", "sheets-memory", "sheets-throughput":
		default:
			continue
		}
		r, err := s.Run(context.Background(), Options{Quick: true})
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for _, m := range r.Metrics {
			t.Logf("%s: %s = %.2f %s %s", s.Name, m.Name, m.Value, m.Unit, m.Target)
			if m.Name == "broker bytes per waiting row" && m.Value > 0 {
				t.Errorf("the broker holds %.1f bytes per waiting row, want none", m.Value)
			}
		}
	}
}
