package app

import (
	"os"
	"path/filepath"
	"testing"
)

// TestSetting: the commands that read a few of serve's settings (backup,
// compact) get serve's default, the MAILROOM_* variable over it, a
// secret's $ENV_FILE, and an error for a flag the table lacks.
func TestSetting(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	v, env, err := Setting("data-dir", none)
	if err != nil || v != Defaults().DataDir || env != "MAILROOM_DATA_DIR" {
		t.Errorf("data-dir = %q, %q, %v; want serve's default %q, MAILROOM_DATA_DIR", v, env, err, Defaults().DataDir)
	}
	if v, _, _ := Setting("http-addr", none); v != Defaults().HTTPAddr {
		t.Errorf("http-addr = %q, want serve's default %q", v, Defaults().HTTPAddr)
	}
	set := map[string]string{"MAILROOM_DATA_DIR": "/srv/mailroom"}
	if v, _, _ := Setting("data-dir", func(k string) string { return set[k] }); v != "/srv/mailroom" {
		t.Errorf("data-dir with MAILROOM_DATA_DIR = %q, want /srv/mailroom", v)
	}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	set = map[string]string{"MAILROOM_API_TOKEN_FILE": file}
	if v, _, err := Setting("api-token", func(k string) string { return set[k] }); err != nil || v != "from-file" {
		t.Errorf("api-token from MAILROOM_API_TOKEN_FILE = %q, %v; want from-file", v, err)
	}
	if _, _, err := Setting("no-such-flag", none); err == nil {
		t.Error("an unknown flag gave no error")
	}
}
