package apptest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"mailroom/internal/testkit"
)

// Proc is the built mailroom binary running `mailroom serve` as a child
// process: the crash tests and the soak kill it with SIGKILL and start it
// again on the same data dir.
type Proc struct {
	t       testing.TB
	Cmd     *exec.Cmd
	URL     string // http://host:port of its listener
	DataDir string
	Out     *testkit.Buffer // its stdout and stderr
	// Ready is how long it took from the start of the process to the
	// first 200 from /readyz.
	Ready   time.Duration
	exited  chan struct{} // closed when the process has exited
	exitErr error         // its exit status, once exited is closed
}

// FreeAddr returns a loopback host:port that nothing listens on.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// StartProc runs `mailroom serve` on dataDir with the debug task type, the
// test token and a fresh loopback port, and waits (30 s at most) until its
// /readyz answers 200. env is appended to the defaults: a later
// MAILROOM_HTTP_ADDR (or any other variable) wins. The process is killed
// when the test ends.
func StartProc(t testing.TB, dataDir string, env ...string) *Proc {
	t.Helper()
	addr := FreeAddr(t)
	cmd := exec.Command(Binary(t), "serve")
	cmd.Env = append(os.Environ(),
		"MAILROOM_DATA_DIR="+dataDir,
		"MAILROOM_HTTP_ADDR="+addr,
		"MAILROOM_API_TOKEN="+Token,
		"MAILROOM_ADMIN_PASSWORD=correct horse battery staple",
		"MAILROOM_DEBUG_TASKS=true",
		"MAILROOM_TASK_POLL_INTERVAL=20ms",
		"MAILROOM_LOG_LEVEL=warn",
	)
	cmd.Env = append(cmd.Env, env...)
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "MAILROOM_HTTP_ADDR="); ok {
			addr = v
		}
	}
	out := &testkit.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Proc{t: t, Cmd: cmd, URL: "http://" + addr, DataDir: dataDir, Out: out, exited: make(chan struct{})}
	go func() { p.exitErr = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
	})
	testkit.Eventually(t, 30*time.Second, "the child's /readyz", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("mailroom exited early: %v\n%s", p.exitErr, out)
		default:
		}
		return p.Readyz() == http.StatusOK
	})
	p.Ready = time.Since(start)
	return p
}

// Readyz returns the status of GET /readyz, 0 when the request failed.
func (p *Proc) Readyz() int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(p.URL + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Exited is closed once the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// ExitErr is the process's exit status; call it after Exited is closed.
func (p *Proc) ExitErr() error { return p.exitErr }

// Kill9 kills the process with SIGKILL and waits until it is gone.
func (p *Proc) Kill9() {
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Do sends an API request with the test token (body JSON-encoded unless
// nil) and returns the status and body; err is the transport's error.
func (p *Proc) Do(method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, p.URL+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, raw, err
}

// JSON sends a request, wants the status and decodes the answer into out
// (when not nil).
func (p *Proc) JSON(method, path string, body any, want int, out any) error {
	status, raw, err := p.Do(method, path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status != want {
		return fmt.Errorf("%s %s: %d %s, want %d", method, path, status, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("%s %s: decode %s: %w", method, path, raw, err)
		}
	}
	return nil
}

// Must is JSON that fails the test on an error.
func (p *Proc) Must(method, path string, body any, want int, out any) {
	p.t.Helper()
	if err := p.JSON(method, path, body, want, out); err != nil {
		p.t.Fatal(err)
	}
}
