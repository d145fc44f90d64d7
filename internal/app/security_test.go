package app_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
)

// unsafeSettings are settings serve must refuse, with what its one-line
// reason must say.
var unsafeSettings = []struct {
	name string
	env  map[string]string
	want []string
}{
	{"short api token", map[string]string{"MAILROOM_API_TOKEN": "tok"},
		[]string{"MAILROOM_API_TOKEN", "32 characters", "openssl rand -hex 32"}},
	{"31 characters", map[string]string{"MAILROOM_API_TOKEN": strings.Repeat("x", 31)},
		[]string{"MAILROOM_API_TOKEN", "openssl rand -hex 32"}},
	{"audience without service account", map[string]string{"MAILROOM_PUSH_AUDIENCE": "https://mailroom.example/push/gmail"},
		[]string{"MAILROOM_PUSH_SERVICE_ACCOUNT", "MAILROOM_PUSH_AUDIENCE"}},
}

// TestConfigRefusesUnsafeSettings: a short static API token and a push
// audience without a service account are configuration errors naming the
// settings (and how to make a token); 32 characters and an audience with
// its service account pass.
func TestConfigRefusesUnsafeSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range unsafeSettings {
		_, err := app.ParseConfig("serve", nil, func(k string) string { return tc.env[k] }, io.Discard)
		if err == nil {
			t.Errorf("%s: accepted", tc.name)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") {
			t.Errorf("%s: reason is not one line: %q", tc.name, msg)
		}
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s: reason %q does not say %q", tc.name, msg, w)
			}
		}
	}
	good := map[string]string{
		"MAILROOM_API_TOKEN":            strings.Repeat("x", 32),
		"MAILROOM_PUSH_AUDIENCE":        "https://mailroom.example/push/gmail",
		"MAILROOM_PUSH_SERVICE_ACCOUNT": "push@project.iam.gserviceaccount.com",
	}
	if _, err := app.ParseConfig("serve", nil, func(k string) string { return good[k] }, io.Discard); err != nil {
		t.Errorf("good settings refused: %v", err)
	}
}

// TestServeRefusesUnsafeSettings: the binary's serve exits with code 2 and
// one line for each unsafe setting.
func TestServeRefusesUnsafeSettings(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tc := range unsafeSettings {
		cmd := exec.Command(apptest.Binary(t), "serve")
		cmd.Env = append(os.Environ(), "MAILROOM_DATA_DIR="+t.TempDir(), "MAILROOM_HTTP_ADDR=127.0.0.1:0")
		for k, v := range tc.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 {
			t.Errorf("%s: exit %v, want code 2; output %s", tc.name, err, out)
			continue
		}
		line := strings.TrimSpace(string(out))
		if strings.Contains(line, "\n") {
			t.Errorf("%s: reason is not one line: %q", tc.name, line)
		}
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: reason %q does not say %q", tc.name, line, w)
			}
		}
	}
}

// TestNewTightensDataDir: a data dir readable by others is made 0700 when
// the app opens it, with a warning naming its old mode.
func TestNewTightensDataDir(t *testing.T) {
	t.Parallel()
	cfg := apptest.Config(t)
	if err := os.Chmod(cfg.DataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	a, err := app.New(context.Background(), cfg, app.Deps{Logger: app.NewLogger(cfg, &logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Error(err)
	}
	fi, err := os.Stat(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o700 {
		t.Errorf("data dir mode %04o, want 0700", m)
	}
	if !strings.Contains(logs.String(), "tightened to 0700") || !strings.Contains(logs.String(), "0755") {
		t.Errorf("no warning naming the old mode in the log:\n%s", logs.String())
	}
}

// TestSystemdUnitHardening: the unit hides other processes and most of /proc.
func TestSystemdUnitHardening(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "scripts", "mailroom.service"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for l := range strings.SplitSeq(string(raw), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, want := range []string{"ProtectProc=invisible", "ProcSubset=pid", "UMask=0077", "StateDirectoryMode=0700", "NoNewPrivileges=true"} {
		if !lines[want] {
			t.Errorf("scripts/mailroom.service lacks %s", want)
		}
	}
}
