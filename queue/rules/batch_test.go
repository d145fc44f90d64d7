package rules

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// publish publishes the user's pending reclassify now and returns its job.
func (f *fixture) publish() store.ReclassifyJob {
	f.t.Helper()
	st, err := f.p.Publisher(f.q).RunOnce(context.Background(), time.Now().Add(time.Hour))
	if err != nil {
		f.t.Fatal(err)
	}
	if st.Published != 1 {
		f.t.Fatalf("published %d jobs, want 1", st.Published)
	}
	return st.Jobs[0]
}

func (f *fixture) waitDone(jobID string) store.ReclassifyJob {
	f.t.Helper()
	var j store.ReclassifyJob
	testkit.Eventually(f.t, 20*time.Second, "job "+jobID+" to finish", func() bool {
		j = f.job(jobID)
		return !j.FinishedAt.IsZero()
	})
	return j
}

// want returns the ids of the emulator's messages that spec matches, plus
// extra.
func (f *fixture) want(s Spec, extra ...string) map[string]bool {
	f.t.Helper()
	c, err := Compile(s)
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range f.fake.Gmail.Messages(f.email) {
		if c.Match(&Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: m.Body}) {
			out[m.ID] = true
		}
	}
	for _, id := range extra {
		out[id] = true
	}
	return out
}

func (f *fixture) checkLabels(label string, want map[string]bool) {
	f.t.Helper()
	got := f.gmailLabeled(label)
	if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
		f.t.Fatalf("messages labelled %q in Gmail (-want +got):\n%s", label, diff)
	}
}

func fromEvenOdd(i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("Bot %d <bot%d@github.com>", i, i)
	}
	return fmt.Sprintf("Person %d <p%d@gitlab.com>", i, i)
}

// Provenance: a label a person applied is never removed, whatever the rule
// becomes; the labels a rule applied follow it, through edits and deletion.
func TestReclassifyKeepsHandAppliedLabels(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), true)
	ctx := context.Background()
	f.addThreads(30, fromEvenOdd)
	msgs := f.fake.Gmail.Messages(f.email)
	// A person made "Dev" and put it on one GitLab message (the rule never
	// matches it) and on one GitHub message (the first version matches it).
	devID, err := f.fake.Gmail.CreateLabel(f.email, "Dev")
	if err != nil {
		t.Fatal(err)
	}
	var handGitlab, handGithub string
	for _, m := range msgs {
		switch {
		case handGitlab == "" && m.From == fromEvenOdd(1):
			handGitlab = m.ID
		case handGithub == "" && m.From == fromEvenOdd(2):
			handGithub = m.ID
		}
	}
	for _, id := range []string{handGitlab, handGithub} {
		if err := f.fake.Gmail.AddLabels(f.email, id, devID); err != nil {
			t.Fatal(err)
		}
	}
	f.mirror()

	v1 := spec("Dev", cond("from", "contains", "@GitHub.com"))
	saved, err := f.p.Create(ctx, f.user, v1)
	if err != nil {
		t.Fatal(err)
	}
	j := f.waitDone(f.publish().ID)
	f.checkLabels("Dev", f.want(v1, handGitlab))
	if j.BatchesDone != 1 || j.MessagesLabeled == 0 {
		t.Errorf("job %+v", j)
	}

	// The rule changes and matches none of them now: only its own labels go.
	v2 := spec("Dev", cond("subject", "contains", "no such subject"))
	if _, err := f.p.Update(ctx, saved.Rule.ID, v2); err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	f.checkLabels("Dev", map[string]bool{handGitlab: true, handGithub: true})

	// Back to v1, then deleted: the same.
	if _, err := f.p.Update(ctx, saved.Rule.ID, v1); err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	f.checkLabels("Dev", f.want(v1, handGitlab))
	if _, err := f.p.Delete(ctx, saved.Rule.ID); err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	f.checkLabels("Dev", map[string]bool{handGitlab: true, handGithub: true})
}

// A rule that takes another label moves its labels: the old ones it
// applied go, the new label is created and applied.
func TestReclassifyFollowsALabelRename(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), true)
	ctx := context.Background()
	f.addThreads(10, fromEvenOdd)
	f.mirror()
	v1 := spec("Dev", cond("from", "contains", "@github.com"))
	saved, err := f.p.Create(ctx, f.user, v1)
	if err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	v2 := spec("Work/Dev", cond("from", "contains", "@github.com"))
	if _, err := f.p.Update(ctx, saved.Rule.ID, v2); err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	f.checkLabels("Dev", nil)
	f.checkLabels("Work/Dev", f.want(v2))
}

// A save while a job runs: the job's remaining batches skip that rule (and
// only that rule), the new job relabels, and the labels end exactly right.
func TestSaveWhileAJobRuns(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 10
	f := newFixture(t, cfg, true)
	ctx := context.Background()
	f.addThreads(200, fromEvenOdd)
	f.mirror()
	// Slow Gmail down so the job is still running at the second save.
	slow, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesBatchModify, Latency: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a1 := spec("A", cond("from", "contains", "@github.com"))
	b1 := spec("B", cond("subject", "matches", `thread \d*7$`))
	ra, err := f.p.Create(ctx, f.user, a1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Create(ctx, f.user, b1); err != nil {
		t.Fatal(err)
	}
	job1 := f.publish()
	if job1.Batches != 20 {
		t.Fatalf("job 1 has %d batches, want 20", job1.Batches)
	}
	testkit.Eventually(t, 10*time.Second, "job 1 to be under way", func() bool { return f.job(job1.ID).BatchesDone >= 2 })
	a2 := spec("A", cond("from", "contains", "@gitlab.com"))
	if _, err := f.p.Update(ctx, ra.Rule.ID, a2); err != nil {
		t.Fatal(err)
	}
	doneBefore := f.job(job1.ID).BatchesDone
	job2 := f.publish()
	doneAfter := f.job(job1.ID).BatchesDone
	slow.Remove()
	j1, j2 := f.waitDone(job1.ID), f.waitDone(job2.ID)
	// Job 1 still carried B, so its batches kept running, for B only:
	// every batch that started after the publish skipped A.
	if j1.BatchesSkippedStale != 0 || j1.BatchesDone != j1.Batches {
		t.Errorf("job 1: %d done, %d skipped of %d; want all done (B is still its rule)", j1.BatchesDone, j1.BatchesSkippedStale, j1.Batches)
	}
	// Batches already running at the publish may still apply A: at most one
	// per worker of the queue.
	row := Tasks(0)[0] // TypeReclassifyBatch
	workers := row.Concurrency
	if j1.RulesSkipped < j1.Batches-doneAfter-workers || j1.RulesSkipped > j1.Batches-doneBefore {
		t.Errorf("job 1 skipped rule A in %d batches; %d to %d were done at the publish (and at most %d running)", j1.RulesSkipped, doneBefore, doneAfter, workers)
	}
	if j2.BatchesDone != j2.Batches {
		t.Errorf("job 2: %d of %d done", j2.BatchesDone, j2.Batches)
	}
	f.checkLabels("A", f.want(a2))
	f.checkLabels("B", f.want(b1))
	st, err := f.p.Status(f.user, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs[0].State != JobDone || st.Jobs[1].State != JobDone {
		t.Errorf("states %s, %s; want done, done", st.Jobs[0].State, st.Jobs[1].State)
	}
}

// When every rule of a running job is saved again, its waiting batches are
// dropped at publish: they never reach a worker, or end as stale at once.
func TestSupersededBatchesAreDropped(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 10
	f := newFixture(t, cfg, true)
	ctx := context.Background()
	f.addThreads(200, fromEvenOdd)
	f.mirror()
	// Version 1 reads the bodies (every one has an "h"), slowly, so that
	// its batches are still waiting when version 2 is published (batches
	// make no label calls of their own: the writer does).
	slow, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, Latency: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	v1 := spec("Dev", cond("from", "contains", "@github.com"), cond("body", "contains", "h"))
	saved, err := f.p.Create(ctx, f.user, v1)
	if err != nil {
		t.Fatal(err)
	}
	job1 := f.publish()
	testkit.Eventually(t, 10*time.Second, "job 1 to be under way", func() bool {
		j := f.job(job1.ID)
		return j.BatchesDone+j.BatchesWriting >= 2
	})
	v2 := spec("Dev", cond("from", "contains", "Person 1"))
	if _, err := f.p.Update(ctx, saved.Rule.ID, v2); err != nil {
		t.Fatal(err)
	}
	before := f.fake.Calls(googlefake.MethodMessagesBatchModify)
	job2 := f.publish()
	j1 := f.job(job1.ID)
	ranAtPublish := j1.BatchesDone + j1.BatchesWriting
	// Batches that ran and whose changes wait for the writer count as
	// waiting until the writer has sent them.
	if j1.BatchesSkippedStale == 0 || j1.FinishedAt.IsZero() && j1.Waiting()-j1.BatchesWriting > 2 {
		t.Fatalf("after the publish, job 1 has %d skipped and %d waiting to run; want the waiting ones dropped", j1.BatchesSkippedStale, j1.Waiting()-j1.BatchesWriting)
	}
	slow.Remove()
	j1, j2 := f.waitDone(job1.ID), f.waitDone(job2.ID)
	// Every batch that had not run by the publish is skipped, those running
	// then too (their plans are void: job 2 plans their threads again).
	if j1.BatchesDone != ranAtPublish || j1.BatchesSkippedStale != j1.Batches-ranAtPublish {
		t.Errorf("job 1: %d done + %d skipped of %d; %d had run at the publish", j1.BatchesDone,
			j1.BatchesSkippedStale, j1.Batches, ranAtPublish)
	}
	// Job 2's 20 batches, and at most the job-1 batches that were running,
	// called Gmail after the publish.
	if calls := f.fake.Calls(googlefake.MethodMessagesBatchModify) - before; calls > 2*j2.Batches+4 {
		t.Errorf("%d batchModify calls after the publish", calls)
	}
	f.checkLabels("Dev", f.want(v2))
	st, _ := f.p.Status(f.user, 10)
	if st.Jobs[1].State != JobSuperseded {
		t.Errorf("job 1 is %s, want superseded", st.Jobs[1].State)
	}
	var outbox int
	f.db.View(func(tx *store.Tx) (err error) { outbox, err = f.q.Len(tx, TypeReclassifyBatch); return err })
	if outbox != 0 {
		t.Errorf("%d batch tasks left in the outbox", outbox)
	}
}

// A batch whose rules all have a newer job does no Gmail or store work.
func TestStaleBatchDoesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	f.addThreads(5, fromEvenOdd)
	f.mirror()
	saved, err := f.p.Create(context.Background(), f.user, spec("Dev", cond("from", "contains", "@github.com")))
	if err != nil {
		t.Fatal(err)
	}
	job1 := f.publish()
	var rec queue.Record
	f.db.View(func(tx *store.Tx) error {
		return f.q.Tasks(tx, TypeReclassifyBatch, func(r queue.Record) bool { rec = r; return false })
	})
	if _, err := f.p.Update(context.Background(), saved.Rule.ID, spec("Dev", cond("from", "contains", "x"))); err != nil {
		t.Fatal(err)
	}
	f.publish()
	f.fake.ResetCounters()
	err = f.p.HandleBatch(context.Background(), &queue.Task{ID: rec.ID, Type: rec.Type, Queue: rec.Queue, Payload: rec.Payload, Attempt: 1})
	if !errors.Is(err, queue.ErrStale) {
		t.Fatalf("got %v, want stale", err)
	}
	if n := len(f.fake.CallCounts()); n != 0 {
		t.Errorf("Gmail calls: %v", f.fake.CallCounts())
	}
	if j := f.job(job1.ID); j.BatchesDone != 0 || j.BatchesSkippedStale != 1 {
		t.Errorf("job 1 %+v", j)
	}
}

// A rule that looks at the body fetches the bodies (the mirror keeps none).
func TestReclassifyReadsBodies(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), true)
	for i, body := range []string{"Your invoice #12 is due", "hello", "INVOICE #7 attached"} {
		if _, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "a@b.c", Subject: fmt.Sprint(i), Body: body}); err != nil {
			t.Fatal(err)
		}
	}
	f.mirror()
	s := spec("Bills", cond("body", "matches", `(?i)invoice #\d+`))
	if _, err := f.p.Create(context.Background(), f.user, s); err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	want := f.want(s)
	if len(want) != 2 {
		t.Fatalf("want %d", len(want))
	}
	f.checkLabels("Bills", want)
}

// A full sync that read a message's body left the verdicts of the rules
// that read bodies (store.Message.BodyVerdicts, taken by BodyRules): the
// label pass takes a verdict of the rule's version instead of reading the
// body again, and reads the body of a message whose verdict is of another
// version (the rule changed since).
func TestReclassifyTakesTheFullSyncsBodyVerdicts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), true)
	ctx := context.Background()
	var ids []string
	for i, body := range []string{"Your invoice #12 is due", "hello", "INVOICE #7 attached", "invoice #3"} {
		id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "a@b.c", Subject: fmt.Sprint(i), Body: body})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	f.mirror()
	s := spec("Bills", cond("body", "matches", `(?i)invoice #\d+`))
	saved, err := f.p.Create(ctx, f.user, s)
	if err != nil {
		t.Fatal(err)
	}
	decide, err := f.p.BodyRules(ctx, f.account)
	if err != nil || decide == nil {
		t.Fatalf("BodyRules: %v (nil: %t), want the Bills rule's", err, decide == nil)
	}
	// The first three were read by a full sync, with the rule's version;
	// the last one's verdict is of an older version of the rule.
	f.update(func(tx *store.Tx) error {
		for i, id := range ids {
			m, err := tx.MessageGet(f.account, id)
			if err != nil {
				return err
			}
			g, _ := f.fake.Gmail.Message(f.email, id)
			m.BodyVerdicts = decide.Decide(m, g.Body)
			if i == 3 {
				m.BodyVerdicts = []store.BodyVerdict{{Rule: saved.Rule.ID, Version: saved.Rule.Version - 1}}
			}
			if err := tx.MessagePut(f.account, m); err != nil {
				return err
			}
		}
		return nil
	})
	before := f.fake.Gmail.QuotaUnitsByMethod(f.email)[googlefake.MethodMessagesGet]
	f.waitDone(f.publish().ID)
	if got := f.fake.Gmail.QuotaUnitsByMethod(f.email)[googlefake.MethodMessagesGet] - before; got != google.MustPrices(google.Prices2025).MessagesGetBody {
		t.Errorf("the label pass spent %d units on messages.get, want one body read (the message whose verdict is of another version)", got)
	}
	f.checkLabels("Bills", f.want(s))
}

// Saves are validated before the limit, and only accepted saves count.
func TestSaveLimitCountsOnlyAcceptedSaves(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.SaveLimit = 3
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	var ve *ValidationError
	if _, err := f.p.Create(ctx, f.user, spec("")); !errors.As(err, &ve) {
		t.Fatalf("got %v, want a validation error", err)
	}
	if _, err := f.p.Create(ctx, f.user, spec("Dev", cond("from", "contains", "a"))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Create(ctx, f.user, spec("dev", cond("from", "contains", "b"))); !errors.Is(err, ErrLabelTaken) {
		t.Fatalf("got %v, want ErrLabelTaken", err)
	}
	if _, err := f.p.Create(ctx, "nobody", spec("X", cond("from", "contains", "b"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("got %v, want ErrNotFound", err)
	}
	for _, l := range []string{"Two", "Three"} {
		if _, err := f.p.Create(ctx, f.user, spec(l, cond("from", "contains", "a"))); err != nil {
			t.Fatal(err)
		}
	}
	_, err := f.p.Create(ctx, f.user, spec("Four", cond("from", "contains", "a")))
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.RetryAfter <= 0 {
		t.Fatalf("4th accepted save: got %v, want a refusal", err)
	}
}

// A batch that fails for good goes to the dead letters and counts as failed,
// so its job finishes instead of showing it running; redriven, it runs and
// counts as done, and the labels end right.
func TestDeadLetteredBatchFinishesJobAndRedriveCompletesIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), true)
	ctx := context.Background()
	f.addThreads(120, fromEvenOdd) // three batches of 50 threads
	f.mirror()
	s := spec("Bots", cond("from", "contains", "@github.com"))
	if _, err := f.p.Create(ctx, f.user, s); err != nil {
		t.Fatal(err)
	}
	// Gmail refuses every batchModify naming the first message: its batch
	// fails permanently.
	first := f.fake.Gmail.Messages(f.email)[0].ID
	fault, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesBatchModify, MessageID: first, Code: 403, Reason: "forbidden", Message: "refused for the test"})
	if err != nil {
		t.Fatal(err)
	}
	j := f.waitDone(f.publish().ID)
	if j.Batches != 3 || j.BatchesDone != 2 || j.BatchesFailed != 1 || j.Waiting() != 0 {
		t.Fatalf("job after the failure: %d batches, %d done, %d failed, %d waiting; want 3, 2, 1, 0", j.Batches, j.BatchesDone, j.BatchesFailed, j.Waiting())
	}
	st, err := f.p.Status(f.user, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Jobs[0].State != JobDone {
		t.Errorf("job state %q, want %q", st.Jobs[0].State, JobDone)
	}
	var dead []store.DeadLetter
	f.update(func(tx *store.Tx) (err error) {
		dead, _, err = tx.DeadLetters(TypeReclassifyBatch, "", 10)
		return err
	})
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}

	fault.Remove()
	if _, missing, err := f.q.Redrive([]string{dead[0].ID}); err != nil || len(missing) > 0 {
		t.Fatalf("redrive: missing %v, %v", missing, err)
	}
	testkit.Eventually(t, 20*time.Second, "the redriven batch to run", func() bool {
		j = f.job(j.ID)
		return j.BatchesDone == 3
	})
	if j.BatchesFailed != 0 || j.Waiting() != 0 || j.FinishedAt.IsZero() {
		t.Errorf("job after the redrive: %d failed, %d waiting, finished %v", j.BatchesFailed, j.Waiting(), j.FinishedAt)
	}
	if n := f.doneEvents(j.ID); n != 1 {
		t.Errorf("%d reclassify.done events for the job, want exactly 1", n)
	}
	f.checkLabels("Bots", f.want(s))
}

// A batch running when a newer job's publish drops it (its job finishing
// then, with every other batch done) commits nothing: the newer job plans
// its threads again, and its job stays finished with the batch skipped,
// rather than sending changes after its reclassify.done (CI saw the job
// counted finished with batches still writing).
func TestBatchDroppedWhileItRunsCommitsNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	f.addThreads(10, fromEvenOdd)
	f.mirror()
	// The rule reads bodies, slowly: the batch is still fetching them when
	// version 2 is published.
	if _, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, Latency: 300 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	saved, err := f.p.Create(ctx, f.user, spec("Dev", cond("from", "contains", "@github.com"), cond("body", "contains", "h")))
	if err != nil {
		t.Fatal(err)
	}
	job1 := f.publish()
	task := f.batchTask(job1.ID)
	done := make(chan error, 1)
	go func() { done <- f.p.HandleBatch(ctx, task) }()
	testkit.Eventually(t, 10*time.Second, "the batch to fetch bodies", func() bool {
		return f.fake.Calls(googlefake.MethodMessagesGet) > 0
	})
	if _, err := f.p.Update(ctx, saved.Rule.ID, spec("Dev", cond("from", "contains", "Person 1"))); err != nil {
		t.Fatal(err)
	}
	f.publish()
	if j := f.job(job1.ID); j.FinishedAt.IsZero() {
		t.Fatalf("job 1 is not finished after its one batch was dropped: %+v", j)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if j := f.job(job1.ID); j.Waiting() != 0 || j.BatchesSkippedStale != 1 || j.FinishedAt.IsZero() {
		t.Errorf("job 1 after its dropped batch ended: %d waiting, %d skipped, finished %v; want 0, 1 and finished",
			j.Waiting(), j.BatchesSkippedStale, j.FinishedAt)
	}
	n := 0
	f.db.View(func(tx *store.Tx) error {
		return tx.LabelWrites(f.account, func(store.LabelWrite) bool { n++; return true })
	})
	if n != 0 {
		t.Errorf("the dropped batch left %d label changes for the writer", n)
	}
}
