package rules

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"mailroom/internal/googlefake"
	"mailroom/queue"
	"mailroom/store"
)

// batchTask returns the task of job jobID's first batch, from the outbox
// (the queue is not started: the test runs the handler itself).
func (f *fixture) batchTask(jobID string) *queue.Task {
	f.t.Helper()
	var task *queue.Task
	f.db.View(func(tx *store.Tx) error {
		return f.q.Tasks(tx, TypeReclassifyBatch, func(r queue.Record) bool {
			var pl batchPayload
			if json.Unmarshal(r.Payload, &pl) == nil && pl.JobID == jobID && pl.Index == 0 {
				task = &queue.Task{ID: r.ID, Type: r.Type, Queue: r.Queue, Payload: r.Payload, Attempt: 1}
				return false
			}
			return true
		})
	})
	if task == nil {
		f.t.Fatalf("no batch of job %s in the outbox", jobID)
	}
	return task
}

// newBillsFixture is a fixture (queue not started) whose mailbox holds one
// message, "invoice 42", labelled Bills by the first job of a rule for
// invoices; it returns the message's and the rule's ids.
func newBillsFixture(t *testing.T) (f *fixture, id, ruleID string) {
	t.Helper()
	f = newFixture(t, testConfig(), false)
	ctx := context.Background()
	id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "shop@example.com", Subject: "invoice 42"})
	if err != nil {
		t.Fatal(err)
	}
	f.mirror()
	saved, err := f.p.Create(ctx, f.user, spec("Bills", cond("subject", "contains", "invoice")))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.HandleBatch(ctx, f.batchTask(f.publish().ID)); err != nil {
		t.Fatal(err)
	}
	if err := f.runWriter(); err != nil {
		t.Fatal(err)
	}
	return f, id, saved.Rule.ID
}

// A reclassify batch whose label change reached Gmail but not the store
// (Gmail made it, then the answer was lost: as after a kill -9 between the
// call and the commit), and whose rule is saved again before the batch
// runs again: the newer job's batch, on a mirror that has not seen the
// change yet, still puts back the label the rule wants.
func TestBatchCutShortAfterGmailMadeItsChange(t *testing.T) {
	t.Parallel()
	f, id, ruleID := newBillsFixture(t)
	ctx := context.Background()
	f.checkLabels("Bills", map[string]bool{id: true})

	// Version 2 no longer matches: its batch takes the label off in Gmail,
	// and the answer is lost.
	if _, err := f.p.Update(ctx, ruleID, spec("Bills", cond("subject", "contains", "receipt"))); err != nil {
		t.Fatal(err)
	}
	job2 := f.publish()
	lost, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesBatchModify, Code: 500, AfterWrite: true, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	task2 := f.batchTask(job2.ID)
	if err := f.p.HandleBatch(ctx, task2); err != nil {
		t.Fatal(err)
	}
	if err := f.runWriter(); err == nil || lost.Fired() != 1 {
		t.Fatalf("writer of version 2: %v (fault fired %d times); want the lost answer's error", err, lost.Fired())
	}
	f.checkLabels("Bills", map[string]bool{})

	// Version 3 matches again, before version 2's batch runs again (it is
	// stale now: its publish drops it from the outbox, and a copy already
	// delivered does nothing). The mirror has not seen the removal.
	if _, err := f.p.Update(ctx, ruleID, spec("Bills", cond("subject", "contains", "invoice 4"))); err != nil {
		t.Fatal(err)
	}
	job3 := f.publish()
	if err := f.p.HandleBatch(ctx, task2); !errors.Is(err, queue.ErrStale) {
		t.Fatalf("batch of version 2 again: %v; want stale", err)
	}
	if err := f.p.HandleBatch(ctx, f.batchTask(job3.ID)); err != nil {
		t.Fatal(err)
	}
	if err := f.runWriter(); err != nil {
		t.Fatal(err)
	}
	f.checkLabels("Bills", map[string]bool{id: true})
}

// New mail's labels that reached Gmail but not the store, after which the
// rule changed: the message-added task's next run takes off the label the
// rule no longer wants (without the pending record it would look like a
// label a person put on, and stay).
func TestApplyNewCutShortAfterGmailMadeItsChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	saved, id := f.devRuleAndMail()
	lost, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesModify, Code: 503, AfterWrite: true, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.ApplyNew(ctx, f.account, f.stored(id), ""); err == nil || lost.Fired() != 1 {
		t.Fatalf("ApplyNew: %v (fault fired %d times); want the lost answer's error", err, lost.Fired())
	}
	f.checkLabels("Dev", map[string]bool{id: true})

	if _, err := f.p.Update(ctx, saved.Rule.ID, spec("Dev", cond("from", "contains", "@gitlab.com"))); err != nil {
		t.Fatal(err)
	}
	// The task runs again (the message fetched again: the mirror has the
	// label now, as Gmail showed it).
	f.mirror()
	if err := f.p.ApplyNew(ctx, f.account, f.stored(id), ""); err != nil {
		t.Fatal(err)
	}
	// The settle's removal goes by the account's writer, due at once.
	f.drainWriter()
	f.checkLabels("Dev", map[string]bool{})
	// The version 2 reclassify finds nothing left to do.
	f.fake.ResetCounters()
	if err := f.p.HandleBatch(ctx, f.batchTask(f.publish().ID)); err != nil {
		t.Fatal(err)
	}
	if n := f.fake.Calls(googlefake.MethodMessagesBatchModify); n != 0 {
		t.Errorf("the reclassify made %d batchModify calls after the settle", n)
	}
	f.checkLabels("Dev", map[string]bool{})
}

// The mirror takes the label changes of earlier batches late, and one at a
// time: after version 1 put the label on and version 2 took it off, the
// mirror shows version 1's add (newer than what the mirror had when version
// 2 planned). Version 3, which wants the label, must not take that add for
// the label's state (it is older than version 2's removal) and so must put
// the label back.
func TestReclassifyOnAMirrorThatTakesOurChangesLate(t *testing.T) {
	t.Parallel()
	f, id, ruleID := newBillsFixture(t)
	ctx := context.Background()
	added, _ := f.fake.Gmail.Message(f.email, id)
	bills, _ := f.fake.Gmail.LabelID(f.email, "Bills")
	if _, err := f.p.Update(ctx, ruleID, spec("Bills", cond("subject", "contains", "receipt"))); err != nil {
		t.Fatal(err)
	}
	if err := f.p.HandleBatch(ctx, f.batchTask(f.publish().ID)); err != nil {
		t.Fatal(err)
	}
	if err := f.runWriter(); err != nil {
		t.Fatal(err)
	}
	f.checkLabels("Bills", map[string]bool{})
	// The sync applies version 1's add, and not yet version 2's removal.
	f.update(func(tx *store.Tx) error {
		m, err := tx.MessageGet(f.account, id)
		if err != nil {
			return err
		}
		if !m.ApplyLabel(bills, true, added.HistoryID) {
			t.Fatalf("the mirror took no change at history id %d", added.HistoryID)
		}
		return tx.MessagePut(f.account, m)
	})
	if _, err := f.p.Update(ctx, ruleID, spec("Bills", cond("subject", "contains", "invoice 4"))); err != nil {
		t.Fatal(err)
	}
	if err := f.p.HandleBatch(ctx, f.batchTask(f.publish().ID)); err != nil {
		t.Fatal(err)
	}
	if err := f.runWriter(); err != nil {
		t.Fatal(err)
	}
	f.checkLabels("Bills", map[string]bool{id: true})
}

// A run of new mail's rules whose modify failed (nothing reached Gmail)
// leaves pending records; the retry settles the labels and still makes the
// rule's actions.
func TestApplyNewRetryAfterAFailedModifyMakesTheActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	s := spec("Dev", cond("from", "contains", "@github.com"))
	s.Actions = Actions{MarkRead: true}
	if _, err := f.p.Create(ctx, f.user, s); err != nil {
		t.Fatal(err)
	}
	id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "ci@github.com", Subject: "Build failed"})
	if err != nil {
		t.Fatal(err)
	}
	f.mirror()
	if _, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesModify, Code: 503, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := f.p.ApplyNew(ctx, f.account, f.stored(id), ""); err == nil {
		t.Fatal("ApplyNew with Google answering 503: nil error")
	}
	if m, _ := f.fake.Gmail.Message(f.email, id); !m.Unread() {
		t.Fatal("the failed modify changed the message")
	}
	if err := f.p.ApplyNew(ctx, f.account, f.stored(id), ""); err != nil {
		t.Fatal(err)
	}
	f.checkLabels("Dev", map[string]bool{id: true})
	if m, _ := f.fake.Gmail.Message(f.email, id); m.Unread() {
		t.Error("the retry did not mark the message read")
	}
}

// devRuleAndMail saves a rule labelling GitHub's mail "Dev" and adds one
// such message to the mailbox and the mirror (its rules not applied yet).
func (f *fixture) devRuleAndMail() (saved Saved, messageID string) {
	f.t.Helper()
	saved, err := f.p.Create(context.Background(), f.user, spec("Dev", cond("from", "contains", "@github.com")))
	if err != nil {
		f.t.Fatal(err)
	}
	id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "ci@github.com", Subject: "Build failed"})
	if err != nil {
		f.t.Fatal(err)
	}
	f.mirror()
	return saved, id
}
