package store_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/store"
	"mailroom/store/storetest"
)

// userChange is a change of user u1's (account a1, form f1) that gives an
// event of typ.
type userChange struct {
	typ    string
	change func(tx *store.Tx) error
}

// userChanges holds one change per event type the store emits, in an order
// where each finds what it needs. TestEveryEventCarriesItsUser fails when a
// type is added without its row here.
func userChanges(f1 string) []userChange {
	msg := func(labels ...string) store.Message {
		return store.Message{ID: "m1", ThreadID: "t1", Subject: "hi", Fetched: true, HistoryID: 10, LabelIDs: labels}
	}
	put := func(m store.Message) func(tx *store.Tx) error {
		return func(tx *store.Tx) error { return tx.MessagePut("a1", m) }
	}
	deleted := msg("INBOX")
	deleted.Deleted = true
	dead := store.DeadLetter{ID: id(1), Type: "gmail:sync", Queue: "gmail-sync", Payload: json.RawMessage(`{"accountId":"a1"}`)}
	return []userChange{
		{store.EventAccountStatus, func(tx *store.Tx) error {
			a, err := tx.AccountGet("a1")
			a.Status = store.AccountReady
			return errors2(err, tx.AccountPut(a))
		}},
		{store.EventMessageAdded, put(msg("INBOX", "UNREAD"))},
		{store.EventMessageRead, put(msg("INBOX"))},
		{store.EventMessageUnread, put(msg("INBOX", "UNREAD"))},
		{store.EventMessageTrashed, put(msg("INBOX", "TRASH", "UNREAD"))},
		{store.EventMessageRestored, put(msg("INBOX", "UNREAD"))},
		{store.EventMessageLabeled, put(msg("INBOX", "Label_1", "UNREAD"))},
		{store.EventMessageDeleted, put(deleted)},
		{store.EventReclassifyDone, func(tx *store.Tx) error {
			j := store.ReclassifyJob{UserID: "u1", RuleIDs: []string{"r1"}, StartedAt: time.Now()}
			if err := tx.ReclassifyJobCreate(&j); err != nil {
				return err
			}
			j.FinishedAt = time.Now()
			return tx.ReclassifyJobPut(j)
		}},
		{store.EventFormCreated, func(tx *store.Tx) error {
			_, err := tx.FormCreate(store.Form{UserID: "u1", AccountID: "a1", SpreadsheetID: "s2", Sheet: "Sheet1", Columns: []string{"name"}})
			return err
		}},
		{store.EventFormDeleted, func(tx *store.Tx) error {
			fs, err := tx.Forms()
			for _, f := range fs {
				if f.SpreadsheetID == "s2" {
					_, err = tx.FormDelete(f.ID, 0)
				}
			}
			return err
		}},
		{store.EventFormState, func(tx *store.Tx) error {
			_, _, err := tx.SheetWaiting(f1, "the sheet is gone", time.Now())
			return err
		}},
		{store.EventFormRowsWritten, func(tx *store.Tx) error {
			if _, _, err := tx.SubmissionAdd(store.Submission{FormID: f1, SubmittedAt: time.Now(), Values: []string{"ann"}}); err != nil {
				return err
			}
			w, _, err := tx.SheetPlan(f1, 10, time.Now())
			if err != nil {
				return err
			}
			_, _, err = tx.SheetCommit(f1, *w.Pending, time.Now())
			return err
		}},
		{store.EventWebhookTest, func(tx *store.Tx) error {
			// What the webhooks pipeline's SendTest does: the test event
			// carries its webhook's user.
			w, err := tx.WebhookCreate(store.Webhook{URL: "https://hooks.example/u1", UserID: "u1"}, "whsec_test")
			if err != nil {
				return err
			}
			_, err = tx.EventAppend(store.Event{Type: store.EventWebhookTest, UserID: w.UserID, ForWebhook: w.ID})
			return err
		}},
		{store.EventDeadLetterAdded, func(tx *store.Tx) error { return tx.DeadLetterPut(dead) }},
		{store.EventDeadLetterRedone, func(tx *store.Tx) error { return tx.DeadLetterRedriven(dead.ID) }},
		{store.EventDeadLetterDiscarded, func(tx *store.Tx) error {
			d := dead
			d.ID = id(2)
			return errors2(tx.DeadLetterPut(d), tx.DeadLetterDiscard(d.ID))
		}},
	}
}

// errors2 is the first of two errors.
func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// setUpUser makes user u1's account a1 and a form, whose id it returns.
func setUpUser(t *testing.T, db *store.DB) string {
	t.Helper()
	var f store.Form
	err := db.Update(func(tx *store.Tx) (err error) {
		if err := tx.AccountPut(store.Account{ID: "a1", UserID: "u1", Email: "a@example.com", Status: store.AccountSyncing}); err != nil {
			return err
		}
		if err := tx.LabelsReplace("a1", map[string]string{"Label_1": "Dev"}); err != nil {
			return err
		}
		f, err = tx.FormCreate(store.Form{UserID: "u1", AccountID: "a1", SpreadsheetID: "s1", Sheet: "Sheet1", Columns: []string{"name"}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return f.ID
}

// TestEveryEventCarriesItsUser: for every event type, a change of a user's
// gives events that all carry that user (CONTRACT.md: every event has its
// user; a dead letter's is the user whose work failed).
func TestEveryEventCarriesItsUser(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	form := setUpUser(t, db)
	var covered []string
	for _, c := range userChanges(form) {
		head := headOf(t, db)
		if err := db.Update(c.change); err != nil {
			t.Fatalf("%s: %v", c.typ, err)
		}
		evs := allEvents(t, db, store.EventQuery{After: head})
		if c.typ == store.EventWebhookTest {
			evs = webhookTestEvents(t, db, head)
		}
		if !slices.Contains(eventTypes(evs), c.typ) {
			t.Errorf("%s: the change gave %v, not its event", c.typ, eventTypes(evs))
		}
		for _, e := range evs {
			if e.UserID != "u1" {
				t.Errorf("%s: event %s %s has userId %q, want u1", c.typ, e.ID(), e.Type, e.UserID)
			}
		}
		covered = append(covered, c.typ)
	}
	slices.Sort(covered)
	all := store.EventTypes()
	slices.Sort(all)
	if diff := cmp.Diff(all, covered); diff != "" {
		t.Errorf("event types without a user's change in userChanges (-every type +covered):\n%s", diff)
	}
}

// TestDeadLetterEventsCarryTheUserWhoseWorkFailed: a dead letter's events
// carry the user of what its task's payload names (userId, account, form or
// webhook), also once that account, form or webhook is deleted (its tasks
// then fail for good), and no user for work of no user's.
func TestDeadLetterEventsCarryTheUserWhoseWorkFailed(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	form := setUpUser(t, db)
	var userHook, adminHook store.Webhook
	err := db.Update(func(tx *store.Tx) (err error) {
		if err := tx.AccountPut(store.Account{ID: "a2", UserID: "u2", Email: "b@example.com", Status: store.AccountReady}); err != nil {
			return err
		}
		if userHook, err = tx.WebhookCreate(store.Webhook{URL: "https://example.com/u1", UserID: "u1"}, "whsec_x"); err != nil {
			return err
		}
		adminHook, err = tx.WebhookCreate(store.Webhook{URL: "https://example.com/all"}, "whsec_y")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, payload, want string
		gone                func(tx *store.Tx) error // deletes what the payload names, before the task fails
	}{
		{name: "account", payload: `{"accountId":"a1"}`, want: "u1"},
		{name: "another user's account", payload: `{"accountId":"a2"}`, want: "u2"},
		{name: "form", payload: `{"formId":"` + form + `"}`, want: "u1"},
		{name: "webhook", payload: `{"webhookId":"` + userHook.ID + `","batch":{}}`, want: "u1"},
		{name: "user", payload: `{"jobId":"j1","userId":"u1","accountId":"a2"}`, want: "u1"},
		{name: "webhook of no user", payload: `{"webhookId":"` + adminHook.ID + `"}`, want: ""},
		{name: "no owner", payload: `{"fail":"permanent"}`, want: ""},
		{name: "deleted account", payload: `{"accountId":"a2"}`, want: "u2",
			gone: func(tx *store.Tx) error { return tx.AccountDelete("a2") }},
		{name: "deleted form", payload: `{"formId":"` + form + `"}`, want: "u1",
			gone: func(tx *store.Tx) error { _, err := tx.FormDelete(form, 0); return err }},
		{name: "deleted webhook", payload: `{"webhookId":"` + userHook.ID + `"}`, want: "u1",
			gone: func(tx *store.Tx) error { return tx.WebhookDelete(userHook.ID) }},
	}
	for i, c := range cases {
		head := headOf(t, db)
		d := store.DeadLetter{ID: id(100 + 2*i), Type: "t:x", Payload: json.RawMessage(c.payload)}
		other := d
		other.ID = id(101 + 2*i)
		err := db.Update(func(tx *store.Tx) error {
			if c.gone != nil {
				if err := c.gone(tx); err != nil {
					return err
				}
			}
			return errors2(tx.DeadLetterPut(d), tx.DeadLetterPut(other))
		})
		if err == nil {
			err = db.Update(func(tx *store.Tx) error {
				return errors2(tx.DeadLetterRedriven(d.ID), tx.DeadLetterDiscard(other.ID))
			})
		}
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, e := range allEvents(t, db, store.EventQuery{After: head}) {
			if e.Type == store.EventAccountStatus || e.Type == store.EventFormDeleted {
				continue // the deletion's own
			}
			got = append(got, e.Type+" "+e.UserID)
		}
		want := []string{
			store.EventDeadLetterAdded + " " + c.want, store.EventDeadLetterAdded + " " + c.want,
			store.EventDeadLetterRedone + " " + c.want, store.EventDeadLetterDiscarded + " " + c.want,
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s: events (-want +got):\n%s", c.name, diff)
		}
	}
}

// webhookTestEvents are the webhook.test events after head, each read as
// the one webhook it is for reads it.
func webhookTestEvents(t *testing.T, db *store.DB, head uint64) []store.Event {
	t.Helper()
	var hooks []store.Webhook
	if err := db.View(func(tx *store.Tx) (err error) { hooks, err = tx.Webhooks(); return err }); err != nil {
		t.Fatal(err)
	}
	var out []store.Event
	for _, w := range hooks {
		out = append(out, allEvents(t, db, store.EventQuery{After: head, Webhook: w.ID, Types: map[string]bool{store.EventWebhookTest: true}})...)
	}
	return out
}
