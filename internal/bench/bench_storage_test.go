package bench

import (
	"context"
	"testing"
)

// TestBenchStorageQuick runs the storage scenario in its quick form, so it
// never rots, and checks its figures are sizes a mirror without bodies and
// a three-answer submission can have: more than nothing (something was
// measured) and less than a page each (a body stored by mistake, or a
// buffer never freed, would pass it).
func TestBenchStorageQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the storage scenario")
	}
	s, err := Choose([]string{"storage"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s[0].Run(context.Background(), Options{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Metrics) != 3 {
		t.Fatalf("figures %+v, want three", r.Metrics)
	}
	for _, m := range r.Metrics {
		t.Logf("%s = %.0f %s", m.Name, m.Value, m.Unit)
		if m.Value <= 0 || m.Value >= 4096 {
			t.Errorf("%s = %.0f %s, want more than 0 and less than a 4 KiB page", m.Name, m.Value, m.Unit)
		}
	}
}
