package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"mailroom/store"
	"mailroom/store/storetest"
)

func TestMessageOrderingPerAttribute(t *testing.T) {
	t.Parallel()
	// Gmail: added at 10 (INBOX UNREAD), read at 11, unread at 12, read at
	// 13, labelled X at 14. The events arrive in the worst order.
	var m store.Message
	if !m.ApplyLabel(store.LabelUnread, false, 13) {
		t.Fatal("read@13 on an empty placeholder should apply")
	}
	if m.ApplyLabel(store.LabelUnread, true, 12) {
		t.Fatal("unread@12 after read@13 must not apply")
	}
	if m.ApplyLabel(store.LabelUnread, false, 11) {
		t.Fatal("read@11 after read@13 must not apply")
	}
	// The fetch happened at 12 (UNREAD present then): the newer read stays.
	m.MergeFetched(store.Message{ID: "m1", ThreadID: "t1", Subject: "hi", LabelIDs: []string{"UNREAD", "INBOX"}, HistoryID: 12})
	if m.Unread() {
		t.Fatal("snapshot at 12 overwrote read@13")
	}
	if !m.HasLabel("INBOX") || !m.Fetched || m.Subject != "hi" {
		t.Fatalf("snapshot content not taken: %+v", m)
	}
	if m.ApplyLabel("X", true, 12) {
		t.Fatal("a label change at the snapshot's id must not apply")
	}
	if !m.ApplyLabel("X", true, 14) {
		t.Fatal("label X at 14 should apply")
	}
	// An older snapshot changes nothing.
	if m.MergeFetched(store.Message{LabelIDs: []string{"UNREAD"}, HistoryID: 11}) {
		t.Fatal("an older snapshot must not apply")
	}
	if got, want := m.LabelIDs, []string{"INBOX", "X"}; !cmp.Equal(got, want) {
		t.Fatalf("labels %v, want %v", got, want)
	}
	if m.HistoryID != 14 {
		t.Fatalf("historyId %d, want 14", m.HistoryID)
	}
	// A newer snapshot wins over older single changes and prunes them.
	m.MergeFetched(store.Message{LabelIDs: []string{"UNREAD"}, HistoryID: 20})
	if !m.Unread() || m.HasLabel("X") || m.LabelHIDs != nil {
		t.Fatalf("newer snapshot not taken: %+v", m)
	}
	if !m.ApplyDelete(21) || m.ApplyLabel(store.LabelTrash, true, 22) || m.MergeFetched(store.Message{HistoryID: 30}) {
		t.Fatal("a deleted message must take nothing")
	}
}

func TestMessagesListThreadsCounts(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	acc := store.Account{ID: store.NewID(), UserID: "u1", Email: "Ann@Example.com", Status: store.AccountSyncing}
	err := db.Update(func(tx *store.Tx) error {
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		for i := range 10 {
			m := store.Message{ID: fmt.Sprintf("m%02d", i), ThreadID: fmt.Sprintf("t%d", i/3), Fetched: true, HistoryID: uint64(i + 1)}
			m.LabelIDs = []string{"INBOX"}
			if i%2 == 0 {
				m.LabelIDs = append(m.LabelIDs, "UNREAD")
			}
			if i == 9 {
				m.LabelIDs = []string{"TRASH"}
			}
			if err := tx.MessagePut(acc.ID, m); err != nil {
				return err
			}
		}
		// A placeholder is not listed.
		return tx.MessagePut(acc.ID, store.Message{ID: "m99", ThreadID: "t9"})
	})
	if err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	err = db.View(func(tx *store.Tx) error {
		if ids := tx.AccountIDsByEmail("ann@example.COM"); !cmp.Equal(ids, []string{acc.ID}) {
			t.Errorf("by email: %v", ids)
		}
		c, err := tx.MessageCounts(acc.ID)
		if err != nil {
			return err
		}
		if want := (store.MessageCounts{Total: 10, Unread: 5, Trashed: 1}); c != want {
			t.Errorf("counts %+v, want %+v", c, want)
		}
		var ids []string
		cursor := ""
		for {
			page, next, err := tx.Messages(acc.ID, store.MessageFilter{Limit: 3, Cursor: cursor, Trashed: &no})
			if err != nil {
				return err
			}
			for _, m := range page {
				ids = append(ids, m.ID)
			}
			if next == "" {
				break
			}
			cursor = next
		}
		if want := []string{"m08", "m07", "m06", "m05", "m04", "m03", "m02", "m01", "m00"}; !cmp.Equal(ids, want) {
			t.Errorf("paged ids %v, want %v", ids, want)
		}
		unread, _, err := tx.Messages(acc.ID, store.MessageFilter{Unread: &yes, LabelID: "INBOX"})
		if err != nil {
			return err
		}
		if len(unread) != 5 {
			t.Errorf("unread in inbox: %d, want 5", len(unread))
		}
		threads, next, err := tx.ThreadIDs(acc.ID, "", 2)
		if err != nil {
			return err
		}
		rest, _, err := tx.ThreadIDs(acc.ID, next, 0)
		if err != nil {
			return err
		}
		if got := append(threads, rest...); !cmp.Equal(got, []string{"t0", "t1", "t2", "t3"}) {
			t.Errorf("threads %v", got)
		}
		msgs, err := tx.ThreadMessages(acc.ID, "t1")
		if err != nil {
			return err
		}
		if len(msgs) != 3 || msgs[0].ID != "m03" {
			t.Errorf("thread t1: %+v", msgs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Deleting a message updates counts and the thread index; deleting the
	// account removes everything.
	err = db.Update(func(tx *store.Tx) error {
		m, err := tx.MessageGet(acc.ID, "m00")
		if err != nil {
			return err
		}
		m.ApplyDelete(100)
		if err := tx.MessagePut(acc.ID, m); err != nil {
			return err
		}
		c, _ := tx.MessageCounts(acc.ID)
		if want := (store.MessageCounts{Total: 9, Unread: 4, Trashed: 1}); c != want {
			t.Errorf("counts after delete %+v, want %+v", c, want)
		}
		if msgs, _ := tx.ThreadMessages(acc.ID, "t0"); len(msgs) != 2 {
			t.Errorf("thread t0 after delete: %d messages", len(msgs))
		}
		return tx.AccountDelete(acc.ID)
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.View(func(tx *store.Tx) error {
		if _, err := tx.AccountGet(acc.ID); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("account after delete: %v", err)
		}
		if _, err := tx.MessageGet(acc.ID, "m01"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("message after delete: %v", err)
		}
		if ids := tx.AccountIDsByEmail(acc.Email); len(ids) != 0 {
			t.Errorf("email index after delete: %v", ids)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSyncRunsKeepTheLast50(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	err := db.Update(func(tx *store.Tx) error {
		for i := range 60 {
			if err := tx.SyncRunAdd("a1", store.SyncRun{Kind: "history", Records: i}); err != nil {
				return err
			}
		}
		runs, err := tx.SyncRuns("a1", 0)
		if err != nil {
			return err
		}
		if len(runs) != 50 || runs[0].Records != 59 || runs[49].Records != 10 {
			t.Errorf("kept %d runs, newest %d, oldest %d", len(runs), runs[0].Records, runs[len(runs)-1].Records)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The full sync's page listed last is kept apart from the account record,
// for the full sync that listed it only, and goes with FullSyncForget and
// with the account.
func TestFullSyncListed(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	acc := store.Account{ID: store.NewID(), UserID: "u1", Email: "ann@example.com", Status: store.AccountSyncing}
	listed := func(requested uint64) []string {
		t.Helper()
		var ids []string
		if err := db.View(func(tx *store.Tx) (err error) { ids, err = tx.FullSyncListed(acc.ID, requested); return err }); err != nil {
			t.Fatal(err)
		}
		return ids
	}
	update := func(fn func(tx *store.Tx) error) {
		t.Helper()
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	update(func(tx *store.Tx) error {
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		return tx.FullSyncListedPut(acc.ID, 7, []string{"m1", "m2"})
	})
	if got := listed(7); !cmp.Equal(got, []string{"m1", "m2"}) {
		t.Fatalf("listed %v, want m1 m2", got)
	}
	if got := listed(8); got != nil {
		t.Fatalf("another full sync's page: %v, want none", got)
	}
	update(func(tx *store.Tx) error { return tx.FullSyncForget(acc.ID) })
	if got := listed(7); got != nil {
		t.Fatalf("after FullSyncForget: %v", got)
	}
	update(func(tx *store.Tx) error { return tx.FullSyncListedPut(acc.ID, 7, []string{"m3"}) })
	update(func(tx *store.Tx) error { return tx.AccountDelete(acc.ID) })
	if got := listed(7); got != nil {
		t.Fatalf("after the account's deletion: %v", got)
	}
}
