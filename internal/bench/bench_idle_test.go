package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"mailroom/internal/app/apptest"
)

// TestBenchIdleMeasuresChildren runs the idle scenario's measurements in
// miniature (a second of idle, 50 tasks) on the built binary, so that they
// never rot; the figures are logged, not judged, except that they exist.
func TestBenchIdleMeasuresChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("starts mailroom processes")
	}
	t.Parallel()
	exe := apptest.Binary(t)
	redisBin, _ := exec.LookPath("redis-server")
	ctx := context.Background()
	env := []string{"MAILROOM_TASK_SERVER_LINGER=100ms"}
	for _, withRedis := range []bool{false, true} {
		if withRedis && redisBin == "" {
			t.Log("redis-server not installed: the external-broker measurement did not run")
			continue
		}
		idle, err := measureIdle(ctx, exe, redisBin, withRedis, env, 500*time.Millisecond, time.Second)
		if err != nil {
			t.Fatalf("idle (redis %v): %v", withRedis, err)
		}
		t.Logf("redis %v: idle %.2f CPU-s/min in mailroom, %.2f in redis-server, RSS %.1f MiB", withRedis, idle.mailroom, idle.redis, idle.rssMiB)
		if idle.rssMiB <= 0 || idle.mailroom < 0 || idle.redis < 0 {
			t.Errorf("redis %v: implausible idle figures %+v", withRedis, idle)
		}
		// 500: with redis-server, 50 tasks cost mailroom about 5 ms of CPU,
		// under the kernel's 10 ms tick, and read as none now and then.
		tasks, err := measureTasks(ctx, exe, redisBin, withRedis, env, 500, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("tasks (redis %v): %v", withRedis, err)
		}
		t.Logf("redis %v: %.2f CPU-s per 1,000 tasks in mailroom, %.2f in redis-server", withRedis, tasks.mailroom, tasks.redis)
		if tasks.mailroom <= 0 {
			t.Errorf("redis %v: 500 tasks cost no CPU: %+v", withRedis, tasks)
		}
	}
}
