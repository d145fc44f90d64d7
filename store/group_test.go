package store_test

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"mailroom/store"
	"mailroom/store/storetest"
)

// TestGroupCommitEachWriteOnce: concurrent writes through a GroupCommit
// all commit, and one that fails fails alone.
func TestGroupCommitEachWriteOnce(t *testing.T) {
	db := storetest.Open(t)
	g := &store.GroupCommit{DB: db}
	const n = 40
	bad := errors.New("this write fails")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Do(func(tx *store.Tx) error {
				if i == 7 {
					return bad
				}
				_, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u1", Data: json.RawMessage(`{}`)})
				return err
			})
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if want := error(nil); i == 7 {
			if !errors.Is(err, bad) {
				t.Errorf("write 7: %v, want its own error", err)
			}
		} else if err != want {
			t.Errorf("write %d: %v", i, err)
		}
	}
	var head uint64
	_ = db.View(func(tx *store.Tx) error { head = tx.EventsHead(); return nil })
	if head != n-1 {
		t.Errorf("%d events committed, want %d (each write once)", head, n-1)
	}
}
