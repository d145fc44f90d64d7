package store_test

import (
	"errors"
	"testing"
	"time"

	"mailroom/store"
	"mailroom/store/storetest"
)

func TestFormsBufferPlanCommit(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	var form store.Form
	err := db.Update(func(tx *store.Tx) error {
		var err error
		form, err = tx.FormCreate(store.Form{UserID: "u", AccountID: "a", SpreadsheetID: "S", Sheet: "Sheet1", Columns: []string{"name"}, StartRow: 3})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *store.Tx) error {
		_, err := tx.FormCreate(store.Form{UserID: "u", AccountID: "b", SpreadsheetID: "s", Sheet: "SHEET1", Columns: []string{"x"}})
		return err
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second form on the same sheet: %v, want ErrConflict", err)
	}

	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 5 {
		err := db.Update(func(tx *store.Tx) error {
			s, w, err := tx.SubmissionAdd(store.Submission{FormID: form.ID, SubmittedAt: t0.Add(time.Duration(i) * time.Second), Values: []string{"v"}})
			if w.Buffered != i+1 {
				t.Errorf("buffered %d after %d adds", w.Buffered, i+1)
			}
			ids = append(ids, s.ID)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	var p store.SheetWrite
	err = db.Update(func(tx *store.Tx) error {
		w, subs, err := tx.SheetPlan(form.ID, 3, t0)
		if err != nil {
			return err
		}
		if w.Pending == nil || w.Pending.Row != 3 || w.Pending.Count != 3 || w.Pending.Attempts != 1 || len(subs) != 3 || subs[0].ID != ids[0] || subs[2].ID != ids[2] {
			t.Fatalf("plan: %+v %+v", w, subs)
		}
		// Planning again keeps the same write and counts another attempt.
		w, subs, err = tx.SheetPlan(form.ID, 500, t0)
		if err != nil {
			return err
		}
		if w.Pending.Count != 3 || w.Pending.Attempts != 2 || w.Calls != 2 || len(subs) != 3 {
			t.Fatalf("replan: %+v", w.Pending)
		}
		p = *w.Pending
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *store.Tx) error {
		w, ok, err := tx.SheetCommit(form.ID, p, t0)
		if err != nil || !ok {
			t.Fatalf("commit: %v %v", ok, err)
		}
		if w.NextRow != 6 || w.Buffered != 2 || w.RowsWritten != 3 || w.Pending != nil {
			t.Fatalf("after commit: %+v", w)
		}
		if _, ok, _ := tx.SheetCommit(form.ID, p, t0); ok {
			t.Fatal("a second commit of the same write took effect")
		}
		at, ok, err := tx.SheetOldestWaiting(form.ID)
		if err != nil || !ok || !at.Equal(t0.Add(3*time.Second)) {
			t.Fatalf("oldest waiting %v %v %v", at, ok, err)
		}
		n, err := tx.SheetsBuffered()
		if err != nil || n != 2 {
			t.Fatalf("buffered total %d %v", n, err)
		}
		_, subs, err := tx.SheetPlan(form.ID, 500, t0)
		if err != nil || len(subs) != 2 || subs[0].ID != ids[3] {
			t.Fatalf("next plan %v %v", subs, err)
		}
		s, err := tx.SubmissionGet(ids[4])
		if err != nil || s.FormID != form.ID {
			t.Fatalf("get submission: %+v %v", s, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
