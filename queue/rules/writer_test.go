package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/store"
)

// ceilK is the number of batchModify calls n changes of one label and
// direction need at Google's limit of 1,000 ids a call.
func ceilK(n int) int { return (n + 999) / 1000 }

// A reclassify of 3,000 threads against three rules sends each label's
// changes in calls of 1,000 ids, whatever the batches of 50 threads they
// were decided in: ceil(changed/1,000) batchModify calls per label and
// direction, the adds of the first job and the removals of a second.
func TestReclassifyCoalescesLabelChanges(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	// Long enough that only full groups and the job's end send anything.
	cfg.WriteDelay = time.Minute
	f := newFixture(t, cfg, true)
	ctx := context.Background()
	f.addThreads(3000, fromEvenOdd)
	f.mirror()
	specs := []Spec{
		spec("GitHub", cond("from", "contains", "@github.com")),
		spec("GitLab", cond("from", "contains", "@gitlab.com")),
		spec("Ones", cond("subject", "contains", "thread 1")),
	}
	ids := make([]string, len(specs))
	want := 0
	for i, s := range specs {
		saved, err := f.p.Create(ctx, f.user, s)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = saved.Rule.ID
		want += ceilK(len(f.want(s)))
	}
	before := f.fake.Calls(googlefake.MethodMessagesBatchModify)
	j := f.waitDone(f.publish().ID)
	if got := f.fake.Calls(googlefake.MethodMessagesBatchModify) - before; got != want {
		t.Errorf("%d batchModify calls for %d labels added, want %d", got, j.MessagesLabeled, want)
	}
	if j.BatchesDone != j.Batches || j.Batches != 60 {
		t.Errorf("job %+v: want its 60 batches done", j)
	}
	for _, s := range specs {
		f.checkLabels(s.Label, f.want(s))
	}

	// A narrower GitHub rule: only removals, in ceil(removed/1,000) calls.
	v2 := spec("GitHub", cond("from", "contains", "Bot 1"))
	removed := len(f.want(specs[0])) - len(f.want(v2))
	if _, err := f.p.Update(ctx, ids[0], v2); err != nil {
		t.Fatal(err)
	}
	before = f.fake.Calls(googlefake.MethodMessagesBatchModify)
	j = f.waitDone(f.publish().ID)
	if got := f.fake.Calls(googlefake.MethodMessagesBatchModify) - before; got != ceilK(removed) || j.MessagesUnlabeled != removed {
		t.Errorf("%d batchModify calls for %d labels removed, want %d for %d", got, j.MessagesUnlabeled, ceilK(removed), removed)
	}
	f.checkLabels("GitHub", f.want(v2))
	f.checkNothingWaits()
}

// checkNothingWaits fails the test when a label change still waits for the
// writer or a provenance record is still pending.
func (f *fixture) checkNothingWaits() {
	f.t.Helper()
	err := f.db.View(func(tx *store.Tx) error {
		n := 0
		if err := tx.LabelWrites(f.account, func(store.LabelWrite) bool { n++; return true }); err != nil {
			return err
		}
		if n > 0 {
			f.t.Errorf("%d label changes still wait for the writer", n)
		}
		return tx.EachMessage(f.account, func(m store.Message) error {
			prov, err := tx.LabelProvenance(f.account, m.ID)
			for l, p := range prov {
				if p.Pending {
					f.t.Errorf("message %s: the record of label %s is still pending", m.ID, l)
				}
			}
			return err
		})
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// batchTasks returns the batch tasks in the outbox, in publish order.
func (f *fixture) batchTasks() []*queue.Task {
	f.t.Helper()
	var tasks []*queue.Task
	f.db.View(func(tx *store.Tx) error {
		return f.q.Tasks(tx, TypeReclassifyBatch, func(r queue.Record) bool {
			tasks = append(tasks, &queue.Task{ID: r.ID, Type: r.Type, Queue: r.Queue, Payload: r.Payload, Attempt: 1})
			return true
		})
	})
	return tasks
}

// drainWriter runs the account's writer until no writer task is left.
func (f *fixture) drainWriter() {
	f.t.Helper()
	for range 20 {
		if f.writerTask() == nil {
			return
		}
		if err := f.runWriter(); err != nil {
			f.t.Fatal(err)
		}
	}
	f.t.Fatal("the writer still has work after 20 runs")
}

// A newer rule version saved while a job's changes wait for the writer:
// its plan replaces the older one for each message and label (the latest
// intent wins), and the labels end as the newer version wants them.
func TestWriterLatestIntentWinsMidJob(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.WriteDelay = time.Hour
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	f.addThreads(400, fromEvenOdd)
	f.mirror()
	v1 := spec("Dev", cond("from", "contains", "@github.com"))
	other := spec("Ones", cond("subject", "contains", "thread 1"))
	saved, err := f.p.Create(ctx, f.user, v1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Create(ctx, f.user, other); err != nil {
		t.Fatal(err)
	}
	job1 := f.publish()
	// Half of job 1's batches run; their changes wait for the writer.
	tasks := f.batchTasks()
	for _, task := range tasks[:len(tasks)/2] {
		if err := f.p.HandleBatch(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var waiting int
	f.db.View(func(tx *store.Tx) error {
		return tx.LabelWrites(f.account, func(store.LabelWrite) bool { waiting++; return true })
	})
	if waiting == 0 {
		t.Fatal("no label change waits for the writer after half the batches")
	}

	// Version 2 matches other messages: some of job 1's adds become
	// removals, the rest stay adds of job 2.
	v2 := spec("Dev", cond("from", "contains", "Bot 1"))
	if _, err := f.p.Update(ctx, saved.Rule.ID, v2); err != nil {
		t.Fatal(err)
	}
	job2 := f.publish()
	for _, task := range f.batchTasks() {
		var pl batchPayload
		if err := json.Unmarshal(task.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if err := f.p.HandleBatch(ctx, task); err != nil && !queue.IsStale(err) {
			t.Fatalf("batch %d of job %s: %v", pl.Index, pl.JobID, err)
		}
	}
	before := f.fake.Calls(googlefake.MethodMessagesBatchModify)
	f.drainWriter()
	// One call per label and direction: Dev's adds, Dev's removals (none
	// reached Gmail yet, so job 2 takes off what job 1 planned only where
	// version 1 had put it: nowhere) and Ones' adds.
	if got := f.fake.Calls(googlefake.MethodMessagesBatchModify) - before; got > 3 {
		t.Errorf("%d batchModify calls, want at most 3", got)
	}
	f.checkLabels("Dev", f.want(v2))
	f.checkLabels("Ones", f.want(other))
	f.checkNothingWaits()
	for _, id := range []string{job1.ID, job2.ID} {
		if j := f.job(id); j.FinishedAt.IsZero() || j.Waiting() != 0 {
			t.Errorf("job %s: %d batches waiting, finished %v", id, j.Waiting(), j.FinishedAt)
		}
	}
}

// The writer cut short after Gmail made its changes and before it recorded
// them (the answer lost, as after a kill -9 between the two): nothing is
// lost, the next run sends them again with the same effect, and the job is
// done only then.
func TestWriterCutShortAfterGmailLosesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	f.addThreads(300, fromEvenOdd)
	f.mirror()
	specs := []Spec{
		spec("GitHub", cond("from", "contains", "@github.com")),
		spec("GitLab", cond("from", "contains", "@gitlab.com")),
	}
	for _, s := range specs {
		if _, err := f.p.Create(ctx, f.user, s); err != nil {
			t.Fatal(err)
		}
	}
	job := f.publish()
	for _, task := range f.batchTasks() {
		if err := f.p.HandleBatch(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if j := f.job(job.ID); !j.FinishedAt.IsZero() || j.BatchesWriting != j.Batches {
		t.Fatalf("job %+v: want every batch writing and the job not finished before the writer ran", j)
	}
	// Both calls reach Gmail; both answers are lost.
	lost, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesBatchModify, Code: 500, AfterWrite: true, Times: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.runWriter(); err == nil || lost.Fired() != 2 {
		t.Fatalf("writer: %v (fault fired %d times); want the lost answers' error", err, lost.Fired())
	}
	for _, s := range specs {
		f.checkLabels(s.Label, f.want(s)) // Gmail has them
	}
	if j := f.job(job.ID); !j.FinishedAt.IsZero() || j.MessagesLabeled != 0 {
		t.Fatalf("job %+v: done before its changes were recorded", j)
	}
	f.drainWriter()
	for _, s := range specs {
		f.checkLabels(s.Label, f.want(s))
	}
	f.checkNothingWaits()
	j := f.job(job.ID)
	wantLabeled := len(f.want(specs[0])) + len(f.want(specs[1]))
	if j.FinishedAt.IsZero() || j.BatchesDone != j.Batches || j.MessagesLabeled != wantLabeled {
		t.Errorf("job %+v: want done with %d messages labelled", j, wantLabeled)
	}
}

// A permanent refusal of one label's call costs that label's change of the
// refused message only: the other label's changes, and the refused label's
// other messages, reach Gmail.
func TestWriterRefusalLosesOnlyItsOwnChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	f.addThreads(100, fromEvenOdd)
	f.mirror()
	all := spec("All", cond("subject", "contains", "thread"))
	gh := spec("GitHub", cond("from", "contains", "@github.com"))
	for _, s := range []Spec{all, gh} {
		if _, err := f.p.Create(ctx, f.user, s); err != nil {
			t.Fatal(err)
		}
	}
	job := f.publish()
	for _, task := range f.batchTasks() {
		if err := f.p.HandleBatch(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	var bad string
	for id := range f.want(gh) {
		bad = id
		break
	}
	if _, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesBatchModify, MessageID: bad, Code: 403, Reason: "forbidden", Message: "refused for the test"}); err != nil {
		t.Fatal(err)
	}
	f.drainWriter()
	wantAll := f.want(all)
	delete(wantAll, bad)
	wantGH := f.want(gh)
	delete(wantGH, bad)
	f.checkLabels("All", wantAll)
	f.checkLabels("GitHub", wantGH)
	j := f.job(job.ID)
	if j.FinishedAt.IsZero() || j.BatchesFailed != 1 {
		t.Errorf("job %+v: want it finished with its one batch failed", j)
	}
	var dead []store.DeadLetter
	f.update(func(tx *store.Tx) (err error) {
		dead, _, err = tx.DeadLetters(TypeReclassifyBatch, "", 10)
		return err
	})
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want the failed batch's", len(dead))
	}
	// Through the queue, as a failed task: its account's group and its
	// threads' weight (a redrive shares the account's turn), and an alert
	// committed with it.
	if d := dead[0]; d.Group != f.account || d.Weight == 0 {
		t.Errorf("dead letter group %q weight %d, want account %s and the batch's threads", d.Group, d.Weight, f.account)
	}
	var alerts []store.PendingAlert
	f.update(func(tx *store.Tx) (err error) {
		alerts, err = tx.PendingAlerts()
		return err
	})
	if len(alerts) != 1 || alerts[0].Type != TypeReclassifyBatch || alerts[0].Count != 1 || !strings.Contains(alerts[0].NewestError, "refused for the test") {
		t.Errorf("pending alerts %+v, want one for the batch, with Gmail's refusal", alerts)
	}
}

// A batch whose change Gmail refused for good finishes its job (one
// reclassify.done, counting it failed); redriven, it runs and writes, and
// the job counts it done without a second reclassify.done (the redriven
// batch used to zero the job's FinishedAt, so its end sent another).
func TestRedrivenBatchSendsNoSecondReclassifyDone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	f.addThreads(100, fromEvenOdd)
	f.mirror()
	gh := spec("GitHub", cond("from", "contains", "@github.com"))
	if _, err := f.p.Create(ctx, f.user, gh); err != nil {
		t.Fatal(err)
	}
	job := f.publish()
	f.runBatches()
	var bad string
	for id := range f.want(gh) {
		bad = id
		break
	}
	fault, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesBatchModify, MessageID: bad, Code: 403, Reason: "forbidden", Message: "refused for the test"})
	if err != nil {
		t.Fatal(err)
	}
	f.drainWriter()
	if j := f.job(job.ID); j.FinishedAt.IsZero() || j.BatchesFailed != 1 {
		t.Fatalf("job %+v: want it finished with one batch failed", j)
	}
	fault.Remove()
	var dead []store.DeadLetter
	f.update(func(tx *store.Tx) (err error) {
		dead, _, err = tx.DeadLetters(TypeReclassifyBatch, "", 10)
		return err
	})
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want the failed batch's", len(dead))
	}
	if _, missing, err := f.q.Redrive([]string{dead[0].ID}); err != nil || len(missing) > 0 {
		t.Fatalf("redrive: missing %v, %v", missing, err)
	}
	f.runBatches()
	f.drainWriter()
	if j := f.job(job.ID); j.BatchesFailed != 0 || j.Waiting() != 0 || j.BatchesDone != j.Batches || j.FinishedAt.IsZero() {
		t.Errorf("job after the redrive %+v: want every batch done and the job finished", j)
	}
	f.checkLabels("GitHub", f.want(gh))
	if n := f.doneEvents(job.ID); n != 1 {
		t.Errorf("%d reclassify.done events for job %s, want exactly 1", n, job.ID)
	}
	// The batch's dead-letter events are the user's, whose work failed.
	f.update(func(tx *store.Tx) error {
		evs, _, err := tx.Events(store.EventQuery{Types: map[string]bool{store.EventDeadLetterAdded: true, store.EventDeadLetterRedone: true}, Limit: 10})
		if len(evs) != 2 {
			t.Errorf("%d dead-letter events, want added and redriven", len(evs))
		}
		for _, e := range evs {
			if e.UserID != f.user || e.AccountID != f.account {
				t.Errorf("%s: user %q account %q, want %s and %s", e.Type, e.UserID, e.AccountID, f.user, f.account)
			}
		}
		return err
	})
}

// runBatches runs every batch task in the outbox once, as the queue would.
func (f *fixture) runBatches() {
	f.t.Helper()
	for _, task := range f.batchTasks() {
		if err := f.p.HandleBatch(context.Background(), task); err != nil {
			f.t.Fatal(err)
		}
	}
}

// doneEvents counts the reclassify.done events of a job.
func (f *fixture) doneEvents(jobID string) int {
	f.t.Helper()
	n := 0
	f.update(func(tx *store.Tx) error {
		evs, _, err := tx.Events(store.EventQuery{Types: map[string]bool{store.EventReclassifyDone: true}, Limit: 1000})
		for _, e := range evs {
			var d struct{ JobID string }
			if json.Unmarshal(e.Data, &d) == nil && d.JobID == jobID {
				n++
			}
		}
		return err
	})
	return n
}

// One writer run per account at a time in this process: a second delivery
// of the account's writer task waits for the first (it could otherwise
// land an older change after a newer one), another account's does not,
// and a waiting run gives up with its context.
func TestWriterLocksOneRunPerAccount(t *testing.T) {
	var l keyedLocks
	ctx := context.Background()
	unlockA, err := l.lock(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	unlockB, err := l.lock(ctx, "b")
	if err != nil {
		t.Fatal("another account's run waited:", err)
	}
	defer unlockB()
	got := make(chan error, 1)
	go func() {
		unlock, err := l.lock(ctx, "a")
		if err == nil {
			unlock()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second run of account a did not wait for the first (%v)", err)
	case <-time.After(50 * time.Millisecond): // a wait that must not end, not a timing bound
	}
	unlockA()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	unlockA, _ = l.lock(ctx, "a")
	defer unlockA()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.lock(cctx, "a"); err == nil {
		t.Fatal("a waiting run ignored its context")
	}
}

// New mail's direct label change (ApplyNew's pending records) redirects
// the writer's waiting change of the same label instead of deleting it:
// the writer may hold that older change in flight, and deleted, the older
// change could land after the direct one and stay. Redirected, the writer
// sends the newer change's effect after it.
func TestDirectChangeRedirectsWaitingWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	const msg, label = "m001", "Label_9"
	f.update(func(tx *store.Tx) error {
		_, _, err := tx.LabelWritePut(&store.LabelWrite{AccountID: f.account, LabelID: label, MessageID: msg,
			Add: true, JobID: "j1", Batch: 3, Prov: store.Provenance{RuleID: "r", Present: true, Pending: true}})
		return err
	})
	// The rule no longer matches: new mail takes the label off at once.
	removed := store.Provenance{RuleID: "r", Version: 2, Present: false}
	if err := f.p.putRecords(f.account, msg, map[string]store.Provenance{label: removed}, true); err != nil {
		t.Fatal(err)
	}
	var w store.LabelWrite
	if err := f.db.View(func(tx *store.Tx) (err error) {
		w, err = tx.LabelWriteGet(f.account, label, msg)
		return err
	}); err != nil {
		t.Fatalf("the waiting write is gone (%v): the writer's older add could land last", err)
	}
	if w.Add || w.Prov.Version != 2 || w.JobID != "j1" || w.Batch != 3 {
		t.Errorf("waiting write after the direct remove = %+v; want a remove of version 2, still batch 3 of j1", w)
	}
}

// The job's last batch to run may have nothing to write: the changes the
// batches before it left for the writer go at once all the same, not after
// WriteDelay (CI saw a job wait for it when its last batch had no change).
func TestWriterGoesWhenTheLastBatchHasNothingToWrite(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.WriteDelay = time.Hour
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	// The first batch of 50 threads matches the rule, the second not.
	f.addThreads(100, func(i int) string {
		if i < 50 {
			return fmt.Sprintf("Bot %d <bot%d@github.com>", i, i)
		}
		return fmt.Sprintf("Person %d <p%d@example.net>", i, i)
	})
	f.mirror()
	s := spec("GitHub", cond("from", "contains", "@github.com"))
	if _, err := f.p.Create(ctx, f.user, s); err != nil {
		t.Fatal(err)
	}
	job := f.publish()
	tasks := f.batchTasks()
	if len(tasks) != 2 {
		t.Fatalf("%d batch tasks, want 2", len(tasks))
	}
	f.runLastWithNothingToWrite(job.ID, s, tasks[0], tasks[1])
}

// runLastWithNothingToWrite runs the two batches of job jobID, the one
// with changes to write first: the writer waits for the other, and goes
// at once when it has run (with nothing to write). Then every label of
// rule s is in Gmail and the job is done.
func (f *fixture) runLastWithNothingToWrite(jobID string, s Spec, first, last *queue.Task) {
	f.t.Helper()
	ctx := context.Background()
	if err := f.p.HandleBatch(ctx, first); err != nil {
		f.t.Fatal(err)
	}
	f.wantWriterDue(false, "with a batch of the job still to run")
	if err := f.p.HandleBatch(ctx, last); err != nil {
		f.t.Fatal(err)
	}
	f.wantWriterDue(true, "every batch of the job has run")
	f.drainWriter()
	if j := f.job(jobID); j.FinishedAt.IsZero() || j.BatchesDone != 2 {
		f.t.Errorf("job %+v: want its 2 batches done", j)
	}
	f.checkLabels(s.Label, f.want(s))
}

// wantWriterDue fails the test unless the account's writer task in the
// outbox is due now (now set) or about WriteDelay (an hour) from now.
func (f *fixture) wantWriterDue(now bool, when string) {
	f.t.Helper()
	r, ok := f.writerRecord()
	if !ok {
		f.t.Fatal("no label writer task in the outbox")
	}
	switch in := time.Until(r.RunAt); {
	case now && in > time.Second:
		f.t.Fatalf("%s: the writer is due at %s, want now", when, r.RunAt)
	case !now && in < 30*time.Minute:
		f.t.Fatalf("%s: the writer is due at %s, want an hour from now", when, r.RunAt)
	}
}

// A rule's removal waits for the writer while the mirror takes the rule's
// earlier add late (the sync reports it after the removal was planned).
// Another rule's job then plans the message: the removal's outcome is
// unknown, so it is not "a removal the mirror caught up with" to forget,
// and the label comes off (the soak saw it stay, kept as a person's).
func TestPendingRemovalOutlivesALateMirror(t *testing.T) {
	t.Parallel()
	f, id, ruleID := newBillsFixture(t)
	ctx := context.Background()
	// The mirror has not seen the add yet: version 2 takes it off.
	if _, err := f.p.Update(ctx, ruleID, spec("Bills", cond("subject", "contains", "receipt"))); err != nil {
		t.Fatal(err)
	}
	if err := f.p.HandleBatch(ctx, f.batchTask(f.publish().ID)); err != nil {
		t.Fatal(err)
	}
	// Now it sees the add (the removal has not gone yet), and a rule of
	// another label runs over the message.
	f.mirror()
	f.createAndRun(spec("Dev", cond("from", "contains", "@github.com")))
	if f.gmailLabeled("Bills")[id] {
		t.Error("Bills is still on the message: the rule's latest version took it off")
	}
	f.checkNothingWaits()
}

// createAndRun saves a new rule and runs its job's first batch and the
// writer.
func (f *fixture) createAndRun(s Spec) {
	f.t.Helper()
	ctx := context.Background()
	if _, err := f.p.Create(ctx, f.user, s); err != nil {
		f.t.Fatal(err)
	}
	if err := f.p.HandleBatch(ctx, f.batchTask(f.publish().ID)); err != nil {
		f.t.Fatal(err)
	}
	f.drainWriter()
}

// lateAdd sets the scene of a change the writer held in flight while a
// direct change overtook it: Bills was taken off message id directly (its
// record confirmed, the writer's waiting change redirected to a removal),
// and then the writer's older add landed, which the mirror now shows as
// the label's newest change.
func (f *fixture) lateAdd(id, ruleID string) {
	f.t.Helper()
	bills, _ := f.fake.Gmail.LabelID(f.email, "Bills")
	if err := f.fake.Gmail.RemoveLabels(f.email, id, bills); err != nil {
		f.t.Fatal(err)
	}
	removed := store.Provenance{RuleID: ruleID, Version: 1, SeenHID: f.fake.Gmail.HistoryID(f.email), At: time.Now()}
	f.update(func(tx *store.Tx) error {
		pending := removed
		pending.Pending = true
		_, _, err := tx.LabelWritePut(&store.LabelWrite{AccountID: f.account, LabelID: bills, MessageID: id,
			JobID: "j0", Prov: pending, At: time.Now()})
		if err != nil {
			return err
		}
		if err := f.p.scheduleWriterTx(tx, f.account, time.Now()); err != nil {
			return err
		}
		return tx.LabelProvenancePut(f.account, id, bills, removed)
	})
	if err := f.fake.Gmail.AddLabels(f.email, id, bills); err != nil {
		f.t.Fatal(err)
	}
	f.mirror()
}

// A plan that needs no Gmail call for a label keeps the change the writer
// holds for it: deleted, the older change in flight would stay, with no
// record of it.
func TestNoChangePlanKeepsTheWaitingChange(t *testing.T) {
	t.Parallel()
	t.Run("a removal to forget", func(t *testing.T) {
		t.Parallel()
		f, id, ruleID := newBillsFixture(t)
		f.lateAdd(id, ruleID)
		// A rule of another label runs over the message: the newest
		// change of Bills is newer than the removal's record.
		f.createAndRun(spec("Dev", cond("from", "contains", "@github.com")))
		if f.gmailLabeled("Bills")[id] {
			t.Error("Bills is on the message: the removal waiting for the writer was dropped")
		}
		f.checkNothingWaits()
	})
	t.Run("a label the rule wants", func(t *testing.T) {
		t.Parallel()
		f, id, ruleID := newBillsFixture(t)
		ctx := context.Background()
		f.lateAdd(id, ruleID)
		// New mail's settle runs the thread: the rule wants Bills, and it
		// is there.
		var m store.Message
		f.update(func(tx *store.Tx) (err error) {
			m, err = tx.MessageGet(f.account, id)
			return err
		})
		if err := f.p.settle(ctx, f.account, m, nil, []string{ruleID}); err != nil {
			t.Fatal(err)
		}
		f.drainWriter()
		if !f.gmailLabeled("Bills")[id] {
			t.Error("Bills is off the message, though its rule wants it: the waiting removal went as it was")
		}
		f.checkNothingWaits()
	})
}

// A job over two accounts whose last batch to run is on the account with
// nothing to write: the other account's waiting changes go at once all the
// same (every account with a writing batch of the job is flushed).
func TestWriterGoesWhenTheLastBatchIsAnotherAccounts(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.WriteDelay = time.Hour
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	f.addThreads(10, func(i int) string { return fmt.Sprintf("Bot %d <bot%d@github.com>", i, i) })
	f.mirror()
	other := f.addAccount(f.user, "ann@work.example")
	f.update(func(tx *store.Tx) error {
		return tx.MessagePut(other, store.Message{ID: "w1", ThreadID: "w1", From: "boss@work.example", Subject: "plans", Fetched: true})
	})
	s := spec("GitHub", cond("from", "contains", "@github.com"))
	if _, err := f.p.Create(ctx, f.user, s); err != nil {
		t.Fatal(err)
	}
	job := f.publish()
	var mine, theirs *queue.Task
	for _, task := range f.batchTasks() {
		var pl batchPayload
		if err := json.Unmarshal(task.Payload, &pl); err != nil {
			t.Fatal(err)
		}
		if pl.AccountID == f.account {
			mine = task
		} else {
			theirs = task
		}
	}
	if mine == nil || theirs == nil {
		t.Fatal("want one batch on each account")
	}
	f.runLastWithNothingToWrite(job.ID, s, mine, theirs)
}

// The writer's call for a label waits, once its quota is granted, until no
// other write of that label is out (a direct change's), and is not made
// when one of its changes was replaced meanwhile: made, the older change
// could land after the newer one and stay. Here a removal the writer holds
// for Bills waits for the label while a newer plan puts the label back:
// the writer sends the newer change only (one call, not the removal and
// then the add).
func TestWriterSendsNoChangeReplacedWhileItWaitedForItsLabel(t *testing.T) {
	t.Parallel()
	f, id, ruleID := newBillsFixture(t)
	ctx := context.Background()
	bills, _ := f.fake.Gmail.LabelID(f.email, "Bills")
	put := func(add bool) {
		f.planWrite(id, bills, store.Provenance{RuleID: ruleID, Version: 1, JobID: "j0", Present: add, Pending: true, At: time.Now()})
	}
	put(false)
	key := labelLockKey(f.account, bills)
	unlock, err := f.p.writeLocks.lock(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	before := f.fake.Calls(googlefake.MethodMessagesBatchModify)
	done := make(chan error, 1)
	go func() { done <- f.runWriter() }()
	// The writer's call waits at the label's lock.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.p.writeLocks.mu.Lock()
		waiting := f.p.writeLocks.locks[key] != nil && f.p.writeLocks.locks[key].users == 2
		f.p.writeLocks.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer's call never waited for the label")
		}
	}
	put(true)
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	f.drainWriter()
	if n := f.fake.Calls(googlefake.MethodMessagesBatchModify) - before; n != 1 {
		t.Errorf("%d batchModify calls, want 1: the replaced removal was sent too", n)
	}
	if !f.gmailLabeled("Bills")[id] {
		t.Error("Bills is off the message: the newer change (put it back) was lost")
	}
	f.checkNothingWaits()
}

// New mail's label confirmed while a newer plan for the same label waits
// for the writer leaves the newer plan's record: confirmed over it, the
// add would say "on, the rule's" while the newer removal lands after it,
// and a record that says otherwise is what the next plan trusts (the
// property test found this with a settle's removal and a reclassify's add).
func TestNewMailLeavesANewerPlanForTheWriter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	saved, id := f.devRuleAndMail()
	fault, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesModify, MessageID: id, Latency: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	applied := make(chan error, 1)
	go func() { applied <- f.p.ApplyNew(ctx, f.account, f.stored(id), "") }()
	var dev string
	record := func() (pr store.Provenance) {
		f.update(func(tx *store.Tx) (err error) {
			pr, err = tx.LabelProvenanceGet(f.account, id, dev)
			if errors.Is(err, store.ErrNotFound) {
				return nil
			}
			return err
		})
		return pr
	}
	testkit.Eventually(t, 10*time.Second, "new mail's add to go out", func() bool {
		dev, _ = f.fake.Gmail.LabelID(f.email, "Dev")
		pr := record()
		return dev != "" && pr.Pending && pr.Present
	})
	// Meanwhile a plan (the rule's, say, after a person's edit elsewhere)
	// takes the label off again, for the writer.
	newer := store.Provenance{RuleID: saved.Rule.ID, Version: saved.Rule.Version, JobID: "j9", Pending: true, At: time.Now().Add(time.Minute)}
	f.planWrite(id, dev, newer)
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	fault.Remove()
	if pr := record(); !sameIntent(pr, newer) {
		t.Fatalf("record after new mail's add %+v, want the newer plan's pending removal %+v", pr, newer)
	}
	f.drainWriter()
	if f.gmailLabeled("Dev")[id] {
		t.Fatal("the newer plan's removal was not sent")
	}
	if pr := record(); pr.Present || pr.Pending {
		t.Errorf("record after the writer %+v, want the removal confirmed", pr)
	}
}

// planWrite records what a reclassify batch's plan records for the writer
// (queueWrites): the pending provenance prov of a message's label and its
// label write, due now.
func (f *fixture) planWrite(id, label string, prov store.Provenance) {
	f.t.Helper()
	f.update(func(tx *store.Tx) error {
		if err := tx.LabelProvenancePut(f.account, id, label, prov); err != nil {
			return err
		}
		_, _, err := tx.LabelWritePut(&store.LabelWrite{AccountID: f.account, LabelID: label, MessageID: id,
			Add: prov.Present, JobID: prov.JobID, Prov: prov, At: time.Now().Add(-time.Hour)})
		if err != nil {
			return err
		}
		return f.p.scheduleWriterTx(tx, f.account, time.Now())
	})
}
