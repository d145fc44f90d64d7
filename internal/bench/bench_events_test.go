package bench

import (
	"context"
	"testing"
)

// TestBenchEventsQuick runs the events scenario in its quick form, so it
// never rots, and checks that it measured deliveries on each broker.
func TestBenchEventsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the events scenario")
	}
	s, err := Choose([]string{"events"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s[0].Run(context.Background(), Options{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Metrics {
		t.Logf("%s = %.1f %s", m.Name, m.Value, m.Unit)
		if m.Value <= 0 {
			t.Errorf("%s = %v: nothing measured", m.Name, m.Value)
		}
	}
	if len(r.Metrics) < 3 {
		t.Errorf("%d figures, want at least the embedded broker's three", len(r.Metrics))
	}
	for _, n := range r.Notes {
		t.Log(n)
	}
}
