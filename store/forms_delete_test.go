package store_test

import (
	"errors"
	"testing"
	"time"

	"mailroom/store"
	"mailroom/store/storetest"
)

// Pruning deletes old submissions whose rows landed, keeps those that wait
// (buffered, or in a write not yet committed) and young ones, and goes on
// from where a bounded round stopped.
func TestSubmissionsPrune(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var a, b store.Form
	ids := map[string][]string{}
	err := db.Update(func(tx *store.Tx) (err error) {
		if a, err = tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "S", Sheet: "A", Columns: []string{"x"}}); err != nil {
			return err
		}
		if b, err = tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "S", Sheet: "B", Columns: []string{"x"}}); err != nil {
			return err
		}
		// Interleaved: a0 b0 a1 b1 ... a4 b4, one second apart per pair.
		for i := range 5 {
			for _, f := range []store.Form{a, b} {
				s, _, err := tx.SubmissionAdd(store.Submission{FormID: f.ID, SubmittedAt: t0.Add(time.Duration(i) * time.Second), Values: []string{"v"}})
				if err != nil {
					return err
				}
				ids[f.ID] = append(ids[f.ID], s.ID)
			}
		}
		// Form a: rows 0-2 landed, 3 is planned (not committed), 4 waits.
		w, _, err := tx.SheetPlan(a.ID, 3, t0)
		if err != nil {
			return err
		}
		if _, ok, err := tx.SheetCommit(a.ID, *w.Pending, t0); !ok || err != nil {
			t.Fatalf("commit: %v %v", ok, err)
		}
		// Form b: nothing written.
		_, _, err = tx.SheetPlan(a.ID, 1, t0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool {
		err := db.View(func(tx *store.Tx) error { _, err := tx.SubmissionGet(id); return err })
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	prune := func(from []byte, before time.Time, max int) (n int, next []byte) {
		t.Helper()
		err := db.Update(func(tx *store.Tx) (err error) {
			n, next, err = tx.SubmissionsPrune(from, before, max)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return n, next
	}

	// Before t0+2s: a0 and a1 are old and written; b0, b1 wait.
	n, next := prune(nil, t0.Add(2*time.Second), 3)
	if n != 2 || next == nil {
		t.Fatalf("first bounded round: pruned %d, next %x; want 2 (a0, a1 of a0 b0 a1) and more to go", n, next)
	}
	n, next = prune(next, t0.Add(2*time.Second), 3)
	if n != 0 || next != nil {
		t.Fatalf("second round: pruned %d, next %x; want 0 (b1 waits) and the young a2 ends it", n, next)
	}
	// Everything old enough: a2 goes; a3 (planned) and a4 (buffered) stay.
	if n, _ := prune(nil, t0.Add(time.Hour), 100); n != 1 {
		t.Fatalf("round over all: pruned %d, want 1 (a2)", n)
	}
	for i, id := range ids[a.ID] {
		if want := i >= 3; exists(id) != want {
			t.Errorf("form a submission %d: exists %v, want %v", i, !want, want)
		}
	}
	for i, id := range ids[b.ID] {
		if !exists(id) {
			t.Errorf("form b submission %d (never written) was pruned", i)
		}
	}
}

// Deleting a form refuses while rows wait (unless told to drop them), then
// takes the form, its bookkeeping, buffer and submissions, and frees its
// sheet; another form's submissions stay.
func TestFormDelete(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	var a, b store.Form
	var subA, subB store.Submission
	err := db.Update(func(tx *store.Tx) (err error) {
		if a, err = tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "S", Sheet: "A", Columns: []string{"x"}}); err != nil {
			return err
		}
		if b, err = tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "S", Sheet: "B", Columns: []string{"x"}}); err != nil {
			return err
		}
		if subA, _, err = tx.SubmissionAdd(store.Submission{FormID: a.ID, Values: []string{"a"}}); err != nil {
			return err
		}
		subB, _, err = tx.SubmissionAdd(store.Submission{FormID: b.ID, Values: []string{"b"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	del := func(id string, dropAtMost int) (int, error) {
		var n int
		err := db.Update(func(tx *store.Tx) (err error) { n, err = tx.FormDelete(id, dropAtMost); return err })
		return n, err
	}
	if n, err := del(a.ID, 0); !errors.Is(err, store.ErrConflict) || n != 1 {
		t.Fatalf("delete with a waiting row: %d, %v; want 1, ErrConflict", n, err)
	}
	if n, err := del(a.ID, 1); err != nil || n != 1 {
		t.Fatalf("delete dropping the waiting row: %d, %v; want 1, nil", n, err)
	}
	if _, err := del(a.ID, 1); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	err = db.Update(func(tx *store.Tx) error {
		if _, err := tx.SubmissionGet(subA.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the deleted form's submission: %v, want ErrNotFound", err)
		}
		if _, err := tx.SubmissionGet(subB.ID); err != nil {
			t.Errorf("the other form's submission: %v", err)
		}
		if _, err := tx.SheetWrites(a.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the deleted form's bookkeeping: %v, want ErrNotFound", err)
		}
		// The sheet is free again.
		_, err := tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "s", Sheet: "a", Columns: []string{"y"}})
		return err
	})
	if err != nil {
		t.Fatalf("a new form on the freed sheet: %v", err)
	}
}
