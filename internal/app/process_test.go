package app_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/testkit"
	"mailroom/store"
)

// proc is a mailroom binary running as a child process (apptest.Proc),
// with the short names these tests use.
type proc struct {
	*apptest.Proc
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	out    *testkit.Buffer
	exited <-chan struct{}
}

func freeAddr(t *testing.T) string { return apptest.FreeAddr(t) }

// startProc runs `mailroom serve` on dataDir with the debug task type.
func startProc(t *testing.T, dataDir string, env ...string) *proc {
	t.Helper()
	ap := apptest.StartProc(t, dataDir, env...)
	return &proc{Proc: ap, t: t, cmd: ap.Cmd, url: ap.URL, out: ap.Out, exited: ap.Exited()}
}

func (p *proc) post(path string, body any) {
	p.t.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, p.url+path, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+apptest.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(resp.Body)
		p.t.Fatalf("POST %s: %s %s", path, resp.Status, msg)
	}
}

// completions reads the debug task log: how often each id completed.
func completions(t *testing.T, dataDir string) map[string]int {
	t.Helper()
	f, err := os.Open(filepath.Join(dataDir, app.DebugLogName))
	if err != nil {
		if os.IsNotExist(err) {
			return map[string]int{}
		}
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); len(line) == 16 {
			seen[line]++
		}
	}
	return seen
}

func TestCrashSafetyKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	const total = 5000
	dir := t.TempDir()
	p := startProc(t, dir)
	p.post("/api/v1/debug/tasks", map[string]any{"count": total, "sleepMs": 2})
	testkit.Eventually(t, 60*time.Second, "some tasks to complete", func() bool { return len(completions(t, dir)) >= total/5 })
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	before := len(completions(t, dir))
	if before >= total {
		t.Fatalf("all %d tasks finished before the kill; the test proves nothing", total)
	}

	startProc(t, dir)
	testkit.Eventually(t, 90*time.Second, "every task to complete after the restart", func() bool { return len(completions(t, dir)) == total })
	twice := 0
	for _, n := range completions(t, dir) {
		if n > 1 {
			twice++
		}
	}
	t.Logf("kill -9 after %d of %d completions; after restart all %d completed; %d ran twice (at least once, as designed)", before, total, total, twice)
	fmt.Printf("crash safety: %d of %d tasks ran twice after kill -9\n", twice, total)
}

func TestGracefulShutdownLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and signals the binary")
	}
	const total = 300
	dir := t.TempDir()
	p := startProc(t, dir, "MAILROOM_SHUTDOWN_TIMEOUT=3s")
	p.post("/api/v1/debug/tasks", map[string]any{"count": total, "sleepMs": 100})
	testkit.Eventually(t, 30*time.Second, "some tasks to complete", func() bool { return len(completions(t, dir)) >= 20 })
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
		if p.ExitErr() != nil {
			t.Fatalf("serve exited with %v after SIGTERM, want 0\n%s", p.ExitErr(), p.out)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("serve did not exit within 20s of SIGTERM\n%s", p.out)
	}
	t.Logf("exited cleanly %s after SIGTERM with %d of %d done", time.Since(start).Round(time.Millisecond), len(completions(t, dir)), total)
	if err := store.Verify(filepath.Join(dir, store.FileName)); err != nil {
		t.Fatalf("bbolt after shutdown: %v", err)
	}
	startProc(t, dir)
	testkit.Eventually(t, 60*time.Second, "every task to complete after the restart", func() bool { return len(completions(t, dir)) == total })
}

func TestBadConfigExitsWithReason(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	cmd := exec.Command(apptest.Binary(t), "serve")
	cmd.Env = append(os.Environ(), "MAILROOM_DATA_DIR="+t.TempDir(), "MAILROOM_SHEETS_FLUSH_DELAY=often")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit: %v, want code 2; output %s", err, out)
	}
	if !strings.Contains(string(out), "MAILROOM_SHEETS_FLUSH_DELAY") || strings.Count(strings.TrimSpace(string(out)), "\n") > 0 {
		t.Fatalf("want one line naming MAILROOM_SHEETS_FLUSH_DELAY, got %q", out)
	}
}

func TestSecondInstanceFailsFast(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	startProc(t, dir)
	cmd := exec.Command(apptest.Binary(t), "serve")
	cmd.Env = append(os.Environ(), "MAILROOM_DATA_DIR="+dir, "MAILROOM_HTTP_ADDR="+freeAddr(t))
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatal("a second instance on the same data dir started")
	}
	if !strings.Contains(string(out), "in use by another mailroom process") || time.Since(start) > 10*time.Second {
		t.Fatalf("second instance: %q after %s", out, time.Since(start))
	}
}
