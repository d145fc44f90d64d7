package store_test

import (
	"testing"
	"time"

	"mailroom/store"
	"mailroom/store/storetest"
)

// The bytes of a user's submissions grow with each one stored, over all
// its forms and apart from other users', shrink as written ones are pruned,
// and go with a deleted form's submissions.
func TestUserSubmissionBytes(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	bytesOf := func(user string) (n int64) {
		t.Helper()
		if err := db.View(func(tx *store.Tx) error { n = tx.UserSubmissionBytes(user); return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var a, b, c store.Form
	err := db.Update(func(tx *store.Tx) (err error) {
		if a, err = tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "S", Sheet: "A", Columns: []string{"x"}}); err != nil {
			return err
		}
		if b, err = tx.FormCreate(store.Form{UserID: "u", SpreadsheetID: "S", Sheet: "B", Columns: []string{"x"}}); err != nil {
			return err
		}
		if c, err = tx.FormCreate(store.Form{UserID: "v", SpreadsheetID: "S", Sheet: "C", Columns: []string{"x"}}); err != nil {
			return err
		}
		for i, f := range []store.Form{a, a, b, c} {
			if _, _, err := tx.SubmissionAdd(store.Submission{FormID: f.ID, SubmittedAt: t0.Add(time.Duration(i) * time.Second), Values: []string{"0123456789"}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	one := bytesOf("v")
	if one < 10 || bytesOf("u") != 3*one {
		t.Fatalf("bytes of u %d and v %d: want v's one submission (at least its 10 bytes of answer) and u's three times that", bytesOf("u"), one)
	}

	// a's two rows land and are pruned; b's row waits and stays counted.
	err = db.Update(func(tx *store.Tx) error {
		w, _, err := tx.SheetPlan(a.ID, 2, t0)
		if err != nil {
			return err
		}
		if _, ok, err := tx.SheetCommit(a.ID, *w.Pending, t0); !ok || err != nil {
			t.Fatalf("commit: %v %v", ok, err)
		}
		n, _, err := tx.SubmissionsPrune(nil, t0.Add(time.Hour), 100)
		if n != 2 {
			t.Fatalf("pruned %d, want a's 2", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := bytesOf("u"); got != one {
		t.Fatalf("bytes of u after pruning a's rows: %d, want b's %d", got, one)
	}
	err = db.Update(func(tx *store.Tx) error { _, err := tx.FormDelete(b.ID, 10); return err })
	if err != nil {
		t.Fatal(err)
	}
	if got, other := bytesOf("u"), bytesOf("v"); got != 0 || other != one {
		t.Fatalf("after deleting b: u %d, v %d; want 0 and %d", got, other, one)
	}
}
