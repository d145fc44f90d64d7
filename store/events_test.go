package store_test

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/store"
	"mailroom/store/storetest"
)

// eventTypes lists the types of events, in order.
func eventTypes(evs []store.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func allEvents(t *testing.T, db *store.DB, q store.EventQuery) []store.Event {
	t.Helper()
	q.Limit = 1000
	var evs []store.Event
	if err := db.View(func(tx *store.Tx) (err error) {
		evs, _, err = tx.Events(q)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestMessageChangesAreEvents: every listed change of a message, made
// through MessagePut, is its event in the same transaction; placeholders
// and their changes are not.
func TestMessageChangesAreEvents(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	put := func(m store.Message) {
		t.Helper()
		if err := db.Update(func(tx *store.Tx) error { return tx.MessagePut("a1", m) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(tx *store.Tx) error {
		if err := tx.AccountPut(store.Account{ID: "a1", UserID: "u1", Email: "a@example.com", Status: store.AccountSyncing}); err != nil {
			return err
		}
		return tx.LabelsReplace("a1", map[string]string{"Label_1": "Dev", "Label_2": "Ops"})
	}); err != nil {
		t.Fatal(err)
	}
	// A placeholder (a state event before the fetch) is no event.
	put(store.Message{ID: "m1", ThreadID: "t1", LabelIDs: []string{"UNREAD"}})
	base := store.Message{ID: "m1", ThreadID: "t1", Subject: "hi", Fetched: true, HistoryID: 10}
	with := func(labels ...string) store.Message { m := base; m.LabelIDs = labels; return m }
	put(with("INBOX", "UNREAD"))               // added
	put(with("INBOX"))                         // read
	put(with("INBOX", "UNREAD"))               // unread
	put(with("INBOX", "TRASH", "UNREAD"))      // trashed
	put(with("INBOX", "UNREAD"))               // restored
	put(with("INBOX", "Label_1", "UNREAD"))    // labeled by gmail
	put(with("INBOX", "Label_1", "UNREAD"))    // no change: no event
	gone := with("INBOX", "Label_1", "UNREAD") // deleted
	gone.Deleted = true
	put(gone)

	evs := allEvents(t, db, store.EventQuery{})
	want := []string{
		store.EventAccountStatus, store.EventMessageAdded, store.EventMessageRead, store.EventMessageUnread,
		store.EventMessageTrashed, store.EventMessageRestored, store.EventMessageLabeled, store.EventMessageDeleted,
	}
	if diff := cmp.Diff(want, eventTypes(evs)); diff != "" {
		t.Fatalf("events (-want +got):\n%s", diff)
	}
	var added store.MessageView
	if err := json.Unmarshal(evs[1].Data, &added); err != nil || added.ID != "m1" || added.Subject != "hi" || !added.Unread {
		t.Errorf("message.added data = %s (%v)", evs[1].Data, err)
	}
	var labeled map[string]any
	if err := json.Unmarshal(evs[6].Data, &labeled); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"messageId": "m1", "threadId": "t1", "added": []any{"Dev"}, "removed": []any{}, "by": "gmail"}, labeled); diff != "" {
		t.Errorf("message.labeled data (-want +got):\n%s", diff)
	}
	for i, e := range evs {
		if e.UserID != "u1" || (e.Type != store.EventAccountStatus && e.AccountID != "a1") {
			t.Errorf("event %d (%s) has user %q account %q", i, e.Type, e.UserID, e.AccountID)
		}
		if i > 0 && e.Seq <= evs[i-1].Seq {
			t.Errorf("event %d is not after the one before", i)
		}
	}
}

// TestRuleLabelIsReportedAsTheRules: a label change whose provenance is a
// rule's is reported once, by the rule, when the mirror takes it.
func TestRuleLabelIsReportedAsTheRules(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	m := store.Message{ID: "m1", ThreadID: "t1", Fetched: true, LabelIDs: []string{"INBOX"}}
	if err := db.Update(func(tx *store.Tx) error {
		if err := tx.AccountPut(store.Account{ID: "a1", UserID: "u1", Email: "a@example.com", Status: store.AccountReady}); err != nil {
			return err
		}
		if err := tx.LabelsReplace("a1", map[string]string{"Label_1": "Dev", "Label_2": "Ops"}); err != nil {
			return err
		}
		return tx.MessagePut("a1", m)
	}); err != nil {
		t.Fatal(err)
	}
	head := headOf(t, db)
	if err := db.Update(func(tx *store.Tx) error {
		if err := tx.LabelProvenancePut("a1", "m1", "Label_1", store.Provenance{RuleID: "r1", Present: true}); err != nil {
			return err
		}
		m.LabelIDs = []string{"INBOX", "Label_1", "Label_2"} // Dev by the rule, Ops by a person at once
		return tx.MessagePut("a1", m)
	}); err != nil {
		t.Fatal(err)
	}
	evs := allEvents(t, db, store.EventQuery{After: head})
	var got []map[string]any
	for _, e := range evs {
		var d map[string]any
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		got = append(got, d)
	}
	want := []map[string]any{
		{"messageId": "m1", "threadId": "t1", "added": []any{"Ops"}, "removed": []any{}, "by": "gmail"},
		{"messageId": "m1", "threadId": "t1", "added": []any{"Dev"}, "removed": []any{}, "by": "rule", "ruleId": "r1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("message.labeled events (-want +got):\n%s", diff)
	}
}

func headOf(t *testing.T, db *store.DB) uint64 {
	t.Helper()
	var head uint64
	_ = db.View(func(tx *store.Tx) error { head = tx.EventsHead(); return nil })
	return head
}

// TestEventsCursorFiltersAndPrune: reading after a cursor, by user and by
// type, pages that stop where the scan stopped, and a cursor older than
// what pruning kept answers ErrCursorExpired.
func TestEventsCursorFiltersAndPrune(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	old := time.Now().Add(-2 * time.Hour)
	if err := db.Update(func(tx *store.Tx) error {
		for i := range 10 {
			user, typ, at := "u1", store.EventFormState, time.Time{}
			if i%2 == 1 {
				user, typ = "u2", store.EventReclassifyDone
			}
			if i < 4 {
				at = old
			}
			if _, err := tx.EventAppend(store.Event{Type: typ, UserID: user, OccurredAt: at}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := len(allEvents(t, db, store.EventQuery{UserID: "u2"})); got != 5 {
		t.Errorf("u2 has %d events, want 5", got)
	}
	if got := len(allEvents(t, db, store.EventQuery{Types: map[string]bool{store.EventFormState: true}, After: 4})); got != 3 {
		t.Errorf("form.state after 4: %d events, want 3 (5, 7, 9)", got)
	}
	// A page of 2, then the rest from its next.
	var page []store.Event
	var next uint64
	_ = db.View(func(tx *store.Tx) (err error) {
		page, next, err = tx.Events(store.EventQuery{Limit: 2})
		return err
	})
	if len(page) != 2 || next != 2 {
		t.Fatalf("first page: %d events, next %d; want 2 and 2", len(page), next)
	}
	// A user with no more events moves the cursor to the head.
	_ = db.View(func(tx *store.Tx) (err error) {
		page, next, err = tx.Events(store.EventQuery{UserID: "nobody", Limit: 10})
		return err
	})
	if len(page) != 0 || next != 10 {
		t.Errorf("a user without events: %d events, next %d; want none and 10", len(page), next)
	}

	n, err := db.EventsPrune(time.Now().Add(-time.Hour), 3)
	if err != nil || n != 3 {
		t.Fatalf("prune 3 of the 4 old: %d, %v", n, err)
	}
	n, _ = db.EventsPrune(time.Now().Add(-time.Hour), 3)
	if n != 1 {
		t.Fatalf("second prune took %d, want the 1 old one left", n)
	}
	err = db.View(func(tx *store.Tx) error {
		_, _, err := tx.Events(store.EventQuery{After: 2, Limit: 10})
		return err
	})
	if !errors.Is(err, store.ErrCursorExpired) {
		t.Errorf("a cursor before the pruned events: %v, want ErrCursorExpired", err)
	}
	if got := len(allEvents(t, db, store.EventQuery{After: 4})); got != 6 {
		t.Errorf("after the pruned ones: %d events, want 6", got)
	}
	if got := len(allEvents(t, db, store.EventQuery{})); got != 6 {
		t.Errorf("from the oldest kept: %d events, want 6", got)
	}
	if got := len(allEvents(t, db, store.EventQuery{UserID: "u1"})); got != 3 {
		t.Errorf("u1 after pruning: %d events, want 3 (its index pruned too)", got)
	}
}

func TestEventCursorRoundTrip(t *testing.T) {
	t.Parallel()
	for _, seq := range []uint64{0, 1, 1 << 40} {
		got, ok := store.ParseEventCursor(store.EventCursor(seq))
		if !ok || got != seq {
			t.Errorf("cursor of %d read back as %d, %v", seq, got, ok)
		}
	}
	for _, bad := range []string{"", "cur_", "cur_!!", "evt_0001", "cur_AAAA"} {
		if _, ok := store.ParseEventCursor(bad); ok {
			t.Errorf("cursor %q was accepted", bad)
		}
	}
}

// TestEventsWakeOnCommit: a reader waiting for events wakes once the
// transaction that appended one commits, not when one rolls back.
func TestEventsWakeOnCommit(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	wait := db.EventsChanged()
	_ = db.Update(func(tx *store.Tx) error {
		if _, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u1"}); err != nil {
			return err
		}
		return errors.New("roll back")
	})
	select {
	case <-wait:
		t.Fatal("woken by a rolled-back append")
	default:
	}
	if headOf(t, db) != 0 {
		t.Fatal("a rolled-back event was kept")
	}
	_ = db.Update(func(tx *store.Tx) error {
		_, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u1"})
		return err
	})
	select {
	case <-wait:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a committed append")
	}
	if got := db.EventCounts()[store.EventFormState]; got != 1 {
		t.Errorf("form.state counted %d times, want 1", got)
	}
}

// TestEventsCursorAhead: a position past the newest event is refused,
// never read as one before the oldest (its number plus one wraps to 0 at
// the top), whether the query is every user's or one user's.
func TestEventsCursorAhead(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	appendEvents(t, db, "u1", 3)
	for _, after := range []uint64{4, 1 << 40, math.MaxUint64} {
		for _, user := range []string{"", "u1"} {
			err := db.View(func(tx *store.Tx) error {
				evs, _, err := tx.Events(store.EventQuery{After: after, UserID: user, Limit: 10})
				if len(evs) != 0 {
					t.Errorf("after %d (user %q): %d events", after, user, len(evs))
				}
				return err
			})
			if !errors.Is(err, store.ErrCursorAhead) {
				t.Errorf("after %d (user %q): %v, want ErrCursorAhead", after, user, err)
			}
		}
	}
	_ = db.View(func(tx *store.Tx) error {
		for after, want := range map[uint64]error{0: nil, 3: nil, 4: store.ErrCursorAhead} {
			if err := tx.EventCursorCheck(after); !errors.Is(err, want) {
				t.Errorf("check %d: %v, want %v", after, err, want)
			}
		}
		return nil
	})
	if got := len(allEvents(t, db, store.EventQuery{After: 3})); got != 0 {
		t.Errorf("after the newest: %d events", got)
	}
}

func appendEvents(t testing.TB, db *store.DB, user string, n int) {
	t.Helper()
	if err := db.Update(func(tx *store.Tx) error {
		for range n {
			if _, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: user}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestEventsWakeOnlyTheirUser: a reader of one user's events is woken by
// a commit with an event of that user, not by another user's; a reader of
// every event is woken by both.
func TestEventsWakeOnlyTheirUser(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	alice, all := db.EventsChangedFor("alice"), db.EventsChanged()
	appendEvents(t, db, "bob", 1)
	select {
	case <-alice:
		t.Fatal("alice's reader was woken by bob's event")
	default:
	}
	select {
	case <-all:
	default:
		t.Fatal("the reader of every event was not woken by bob's")
	}
	appendEvents(t, db, "alice", 1)
	select {
	case <-alice:
	default:
		t.Fatal("alice's reader was not woken by her event")
	}
	if again := db.EventsChangedFor("alice"); again == alice {
		t.Error("after a wake, alice's reader got the closed channel again")
	}
}

// FuzzParseEventCursor: any text a client sends as a cursor is either
// refused or read as a position whose cursor reads back the same; read
// after, as the feed does, it answers only later events, or refuses a
// position past the newest (never wrapping to the oldest) or before the
// kept ones.
func FuzzParseEventCursor(f *testing.F) {
	for _, s := range []string{"", "cur_", store.EventCursor(0), store.EventCursor(1 << 40), "cur_AAAAAAAAAAA", "now", "cur_//////////8",
		"cur___________8", store.EventCursor(1), store.EventCursor(5), store.EventCursor(6)} {
		f.Add(s)
	}
	db := storetest.Open(f)
	old := time.Now().Add(-time.Hour)
	if err := db.Update(func(tx *store.Tx) error {
		for i := range 6 {
			at := time.Time{}
			if i < 2 {
				at = old
			}
			if _, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u" + strconv.Itoa(i%2), OccurredAt: at}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		f.Fatal(err)
	}
	if _, err := db.EventsPrune(time.Now().Add(-time.Minute), 10); err != nil { // 1 and 2
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		seq, ok := store.ParseEventCursor(s)
		if !ok {
			return
		}
		if back, ok := store.ParseEventCursor(store.EventCursor(seq)); !ok || back != seq {
			t.Fatalf("cursor %q read as %d, which writes back as %d (%v)", s, seq, back, ok)
		}
		for _, user := range []string{"", "u1"} {
			var evs []store.Event
			var next uint64
			err := db.View(func(tx *store.Tx) (err error) {
				evs, next, err = tx.Events(store.EventQuery{After: seq, UserID: user, Limit: 10})
				return err
			})
			switch {
			case seq > 6 && !errors.Is(err, store.ErrCursorAhead):
				t.Fatalf("cursor %d past the newest (6), user %q: %v, want ErrCursorAhead", seq, user, err)
			case seq == 1 && !errors.Is(err, store.ErrCursorExpired):
				t.Fatalf("cursor 1, before the kept ones, user %q: %v, want ErrCursorExpired", user, err)
			case seq > 6 || seq == 1:
			case err != nil:
				t.Fatalf("cursor %d, user %q: %v", seq, user, err)
			case next < seq || next > 6:
				t.Fatalf("cursor %d, user %q: next %d", seq, user, next)
			}
			for _, e := range evs {
				if e.Seq <= seq {
					t.Fatalf("cursor %d, user %q: answered event %d, not after it", seq, user, e.Seq)
				}
			}
		}
	})
}
