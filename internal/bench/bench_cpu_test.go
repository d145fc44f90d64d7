package bench

import (
	"context"
	"testing"
)

// TestBenchDurableCPU checks the cost figures of a small durable run on
// the embedded broker: CPU above zero (the window saw the work) and below
// 100 CPU-s per 1,000 tasks (not a unit slip: a no-op task costs about
// 1 ms); heap allocation above zero and below 100 MiB a task (about 0.7 MiB
// with the embedded broker's Lua); GC cycles counted (the embedded broker
// allocates enough that 500 tasks see at least one collection).
func TestBenchDurableCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the app")
	}
	d, err := benchDurableCPU(context.Background(), "", 500)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("durable: %.0f tasks/s, %.3f CPU-s, %.1f GC cycles per 1,000 tasks, %.0f KiB allocated a task", d.rate, d.cpuPer1000, d.gcPer1000, d.allocKiB)
	if d.rate <= 0 || d.cpuPer1000 <= 0 || d.cpuPer1000 >= 100 {
		t.Errorf("durable run: %v tasks/s, %v CPU-s per 1,000 tasks; want both above 0, CPU below 100", d.rate, d.cpuPer1000)
	}
	if d.allocKiB <= 0 || d.allocKiB >= 100*1024 {
		t.Errorf("durable run: %v KiB allocated a task; want above 0 and below 100 MiB", d.allocKiB)
	}
	if d.gcPer1000 <= 0 {
		t.Errorf("durable run: %v GC cycles per 1,000 tasks; want some (the window saw no collection)", d.gcPer1000)
	}
}
