package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"mailroom/internal/googlefake"
	"mailroom/queue/google"
	"mailroom/store"
)

func (f *fixture) labelMap() map[string]string {
	f.t.Helper()
	var names map[string]string
	if err := f.db.View(func(tx *store.Tx) (err error) {
		names, err = tx.Labels(f.account)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return names
}

// A rule's label deleted in Gmail after mailroom cached its id: new mail
// still gets the label, made anew, and the cache forgets the old id.
func TestApplyNewAfterTheLabelWasDeletedInGmail(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	if _, err := f.p.Create(ctx, f.user, spec("Dev", cond("from", "contains", "@github.com"))); err != nil {
		t.Fatal(err)
	}
	first, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "CI <ci@github.com>", Subject: "one"})
	if err != nil {
		t.Fatal(err)
	}
	f.mirror()
	if err := f.p.ApplyNew(ctx, f.account, f.stored(first), ""); err != nil {
		t.Fatal(err)
	}
	old, _ := f.fake.Gmail.LabelID(f.email, "Dev")
	if f.labelMap()[old] != "Dev" {
		t.Fatalf("label map %v: want %s cached", f.labelMap(), old)
	}

	// A person deletes the label in Gmail; mailroom's cache still has it.
	if err := f.fake.Gmail.DeleteLabel(f.email, old); err != nil {
		t.Fatal(err)
	}
	second, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "CI <ci@github.com>", Subject: "two"})
	if err != nil {
		t.Fatal(err)
	}
	// Not mirrored: a mirror of the emulator would refresh the label map.
	if err := f.p.ApplyNew(ctx, f.account, store.Message{ID: second, From: "CI <ci@github.com>", Subject: "two"}, ""); err != nil {
		t.Fatalf("apply after the label was deleted: %v", err)
	}
	dev, ok := f.fake.Gmail.LabelID(f.email, "Dev")
	if !ok || dev == old {
		t.Fatalf("label Dev: %q (%v), want one made anew (the old was %s)", dev, ok, old)
	}
	if m, _ := f.fake.Gmail.Message(f.email, second); !slices.Contains(m.LabelIDs, dev) {
		t.Errorf("the new message has labels %v, want %s", m.LabelIDs, dev)
	}
	names := f.labelMap()
	if _, stale := names[old]; stale || names[dev] != "Dev" {
		t.Errorf("label map %v: want %s forgotten and %s cached", names, old, dev)
	}
}

// The same for a reclassify: its batches do not fail for good; the label is
// made anew where the rule wants it, and the records of the deleted one go.
func TestReclassifyAfterTheLabelWasDeletedInGmail(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), true)
	ctx := context.Background()
	f.addThreads(20, fromEvenOdd)
	f.mirror()
	v1 := spec("Dev", cond("from", "contains", "@github.com"))
	saved, err := f.p.Create(ctx, f.user, v1)
	if err != nil {
		t.Fatal(err)
	}
	f.waitDone(f.publish().ID)
	f.checkLabels("Dev", f.want(v1))
	old, _ := f.fake.Gmail.LabelID(f.email, "Dev")
	if err := f.fake.Gmail.DeleteLabel(f.email, old); err != nil {
		t.Fatal(err)
	}

	v2 := spec("Dev", cond("subject", "matches", `thread 1\d$`))
	if _, err := f.p.Update(ctx, saved.Rule.ID, v2); err != nil {
		t.Fatal(err)
	}
	j := f.waitDone(f.publish().ID)
	if j.BatchesDone != j.Batches || j.MessagesLabeled != len(f.want(v2)) {
		t.Errorf("job %+v: want every batch done and %d messages labelled", j, len(f.want(v2)))
	}
	f.checkLabels("Dev", f.want(v2))
	if dev, _ := f.fake.Gmail.LabelID(f.email, "Dev"); dev == old {
		t.Fatalf("the label kept its deleted id %s", old)
	}
	if _, stale := f.labelMap()[old]; stale {
		t.Errorf("the label map still has the deleted id %s", old)
	}
	err = f.db.View(func(tx *store.Tx) error {
		return tx.EachMessage(f.account, func(m store.Message) error {
			prov, err := tx.LabelProvenance(f.account, m.ID)
			if _, stale := prov[old]; stale {
				t.Errorf("message %s still has a record of the deleted label", m.ID)
			}
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// New mail and reclassify batches that want a missing label at the same
// moment create it once per account and label, not once each.
func TestLabelCreatedOnceUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	for _, l := range []string{"Dev", "CI", "All"} {
		if _, err := f.p.Create(ctx, f.user, spec(l, cond("from", "contains", "@github.com"))); err != nil {
			t.Fatal(err)
		}
	}
	var ids []string
	for i := range 16 {
		id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: "CI <ci@github.com>", Subject: fmt.Sprint("build ", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	f.mirror()
	var wg sync.WaitGroup
	errs := make(chan error, len(ids))
	for _, id := range ids {
		m := f.stored(id)
		wg.Go(func() { errs <- f.p.ApplyNew(ctx, f.account, m, "") })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := f.fake.Gmail.QuotaUnitsByMethod(f.email)[googlefake.MethodLabelsCreate]; got != 3*google.MustPrices(google.Prices2025).LabelsCreate {
		t.Errorf("labels.create spent %d units, want %d: one call per label", got, 3*google.MustPrices(google.Prices2025).LabelsCreate)
	}
	for _, l := range []string{"Dev", "CI", "All"} {
		lid, ok := f.fake.Gmail.LabelID(f.email, l)
		if !ok {
			t.Fatalf("label %s not in Gmail", l)
		}
		for _, id := range ids {
			if m, _ := f.fake.Gmail.Message(f.email, id); !slices.Contains(m.LabelIDs, lid) {
				t.Errorf("message %s lacks %s: %v", id, l, m.LabelIDs)
			}
		}
	}
	if len(f.p.labelLocks.locks) != 0 {
		t.Errorf("%d label locks left behind", len(f.p.labelLocks.locks))
	}
}

// A caller waiting for another's label creation gives up with its context.
func TestLabelLockHonoursContext(t *testing.T) {
	t.Parallel()
	var k keyedLocks
	unlock, err := k.lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := k.lock(ctx, "a"); !errors.Is(err, context.Canceled) {
		t.Fatalf("lock with a cancelled context while held: %v, want context.Canceled", err)
	}
	unlock()
	if len(k.locks) != 0 {
		t.Fatalf("%d locks left behind", len(k.locks))
	}
}
