package store_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"mailroom/store"
	"mailroom/store/storetest"
)

// A full sync's listing is kept grouped by thread over every page: a
// thread's messages listed on two pages are one group, in the order its
// first message was listed; an id listed again is not added twice; ids
// without a thread id are groups of one; done groups go, and FullSyncForget
// and the account's deletion take the rest. An old record's page (ids
// without thread ids, FullSyncListed) is regrouped as groups of one.
func TestFullSyncGroups(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	acc := store.Account{ID: store.NewID(), UserID: "u1", Email: "ann@example.com", Status: store.AccountSyncing}
	update := func(fn func(tx *store.Tx) error) {
		t.Helper()
		if err := db.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	groups := func(max int) []store.FullSyncGroup {
		t.Helper()
		var gs []store.FullSyncGroup
		if err := db.View(func(tx *store.Tx) (err error) { gs, err = tx.FullSyncGroups(acc.ID, max); return err }); err != nil {
			t.Fatal(err)
		}
		return gs
	}
	update(func(tx *store.Tx) error {
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		// Page 1, then page 2 with more of threads a and b, m2 listed again.
		if err := tx.FullSyncListAdd(acc.ID, []store.FullSyncRef{{ID: "m1", ThreadID: "a"}, {ID: "m2", ThreadID: "b"}, {ID: "m3", ThreadID: "a"}}); err != nil {
			return err
		}
		return tx.FullSyncListAdd(acc.ID, []store.FullSyncRef{{ID: "m4", ThreadID: "c"}, {ID: "m5", ThreadID: "b"}, {ID: "m2", ThreadID: "b"}, {ID: "m6", ThreadID: "a"}})
	})
	want := []store.FullSyncGroup{
		{Seq: 1, ThreadID: "a", IDs: []string{"m1", "m3", "m6"}},
		{Seq: 2, ThreadID: "b", IDs: []string{"m2", "m5"}},
		{Seq: 3, ThreadID: "c", IDs: []string{"m4"}},
	}
	if diff := cmp.Diff(want, groups(100)); diff != "" {
		t.Fatalf("groups (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[:2], groups(4)); diff != "" {
		t.Fatalf("groups up to 4 messages, a thread not split (-want +got):\n%s", diff)
	}
	update(func(tx *store.Tx) error { return tx.FullSyncGroupsDone(acc.ID, []uint64{1, 3}) })
	if diff := cmp.Diff(want[1:2], groups(100)); diff != "" {
		t.Fatalf("after two groups done (-want +got):\n%s", diff)
	}
	update(func(tx *store.Tx) error {
		if err := tx.FullSyncForget(acc.ID); err != nil {
			return err
		}
		return tx.FullSyncListedPut(acc.ID, 7, []string{"o1", "o2"})
	})
	if got := groups(100); len(got) != 0 {
		t.Fatalf("after FullSyncForget: %+v", got)
	}
	update(func(tx *store.Tx) error { return tx.FullSyncRegroup(acc.ID, 7) })
	want = []store.FullSyncGroup{{Seq: 1, IDs: []string{"o1"}}, {Seq: 2, IDs: []string{"o2"}}}
	if diff := cmp.Diff(want, groups(100)); diff != "" {
		t.Fatalf("an old record's page regrouped (-want +got):\n%s", diff)
	}
	var old []string
	if err := db.View(func(tx *store.Tx) (err error) { old, err = tx.FullSyncListed(acc.ID, 7); return err }); err != nil || old != nil {
		t.Fatalf("the old page after FullSyncRegroup: %v (%v), want none", old, err)
	}
	update(func(tx *store.Tx) error { return tx.AccountDelete(acc.ID) })
	if got := groups(100); len(got) != 0 {
		t.Fatalf("after the account's deletion: %+v", got)
	}
}
