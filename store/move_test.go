package store_test

import (
	"errors"
	"testing"
	"time"

	"mailroom/store"
	"mailroom/store/storetest"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A user exported from one store and imported into another keeps its
// account (token still opens), mirror, waiting rows in order (renumbered
// past the target's own submissions) and webhook (its cursor at the
// target's newest event); the source forgets the rows and refuses the
// user's forms; a second import, another key or a newer format is refused.
func TestMoveExportImport(t *testing.T) {
	t.Parallel()
	src, dst := storetest.Open(t), storetest.Open(t)
	var u store.User
	var form store.Form
	acc := store.Account{ID: store.NewID(), Email: "Box@example.com", Status: store.AccountReady, HistoryID: 42}
	must(t, src.Update(func(tx *store.Tx) error {
		var err error
		if u, err = tx.UserCreate("ann@example.com", "Ann"); err != nil {
			return err
		}
		acc.UserID = u.ID
		acc.Token = src.Seal([]byte("oauth"), acc.ID)
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		if err := tx.MessagePut(acc.ID, store.Message{ID: "m1", ThreadID: "t1", LabelIDs: []string{"INBOX"}, Fetched: true, HistoryID: 40}); err != nil {
			return err
		}
		if form, err = tx.FormCreate(store.Form{UserID: u.ID, AccountID: acc.ID, SpreadsheetID: "S", Sheet: "Sheet1", Columns: []string{"a"}}); err != nil {
			return err
		}
		for _, v := range []string{"one", "two"} {
			if _, _, err := tx.SubmissionAdd(store.Submission{FormID: form.ID, Values: []string{v}}); err != nil {
				return err
			}
		}
		_, err = tx.WebhookCreate(store.Webhook{URL: "http://hook", UserID: u.ID}, "secret")
		return err
	}))
	// The target already numbered submissions of its own and has events.
	must(t, dst.Update(func(tx *store.Tx) error {
		f, err := tx.FormCreate(store.Form{UserID: "other", AccountID: "x", SpreadsheetID: "T", Sheet: "Sheet1", Columns: []string{"a"}})
		if err != nil {
			return err
		}
		for range 3 {
			if _, _, err := tx.SubmissionAdd(store.Submission{FormID: f.ID, Values: []string{"theirs"}}); err != nil {
				return err
			}
		}
		_, err = tx.EventAppend(store.Event{Type: "sheets.row_written"})
		return err
	}))

	var m *store.Move
	must(t, src.Update(func(tx *store.Tx) error {
		var err error
		if m, err = tx.MoveExport(u.ID); err != nil {
			return err
		}
		return tx.MoveRetire(u.ID, time.Now())
	}))
	must(t, dst.Update(func(tx *store.Tx) error {
		got, err := tx.MoveImport(m)
		if err != nil {
			return err
		}
		if len(got.Accounts) != 1 || len(got.Forms) != 1 || got.Forms[0] != form.ID {
			t.Errorf("imported %+v, want one account and form %s waiting", got, form.ID)
		}
		return nil
	}))
	must(t, dst.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(acc.ID)
		if err != nil {
			return err
		}
		if tok, err := dst.Unseal(a.Token, a.ID); err != nil || string(tok) != "oauth" || a.HistoryID != 42 {
			t.Errorf("account on the target: token %q (%v), history id %d", tok, err, a.HistoryID)
		}
		if msg, err := tx.MessageGet(acc.ID, "m1"); err != nil || msg.HistoryID != 40 {
			t.Errorf("message on the target: %+v, %v", msg, err)
		}
		_, rows, err := tx.SheetPlan(form.ID, 10, time.Now())
		if err != nil {
			return err
		}
		if len(rows) != 2 || rows[0].Values[0] != "one" || rows[1].Values[0] != "two" || rows[0].ID != "0000000000000004" {
			t.Errorf("waiting rows on the target: %+v", rows)
		}
		hooks, err := tx.Webhooks()
		if err != nil {
			return err
		}
		var mine int
		for _, w := range hooks {
			if w.UserID == u.ID {
				mine++
				if w.Cursor != tx.EventsHead() {
					t.Errorf("webhook cursor %d, want the target's head %d", w.Cursor, tx.EventsHead())
				}
			}
		}
		if mine != 1 {
			t.Errorf("%d webhooks of the user on the target, want 1", mine)
		}
		return nil
	}))
	must(t, src.View(func(tx *store.Tx) error {
		a, _ := tx.AccountGet(acc.ID)
		f, _ := tx.FormGet(form.ID)
		w, _ := tx.SheetWrites(form.ID)
		if a.Status != store.AccountDisconnected || a.StatusReason != store.MovedReason || a.Token != nil || f.MovedAt.IsZero() || w.Buffered != 0 {
			t.Errorf("source after export: account %s %q, form moved %v, %d rows waiting", a.Status, a.StatusReason, f.MovedAt, w.Buffered)
		}
		return nil
	}))

	if err := dst.Update(func(tx *store.Tx) error { _, err := tx.MoveImport(m); return err }); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second import: %v, want ErrConflict", err)
	}
	other, err := store.Open(t.TempDir(), store.Options{SecretKey: []byte("0123456789abcdef0123456789abcdef")})
	must(t, err)
	defer other.Close()
	if err := other.Update(func(tx *store.Tx) error { _, err := tx.MoveImport(m); return err }); !errors.Is(err, store.ErrMoveKey) {
		t.Errorf("import under another key: %v, want ErrMoveKey", err)
	}
	newer := *m
	newer.Format = store.MoveFormat + 1
	if err := other.Update(func(tx *store.Tx) error { _, err := tx.MoveImport(&newer); return err }); !errors.Is(err, store.ErrMoveFormat) {
		t.Errorf("import of a newer format: %v, want ErrMoveFormat", err)
	}
}

// An account whose email is already connected on the target is refused.
func TestMoveImportRefusesConnectedEmail(t *testing.T) {
	t.Parallel()
	src, dst := storetest.Open(t), storetest.Open(t)
	var m *store.Move
	must(t, src.Update(func(tx *store.Tx) error {
		u, err := tx.UserCreate("ann@example.com", "Ann")
		if err != nil {
			return err
		}
		if err := tx.AccountPut(store.Account{ID: store.NewID(), UserID: u.ID, Email: "box@example.com"}); err != nil {
			return err
		}
		m, err = tx.MoveExport(u.ID)
		return err
	}))
	must(t, dst.Update(func(tx *store.Tx) error {
		return tx.AccountPut(store.Account{ID: store.NewID(), UserID: "bob", Email: "BOX@example.com"})
	}))
	err := dst.Update(func(tx *store.Tx) error { _, err := tx.MoveImport(m); return err })
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("import: %v, want ErrConflict", err)
	}
	t.Log(err)
}
