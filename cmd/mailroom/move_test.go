package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mailroom/store"
)

// moveKey and otherKey are two MAILROOM_SECRET_KEY values.
var (
	moveKey  = base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	otherKey = base64.StdEncoding.EncodeToString([]byte("fedcba9876543210fedcba9876543210"))
)

// moveSource makes a data dir with a user whose webhook has an event not
// delivered yet: work in flight that export-user refuses without --force.
func moveSource(t *testing.T) (dir, userID string) {
	t.Helper()
	dir = t.TempDir()
	key, err := store.ParseKey(moveKey)
	if err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(dir, store.Options{SecretKey: key})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *store.Tx) error {
		u, err := tx.UserCreate("mover@example.com", "Mover")
		if err != nil {
			return err
		}
		userID = u.ID
		if _, err := tx.WebhookCreate(store.Webhook{URL: "https://hooks.example.com/in", UserID: u.ID}, "whsec_c2VjcmV0c2VjcmV0c2VjcmV0"); err != nil {
			return err
		}
		_, err = tx.EventAppend(store.Event{Type: "form.created", UserID: u.ID, Data: json.RawMessage(`{}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir, userID
}

// runMove runs one command of the binary's run with the data dir and key
// in the environment; its error and its output.
func runMove(dir, key string, args ...string) (string, error) {
	env := map[string]string{"MAILROOM_DATA_DIR": dir, "MAILROOM_SECRET_KEY": key}
	var out bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &out)
	return out.String(), err
}

// TestMoveCommands: export-user refuses a user with work in flight (naming
// it) and exports it with --force; import-user refuses a missing file, a
// file that is not an export, and a target with another key (saying so),
// and takes the file on a target with the same key.
func TestMoveCommands(t *testing.T) {
	t.Parallel()
	src, userID := moveSource(t)
	file := filepath.Join(t.TempDir(), "mover.json.gz")

	out, err := runMove(src, moveKey, "export-user", "--user", userID, "--out", file)
	if err == nil || !strings.Contains(err.Error(), "not delivered") || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("export-user with an undelivered event: %v (%s); want a refusal naming it and --force", err, out)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("the refused export left a file: %v", err)
	}
	if _, err := runMove(src, moveKey, "export-user", "--out", file); err == nil || !strings.Contains(err.Error(), "--user") {
		t.Errorf("export-user without --user: %v; want a usage error naming --user", err)
	}
	if out, err := runMove(src, moveKey, "export-user", "--user", userID, "--out", file, "--force"); err != nil || !strings.Contains(out, "wrote user "+userID) {
		t.Fatalf("export-user --force: %v (%s)", err, out)
	}

	dst := t.TempDir()
	for _, tc := range []struct {
		name, key, file, want string
	}{
		{"missing file", moveKey, filepath.Join(t.TempDir(), "none.json.gz"), "no such file"},
		{"not an export", moveKey, writeFile(t, "hello"), "not an export-user file"},
		{"another key", otherKey, file, "another MAILROOM_SECRET_KEY"},
	} {
		out, err := runMove(dst, tc.key, "import-user", tc.file)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("import-user, %s: %v (%s); want an error saying %q", tc.name, err, out, tc.want)
		}
	}
	if _, err := runMove(dst, moveKey, "import-user"); err == nil || !strings.Contains(err.Error(), "FILE") {
		t.Errorf("import-user without a file: %v; want a usage error", err)
	}
	out, err = runMove(dst, moveKey, "import-user", file)
	if err != nil || !strings.Contains(out, "user "+userID) {
		t.Fatalf("import-user on a target with the same key: %v (%s)", err, out)
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}
