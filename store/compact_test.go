package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mailroom/store"
)

// fillAccount stores n messages of an account, 5,000 per transaction.
func fillAccount(t *testing.T, db *store.DB, id string, n int) {
	t.Helper()
	if err := db.Update(func(tx *store.Tx) error {
		return tx.AccountPut(store.Account{ID: id, UserID: "u1", Email: id + "@example.com", Status: "ready"})
	}); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; {
		err := db.Update(func(tx *store.Tx) error {
			for i := done; i < min(done+5000, n); i++ {
				m := store.Message{
					ID: fmt.Sprintf("%s-%08d", id, i), ThreadID: fmt.Sprintf("t%07d", i/3),
					From: "Someone <someone@example.com>", To: id + "@example.com",
					Subject: fmt.Sprintf("Message %d about the quarterly numbers", i),
					Snippet: strings.Repeat("a snippet of the message body ", 4),
					Date:    time.Unix(1700000000+int64(i), 0).UTC(), LabelIDs: []string{"INBOX", "UNREAD"},
					HistoryID: uint64(1000 + i), Fetched: true,
				}
				if err := tx.MessagePut(id, m); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		done += 5000
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestCompactShrinksAfterADelete deletes an account with 50,000 mirrored
// messages next to one with 5,000: the file keeps its size until Compact,
// which shrinks it by at least the deleted share and keeps every key.
func TestCompactShrinksAfterADelete(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 55,000 messages")
	}
	dir := t.TempDir()
	open := func() *store.DB {
		db, err := store.Open(dir, store.Options{SecretKey: make([]byte, 32)})
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
	db := open()
	fillAccount(t, db, "big", 50000)
	fillAccount(t, db, "small", 5000)
	if err := db.Update(func(tx *store.Tx) error { return tx.AccountDelete("big") }); err != nil {
		t.Fatal(err)
	}
	// The messages' events stay for the events' retention; here it has
	// passed.
	for {
		n, err := db.EventsPrune(time.Now().Add(time.Hour), 10000)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	stats := db.FileStats()
	db.Close()
	path := filepath.Join(dir, store.FileName)
	before := fileSize(t, path)
	if stats.Size != before || stats.Free < before/2 {
		t.Fatalf("file stats %+v for a file of %d bytes after deleting most of it", stats, before)
	}

	if _, err := store.Compact(dir, time.Second, false); err != nil {
		t.Fatal(err)
	}
	after := fileSize(t, path)
	const deletedShare = 50000.0 / 55000.0
	t.Logf("%d bytes before, %d after (%.0f%% smaller; %.0f%% of the messages deleted)", before, after, 100*(1-float64(after)/float64(before)), 100*deletedShare)
	if float64(after) > float64(before)*(1-deletedShare) {
		t.Fatalf("the file shrank from %d to %d bytes, less than the deleted share", before, after)
	}
	if _, err := os.Stat(path + ".bak"); !os.IsNotExist(err) {
		t.Fatalf("the old file is still there (%v)", err)
	}
	db = open()
	defer db.Close()
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
	err := db.View(func(tx *store.Tx) error {
		if _, err := tx.MessageGet("small", "small-00004999"); err != nil {
			return err
		}
		if _, err := tx.AccountGet("big"); err == nil {
			return fmt.Errorf("the deleted account is back")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCompactRefusesAFileInUse: with the service running (the file
// locked), Compact says to stop it and changes nothing.
func TestCompactRefusesAFileInUse(t *testing.T) {
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := store.Compact(dir, 100*time.Millisecond, false); err == nil || !strings.Contains(err.Error(), "stop the service") {
		t.Fatalf("compact of a file in use: %v", err)
	}
}
