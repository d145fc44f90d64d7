package gmail_test

import (
	"testing"

	"mailroom/queue/gmail"
	"mailroom/store"
)

// TestStateChangesOfOneSyncShareATask: the state changes one history read
// brings are recorded as one task per type (each in its type's queue), not
// one per change, and running those tasks applies every change, each with
// its event.
func TestStateChangesOfOneSyncShareATask(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 20)
	e.syncNow()
	e.runAll(gmail.TypeMessageAdded)

	g := e.fake.Gmail
	label, err := g.CreateLabel(ann, "Grouped")
	if err != nil {
		t.Fatal(err)
	}
	msgs := g.Messages(ann)
	for _, m := range msgs[:6] {
		if err := g.AddLabels(ann, m.ID, label); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range msgs[6:9] {
		if err := g.Trash(ann, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	before := e.eventCount(acc.ID)
	e.notify(ann)
	e.syncNow()
	for typ, want := range map[string]int{gmail.TypeMessageLabeled: 1, gmail.TypeMessageTrashed: 1} {
		if got := len(e.records(typ)); got != want {
			t.Errorf("%d %s tasks for the changes of one sync, want %d", got, typ, want)
		}
	}
	e.runAll(gmail.TypeMessageLabeled)
	e.runAll(gmail.TypeMessageTrashed)
	if d := e.diff(acc.ID, ann); d != "" {
		t.Errorf("mirror differs from the mailbox (-mailbox +mirror):\n%s", d)
	}
	after := e.eventCount(acc.ID)
	if n := after[store.EventMessageLabeled] - before[store.EventMessageLabeled]; n != 6 {
		t.Errorf("%d message.labeled events, want 6", n)
	}
	if n := after[store.EventMessageTrashed] - before[store.EventMessageTrashed]; n != 3 {
		t.Errorf("%d message.trashed events, want 3", n)
	}
	if !e.idle() {
		t.Errorf("tasks left: %v", e.outbox())
	}
}

// eventCount counts the account's events in the log by type.
func (e *env) eventCount(accountID string) map[string]int {
	e.t.Helper()
	out := map[string]int{}
	err := e.db.View(func(tx *store.Tx) error {
		for after := uint64(0); ; {
			events, next, err := tx.Events(store.EventQuery{After: after, Limit: 500})
			if err != nil {
				return err
			}
			for _, ev := range events {
				if ev.AccountID == accountID {
					out[ev.Type]++
				}
			}
			if len(events) == 0 || next <= after {
				return nil
			}
			after = next
		}
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}
