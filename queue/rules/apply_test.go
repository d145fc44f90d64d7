package rules

import (
	"context"
	"slices"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/store"
)

func (f *fixture) stored(id string) store.Message {
	f.t.Helper()
	var m store.Message
	if err := f.db.View(func(tx *store.Tx) (err error) {
		m, err = tx.MessageGet(f.account, id)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return m
}

// New mail that the mirror holds with the verdicts of the rules that read
// bodies (a full sync read it with its body) is labelled by them without
// its body: message-added reads nothing again.
func TestApplyNewTakesTheMessagesBodyVerdicts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	if _, err := f.p.Create(ctx, f.user, spec("Deploys", cond("body", "contains", "deploy-7f3a"))); err != nil {
		t.Fatal(err)
	}
	id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "ci@example.com", Subject: "done", Body: "deploy-7f3a finished"})
	if err != nil {
		t.Fatal(err)
	}
	f.mirror()
	body, err := f.p.BodyRules(ctx, f.account)
	if err != nil || body == nil || len(body.Versions) != 1 {
		t.Fatalf("BodyRules: %+v, %v; want the Deploys rule", body, err)
	}
	m := f.stored(id)
	m.BodyVerdicts = body.Decide(m, "deploy-7f3a finished")
	if !body.Judged(&m) || !m.BodyVerdicts[0].Match {
		t.Fatalf("verdicts %+v, want the rule's match", m.BodyVerdicts)
	}
	if err := f.p.ApplyNew(ctx, f.account, m, ""); err != nil {
		t.Fatal(err)
	}
	got, _ := f.fake.Gmail.Message(f.email, id)
	if l, ok := f.fake.Gmail.LabelID(f.email, "Deploys"); !ok || !slices.Contains(got.LabelIDs, l) {
		t.Fatalf("labels %v: want Deploys, by the verdict the full sync took on the body", got.LabelIDs)
	}
}

func TestApplyNewLabelsOnceWithActionsAndProvenance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	s := spec("Dev", cond("from", "contains", "@github.com"), cond("body", "contains", "build"))
	s.Actions = Actions{MarkRead: true, Archive: true}
	saved, err := f.p.Create(ctx, f.user, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Create(ctx, f.user, spec("Other", cond("subject", "contains", "nothing like this"))); err != nil {
		t.Fatal(err)
	}
	if need, err := f.p.NeedsBody(ctx, f.account); err != nil || !need {
		t.Fatalf("NeedsBody = %v, %v; want true", need, err)
	}
	id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "CI <ci@github.com>", Subject: "Build failed", Body: "the build failed"})
	if err != nil {
		t.Fatal(err)
	}
	f.mirror()
	if err := f.p.ApplyNew(ctx, f.account, f.stored(id), "the build failed"); err != nil {
		t.Fatal(err)
	}
	got, _ := f.fake.Gmail.Message(f.email, id)
	dev, _ := f.fake.Gmail.LabelID(f.email, "Dev")
	if !slices.Contains(got.LabelIDs, dev) || got.Unread() || slices.Contains(got.LabelIDs, googlefake.LabelInbox) {
		t.Fatalf("labels %v: want Dev, read, archived", got.LabelIDs)
	}
	if _, ok := f.fake.Gmail.LabelID(f.email, "Other"); ok {
		t.Error("a label of a rule that did not match was created")
	}
	var prov map[string]store.Provenance
	f.db.View(func(tx *store.Tx) (err error) { prov, err = tx.LabelProvenance(f.account, id); return err })
	if p := prov[dev]; p.RuleID != saved.Rule.ID || p.Version != 1 || !p.Present {
		t.Fatalf("provenance %+v", prov)
	}
	// Again (the task ran twice; the mirror has not seen the change yet):
	// no Gmail call.
	f.fake.ResetCounters()
	if err := f.p.ApplyNew(ctx, f.account, f.stored(id), "the build failed"); err != nil {
		t.Fatal(err)
	}
	if n := f.fake.Calls(googlefake.MethodMessagesModify); n != 0 {
		t.Errorf("second run made %d modify calls", n)
	}
	// A message that does not match is left alone.
	other, _ := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "x@gitlab.com", Subject: "hi", Body: "build"})
	f.mirror()
	if err := f.p.ApplyNew(ctx, f.account, f.stored(other), "build"); err != nil {
		t.Fatal(err)
	}
	if m, _ := f.fake.Gmail.Message(f.email, other); slices.Contains(m.LabelIDs, dev) || !m.Unread() {
		t.Errorf("non-matching message changed: %v", m.LabelIDs)
	}
	// The rule changes: the reclassify takes off the label it put on new mail.
	if _, err := f.p.Update(ctx, saved.Rule.ID, spec("Dev", cond("from", "contains", "@gitlab.com"))); err != nil {
		t.Fatal(err)
	}
	if err := f.q.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer f.q.Stop(ctx)
	f.waitDone(f.publish().ID)
	f.checkLabels("Dev", map[string]bool{other: true})
}

// A message deleted at Google between its fetch and the rules' modify is
// nothing to label (Gmail answers 404): not an error, so its task is not
// dead-lettered, and no provenance is recorded for labels never put on.
func TestApplyNewMessageDeletedMeanwhile(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	if _, err := f.p.Create(ctx, f.user, spec("Dev", cond("from", "contains", "@github.com"))); err != nil {
		t.Fatal(err)
	}
	id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "ci@github.com", Subject: "Build failed"})
	if err != nil {
		t.Fatal(err)
	}
	f.mirror()
	m := f.stored(id)
	if err := f.fake.Gmail.Delete(f.email, id); err != nil {
		t.Fatal(err)
	}
	if err := f.p.ApplyNew(ctx, f.account, m, ""); err != nil {
		t.Fatalf("ApplyNew on a message deleted at Google: %v; want nil", err)
	}
	if n := f.fake.Calls(googlefake.MethodMessagesModify); n != 1 {
		t.Fatalf("modify calls = %d; want the one Google refused with 404", n)
	}
	var prov map[string]store.Provenance
	f.db.View(func(tx *store.Tx) (err error) { prov, err = tx.LabelProvenance(f.account, id); return err })
	if len(prov) != 0 {
		t.Errorf("provenance recorded for a deleted message: %+v", prov)
	}
}

// A rule saved while new mail's labels are on their way to Gmail: the save's
// reclassify may plan before ApplyNew records what it did, and then it
// cannot see it. ApplyNew notices that the rules changed under it and
// settles the message with the rules as they are now, so the label the
// rule wants now is on and the one it no longer wants is off.
func TestApplyNewSettlesARuleSavedMeanwhile(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		save func(f *fixture, ruleID string) (Saved, error)
		want string // the label the message carries at the end; "" none
	}{
		{"label renamed", func(f *fixture, id string) (Saved, error) {
			return f.p.Update(context.Background(), id, spec("Builds", cond("from", "contains", "@github.com")))
		}, "Builds"},
		{"rule deleted", func(f *fixture, id string) (Saved, error) {
			return f.p.Delete(context.Background(), id)
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testConfig(), true)
			ctx := context.Background()
			saved, err := f.p.Create(ctx, f.user, spec("Dev", cond("from", "contains", "@github.com")))
			if err != nil {
				t.Fatal(err)
			}
			f.waitDone(f.publish().ID)
			id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "ci@github.com", Subject: "Build failed"})
			if err != nil {
				t.Fatal(err)
			}
			f.mirror()
			// ApplyNew's modify is held at Google long enough for the save
			// and its whole reclassify to happen meanwhile.
			slow, err := f.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesModify, MessageID: id, Latency: 5 * time.Second, Times: 1})
			if err != nil {
				t.Fatal(err)
			}
			applied := make(chan error, 1)
			go func() { applied <- f.p.ApplyNew(ctx, f.account, f.stored(id), "") }()
			testkit.Eventually(t, 10*time.Second, "ApplyNew's modify to reach Google", func() bool { return slow.Fired() == 1 })
			if _, err := tc.save(f, saved.Rule.ID); err != nil {
				t.Fatal(err)
			}
			// The save's reclassify plans the message while the modify is
			// out; its changes of Dev wait for that modify (one write of a
			// label in flight), so its job ends after ApplyNew.
			job := f.publish()
			testkit.Eventually(t, 10*time.Second, "the save's reclassify to plan every batch", func() bool {
				j := f.job(job.ID)
				return !j.FinishedAt.IsZero() || j.Waiting() <= j.BatchesWriting
			})
			select {
			case err := <-applied:
				t.Fatalf("ApplyNew returned (%v) before the save's reclassify planned: the race was not set up", err)
			default:
			}
			if err := <-applied; err != nil {
				t.Fatal(err)
			}
			f.waitDone(job.ID)
			for _, l := range []string{"Dev", "Builds"} {
				want := map[string]bool{}
				if l == tc.want {
					want[id] = true
				}
				f.checkLabels(l, want)
			}
		})
	}
}
