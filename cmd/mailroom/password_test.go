package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"mailroom/store"
	"mailroom/web"
)

// TestResetPassword: `mailroom reset-password` prints a new password whose
// hash replaces the old one, and ends every admin session.
func TestResetPassword(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := web.EnsureAdminPassword(db, "the old password"); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *store.Tx) error {
		return tx.SessionPut("a-session-cookie", store.Session{ID: "s1", CSRF: "x", CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	var out, errOut bytes.Buffer
	getenv := func(k string) string { return map[string]string{"MAILROOM_DATA_DIR": dir}[k] }
	if err := run(context.Background(), []string{"reset-password"}, getenv, &out, &errOut); err != nil {
		t.Fatalf("reset-password: %v\n%s", err, errOut.String())
	}
	_, rest, ok := strings.Cut(out.String(), dir+": ")
	password, _, _ := strings.Cut(rest, "\n")
	if !ok || len(password) < 20 {
		t.Fatalf("no new password printed: %q", out.String())
	}

	db, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *store.Tx) error {
		hash := tx.AdminPasswordHash()
		if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
			t.Error("the stored hash is not the printed password's")
		}
		if bcrypt.CompareHashAndPassword(hash, []byte("the old password")) == nil {
			t.Error("the old password still works")
		}
		if list, err := tx.Sessions(time.Now()); err != nil || len(list) != 0 {
			t.Errorf("sessions after the reset: %d (%v), want none", len(list), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
