// Package storetest opens a store in a test's temp dir and checks its
// consistency when the test ends, as bbolt's own tests do.
package storetest

import (
	"testing"

	"mailroom/store"
)

// Open returns a fresh store in t.TempDir() with a fixed test key.
func Open(t testing.TB) *store.DB {
	t.Helper()
	return OpenAt(t, t.TempDir())
}

// OpenAt opens the store in dir; on cleanup it checks and closes it.
func OpenAt(t testing.TB, dir string) *store.DB {
	t.Helper()
	db, err := store.Open(dir, store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Check(); err != nil {
			t.Errorf("storetest: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("storetest: close: %v", err)
		}
	})
	return db
}
