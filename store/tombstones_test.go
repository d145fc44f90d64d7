package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openTest(t *testing.T, dir string) *DB {
	t.Helper()
	db, err := Open(dir, Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// A message that becomes a tombstone is stamped and indexed; pruning takes
// the ones made before the cut (with their label provenance), in bounded
// rounds, and leaves younger tombstones and live messages alone.
func TestTombstonesPrune(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	acc := Account{ID: NewID(), UserID: "u", Email: "a@example.com", Status: AccountReady}
	err := db.Update(func(tx *Tx) error {
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		for i := range 5 {
			id := fmt.Sprintf("m%d", i)
			m := Message{ID: id}
			m.MergeFetched(Message{ID: id, ThreadID: id, Subject: "s", HistoryID: 10})
			if i < 4 {
				m.ApplyDelete(20)
			}
			if err := tx.MessagePut(acc.ID, m); err != nil {
				return err
			}
			if err := tx.LabelProvenancePut(acc.ID, id, "Label_1", Provenance{RuleID: "r", Present: true}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var stamped time.Time
	_ = db.View(func(tx *Tx) error { m, _ := tx.MessageGet(acc.ID, "m0"); stamped = m.DeletedAt; return nil })
	if stamped.IsZero() {
		t.Fatal("a new tombstone has no DeletedAt")
	}
	prune := func(before time.Time, max int) (int, bool) {
		var n int
		var more bool
		if err := db.Update(func(tx *Tx) (err error) { n, more, err = tx.TombstonesPrune(acc.ID, before, max); return err }); err != nil {
			t.Fatal(err)
		}
		return n, more
	}
	if n, _ := prune(stamped.Add(-time.Minute), 10); n != 0 {
		t.Fatalf("pruned %d tombstones made after the cut", n)
	}
	if n, more := prune(time.Now().Add(time.Minute), 3); n != 3 || !more {
		t.Fatalf("bounded round: pruned %d (more %v), want 3 and more", n, more)
	}
	if n, more := prune(time.Now().Add(time.Minute), 3); n != 1 || more {
		t.Fatalf("second round: pruned %d (more %v), want 1 and done", n, more)
	}
	_ = db.View(func(tx *Tx) error {
		for i := range 5 {
			id := fmt.Sprintf("m%d", i)
			_, err := tx.MessageGet(acc.ID, id)
			prov, _ := tx.LabelProvenance(acc.ID, id)
			if gone := i < 4; gone != errors.Is(err, ErrNotFound) || gone != (len(prov) == 0) {
				t.Errorf("message %s: get %v, provenance %v; want gone=%v", id, err, prov, gone)
			}
		}
		return nil
	})
}

// versionBefore is the schema version just before the named migration.
func versionBefore(t testing.TB, name string) int {
	t.Helper()
	for i, m := range migrations {
		if m.name == name {
			return i
		}
	}
	t.Fatalf("no migration %q", name)
	return 0
}

// The "tombstone index" migration stamps and indexes the tombstones a file
// made before it holds, so they are pruned too.
func TestTombstoneIndexMigration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	acc := Account{ID: NewID(), UserID: "u", Email: "a@example.com", Status: AccountReady}
	err := db.Update(func(tx *Tx) error {
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		return tx.MessagePut(acc.ID, Message{ID: "live", ThreadID: "live", Fetched: true})
	})
	if err != nil {
		t.Fatal(err)
	}
	// As an older build left it: a tombstone without DeletedAt or index
	// entry, and the schema one version back.
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		data := tx.Bucket(bucketGmailData).Bucket([]byte(acc.ID))
		if err := putJSON(data.Bucket(subMessages), []byte("old"), Message{ID: "old", Deleted: true, DeletedHID: 5}); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, fmt.Appendf(nil, "%d", versionBefore(t, "tombstone index")))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, dir)
	defer db.Close()
	var n int
	err = db.Update(func(tx *Tx) (err error) {
		n, _, err = tx.TombstonesPrune(acc.ID, time.Now().Add(time.Minute), 10)
		return err
	})
	if err != nil || n != 1 {
		t.Fatalf("prune after the migration: %d, %v; want the old tombstone", n, err)
	}
	if err := db.View(func(tx *Tx) error { _, err := tx.MessageGet(acc.ID, "live"); return err }); err != nil {
		t.Fatalf("the live message: %v", err)
	}
}
