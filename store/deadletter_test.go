package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"mailroom/store"
	"mailroom/store/storetest"
)

func TestDeadLetterCountsFollowPutsAndDeletes(t *testing.T) {
	db := storetest.Open(t)
	counts := func() map[string]int {
		t.Helper()
		var c map[string]int
		if err := db.View(func(tx *store.Tx) (err error) { c, err = tx.DeadLetterCounts(); return err }); err != nil {
			t.Fatal(err)
		}
		return c
	}
	err := db.Update(func(tx *store.Tx) error {
		for i, typ := range []string{"a:x", "a:x", "b:y"} {
			if err := tx.DeadLetterPut(store.DeadLetter{ID: id(i + 1), Type: typ}); err != nil {
				return err
			}
		}
		// Replacing a dead letter moves its count, never doubles it.
		return tx.DeadLetterPut(store.DeadLetter{ID: id(2), Type: "b:y"})
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"a:x": 1, "b:y": 2}, counts()); diff != "" {
		t.Fatalf("counts (-want +got):\n%s", diff)
	}
	err = db.Update(func(tx *store.Tx) error {
		if err := tx.DeadLetterDiscard(id(1)); err != nil {
			return err
		}
		if err := tx.DeadLetterDiscard(id(1)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("second delete: %v, want ErrNotFound", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"b:y": 2}, counts()); diff != "" {
		t.Fatalf("counts after delete (-want +got):\n%s", diff)
	}
}

// id is the outbox-style id of sequence n.
func id(n int) string { return fmt.Sprintf("%016x", n) }
