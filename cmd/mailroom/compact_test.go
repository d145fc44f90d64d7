package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mailroom/internal/app/apptest"
	"mailroom/store"
)

// TestCompactKill9LeavesTheOldFile kills `mailroom compact` with SIGKILL
// while it writes the new file: the old file is intact and opens with
// every message, and the next compaction succeeds.
func TestCompactKill9LeavesTheOldFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 40000
	if err := db.Update(func(tx *store.Tx) error {
		return tx.AccountPut(store.Account{ID: "a1", UserID: "u1", Email: "a1@example.com", Status: "ready"})
	}); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; done += 5000 {
		err := db.Update(func(tx *store.Tx) error {
			for i := done; i < done+5000; i++ {
				m := store.Message{ID: fmt.Sprintf("m%08d", i), ThreadID: fmt.Sprintf("t%07d", i/3), Subject: strings.Repeat("s", 200), LabelIDs: []string{"INBOX"}, Fetched: true}
				if err := tx.MessagePut("a1", m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	path := filepath.Join(dir, store.FileName)
	before, _ := os.ReadFile(path)

	cmd := exec.Command(apptest.Binary(t), "compact", "--data-dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	killed := false
	for !killed {
		select {
		case err := <-exited:
			t.Fatalf("compact ended (%v) before it could be killed mid-way; the test proves nothing", err)
		default:
		}
		if _, err := os.Stat(path + ".compact"); err == nil {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	<-exited
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Fatal("the store file changed under a killed compaction")
	}
	if err := store.Verify(path); err != nil {
		t.Fatalf("the old file after the kill: %v", err)
	}
	out, err := exec.Command(apptest.Binary(t), "compact", "--data-dir", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("compact after the kill: %v\n%s", err, out)
	}
	t.Logf("after the kill: %s", strings.TrimSpace(string(out)))
	db, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *store.Tx) error {
		_, err := tx.MessageGet("a1", fmt.Sprintf("m%08d", n-1))
		return err
	}); err != nil {
		t.Fatalf("the last message after compaction: %v", err)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the killed run's temporary file is left (%v)", err)
	}
}
