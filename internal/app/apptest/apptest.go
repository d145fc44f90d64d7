// Package apptest starts the whole appliance in process for the tests of
// the packages that compose it (the demo world, the command line): the
// same app.New that serve uses, on a free port, with time compressed.
package apptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/testkit"
)

// Token is the API token of every test app.
const Token = "test-api-token-0123456789abcdef01234567"

// App is a started appliance.
type App struct {
	*app.App
	t     testing.TB
	URL   string
	Token string
}

// Config is the default configuration with short timings for tests.
func Config(t testing.TB) *app.Config {
	t.Helper()
	cfg, err := app.ParseConfig("test", nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.APIToken = Token
	cfg.AdminPassword = "correct horse battery staple"
	cfg.RetryInitial, cfg.RetryMax = 50*time.Millisecond, 200*time.Millisecond
	cfg.TaskPollInterval = 20 * time.Millisecond
	cfg.DelayedCheckInterval = 100 * time.Millisecond
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.LogLevel = "warn"
	return cfg
}

// Prepare makes the app's deps from the test config before New, and may
// change the config (demo.Prepare is one).
type Prepare func(ctx context.Context, cfg *app.Config, logger *slog.Logger) (app.Deps, error)

// Start builds and starts the app; mutate may change the test config, and
// prepare, when given, makes the app's deps (and may change the config
// too) before app.New. The app stops when the test ends.
func Start(t testing.TB, mutate func(*app.Config), prepare ...Prepare) *App {
	t.Helper()
	cfg := Config(t)
	if mutate != nil {
		mutate(cfg)
	}
	logger := app.NewLogger(cfg, testkit.LogWriter(t))
	deps := app.Deps{Logger: logger}
	for _, p := range prepare {
		var err error
		if deps, err = p(context.Background(), cfg, logger); err != nil {
			t.Fatalf("prepare: %v", err)
		}
	}
	a, err := app.New(context.Background(), cfg, deps)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(context.Background()); err != nil {
		a.Close()
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return &App{App: a, t: t, URL: "http://" + a.Addr(), Token: Token}
}

// T is the test the app runs for.
func (ta *App) T() testing.TB { return ta.t }

// Do sends a request with the API token; body is JSON-encoded unless it is
// a []byte or nil.
func (ta *App) Do(method, path string, body any) (int, []byte) {
	ta.t.Helper()
	return ta.DoWithToken(ta.Token, method, path, body)
}

// DoWithToken is Do with another bearer token (a user token).
func (ta *App) DoWithToken(token, method, path string, body any) (int, []byte) {
	ta.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			ta.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, ta.URL+path, r)
	if err != nil {
		ta.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ta.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// JSON sends a request, checks the status and decodes the answer into out.
func (ta *App) JSON(method, path string, body any, want int, out any) {
	ta.t.Helper()
	status, raw := ta.Do(method, path, body)
	if status != want {
		ta.t.Fatalf("%s %s: status %d, want %d; body %s", method, path, status, want, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			ta.t.Fatalf("%s %s: decode %s: %v", method, path, raw, err)
		}
	}
}

var (
	binaryOnce sync.Once
	binaryPath string
	binaryErr  error
)

// Binary builds the mailroom command once per test binary, for the tests
// that run it as a process (crash safety, graceful shutdown, a benchmark's
// helper processes).
func Binary(t testing.TB) string {
	t.Helper()
	binaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mailroom-bin-")
		if err != nil {
			binaryErr = err
			return
		}
		binaryPath = filepath.Join(dir, "mailroom")
		out, err := exec.Command("go", "build", "-o", binaryPath, "mailroom/cmd/mailroom").CombinedOutput()
		if err != nil {
			binaryErr = err
			binaryPath = string(out)
		}
	})
	if binaryErr != nil {
		t.Fatalf("build mailroom: %v\n%s", binaryErr, binaryPath)
	}
	return binaryPath
}
