package bench

import (
	"context"
	"testing"

	"mailroom/queue/broker/brokertest"
)

// TestBenchFleetQuick runs the fleet scenario in its quick form, so that it
// never rots: three mailrooms on one redis-server; Google refuses nothing
// and no window of the project's goes over its limit.
func TestBenchFleetQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenario")
	}
	r, err := benchFleet(context.Background(), Options{Quick: true, RedisURL: brokertest.RedisServer(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range r.Metrics {
		t.Logf("%s = %.2f %s %s", m.Name, m.Value, m.Unit, m.Target)
		switch m.Name {
		case "Google quota refusals (the emulator's project limit is the mailrooms', so they could happen)",
			"most project units in any window (emulator's count)":
			if m.Met != nil && !*m.Met {
				t.Errorf("%s = %v, want %s", m.Name, m.Value, m.Target)
			}
		}
	}
}
