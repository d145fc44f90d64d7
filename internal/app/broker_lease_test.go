package app_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app/apptest"
	"mailroom/internal/testkit"
	"mailroom/queue/broker/brokertest"
)

// TestBrokerHasOneOwner points two mailrooms (their own data dirs, their
// own instance names) at one redis-server: the second refuses to start with
// an error naming the first, the first goes on running its tasks, and the
// first restarted after a SIGKILL takes its own lease back at once (not
// after the lease's 30 s).
func TestBrokerHasOneOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a redis-server and mailroom processes")
	}
	t.Parallel()
	url := brokertest.RedisServer(t)
	dirA := t.TempDir()
	a := startProc(t, dirA, "MAILROOM_REDIS_URL="+url, "MAILROOM_INSTANCE=mail-a")

	out, err := serveUntilExit(t, 30*time.Second, "MAILROOM_DATA_DIR="+t.TempDir(), "MAILROOM_REDIS_URL="+url, "MAILROOM_INSTANCE=mail-b", "MAILROOM_HTTP_ADDR="+freeAddr(t))
	if err == nil {
		t.Fatalf("the second mailroom on the broker started; output:\n%s", out)
	}
	for _, want := range []string{`instance "mail-a"`, "MAILROOM_REDIS_URL"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}

	// The first is unaffected: its tasks run on its broker.
	a.post("/api/v1/debug/tasks", map[string]any{"count": 20})
	testkit.Eventually(t, 20*time.Second, "mail-a ran its 20 tasks", func() bool {
		return debugProcessed(t, a) == 20
	})

	// Killed, the same mailroom takes its lease back at once.
	a.Kill9()
	start := time.Now()
	again := startProc(t, dirA, "MAILROOM_REDIS_URL="+url, "MAILROOM_INSTANCE=mail-a")
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("the restarted owner took %s to start, want it at once", took)
	}
	if again.Readyz() != http.StatusOK {
		t.Error("the restarted owner is not ready")
	}
}

// serveUntilExit runs `mailroom serve` with env and waits for it to exit:
// its combined output and exit error (nil when it exited 0 or still ran at
// the deadline, when it is killed).
func serveUntilExit(t *testing.T, limit time.Duration, env ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, apptest.Binary(t), "serve")
	cmd.Env = append(os.Environ(), "MAILROOM_API_TOKEN="+apptest.Token, "MAILROOM_ADMIN_PASSWORD=correct horse battery staple", "MAILROOM_LOG_LEVEL=warn")
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), nil
	}
	return out.String(), err
}

// debugProcessed reads the processed count of the debug task's queue.
func debugProcessed(t *testing.T, p *proc) int {
	t.Helper()
	var got struct {
		Queues []struct {
			Types     []string
			Processed int
		}
	}
	if err := p.JSON(http.MethodGet, "/api/v1/queues", nil, http.StatusOK, &got); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, q := range got.Queues {
		for _, typ := range q.Types {
			if typ == "debug:record" {
				n += q.Processed
			}
		}
	}
	return n
}
