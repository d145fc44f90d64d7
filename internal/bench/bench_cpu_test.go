package bench

import (
	"context"
	"testing"
)

// TestBenchDurableCPU checks the CPU figure of a small durable run on the
// embedded broker: above zero (the window saw the work) and below 100
// CPU-s per 1,000 tasks (not a unit slip: a no-op task costs about 1 ms).
func TestBenchDurableCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the app")
	}
	rate, cpu, err := benchDurableCPU(context.Background(), "", 500)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("durable: %.0f tasks/s, %.3f CPU-s per 1,000 tasks", rate, cpu)
	if rate <= 0 || cpu <= 0 || cpu >= 100 {
		t.Errorf("durable run: %v tasks/s, %v CPU-s per 1,000 tasks; want both above 0, CPU below 100", rate, cpu)
	}
}
