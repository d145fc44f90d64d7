package rules

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/store"
)

// A full sync hands its mail to the rules once: a rule saved while an
// account's full sync runs is published over the user's other accounts
// only, and reaches the syncing account with the job its full sync's end
// schedules (ReclassifyAccount), which carries the rule. Each of that
// account's threads is in one batch of one job, not in one job now over
// what is mirrored so far and another one at the end.
func TestPublishLeavesOutAccountsInFullSync(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 4
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	syncing := f.addAccount(f.user, "ann.new@example.com")
	f.update(func(tx *store.Tx) error {
		for _, acc := range []string{f.account, syncing} {
			for th := range 10 {
				m := store.Message{ID: fmt.Sprintf("m%03d", th), ThreadID: fmt.Sprintf("t%03d", th), Fetched: true}
				if err := tx.MessagePut(acc, m); err != nil {
					return err
				}
			}
		}
		a, err := tx.AccountGet(syncing)
		if err != nil {
			return err
		}
		a.Status, a.FullSyncRequested = store.AccountSyncing, 1 // its first full sync runs
		return tx.AccountPut(a)
	})
	s, err := f.p.Create(ctx, f.user, spec("Lists", cond("from", "contains", "list@")))
	if err != nil {
		t.Fatal(err)
	}
	during := f.publish()
	if got := f.threadsByAccount(during.ID); got[syncing] != 0 || got[f.account] != 10 {
		t.Fatalf("the job published during the full sync covers threads %v; want the synced account's 10 only", got)
	}

	// The full sync ends: its transaction schedules the user's rules.
	f.endFullSync(syncing)
	end := f.publish()
	if !slices.Contains(end.RuleIDs, s.Rule.ID) {
		t.Fatalf("the full sync's job carries rules %v, not the rule saved during it (%s)", end.RuleIDs, s.Rule.ID)
	}
	// The job published during the full sync has not run: the full sync's
	// job drops its batches, and covers the other account in their stead.
	if got := f.threadsByAccount(end.ID); got[syncing] != 10 || got[f.account] != 10 {
		t.Fatalf("the full sync's job covers threads %v; want 10 of each account", got)
	}
}

// A full sync's end publishes its label pass once its transaction
// commits, not at the publisher's next tick: the pass is due at once, and
// the account's quota would sit idle until the tick (up to 10 s by
// default, at the end of every first sync).
func TestFullSyncLabelPassPublishedAtOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Tick = time.Hour
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	if _, err := f.p.Create(ctx, f.user, spec("Lists", cond("from", "contains", "list@"))); err != nil {
		t.Fatal(err)
	}
	f.publish() // the save's own job
	pub := f.p.publisher
	if err := pub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	f.update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(f.account)
		if err != nil {
			return err
		}
		a.Status, a.FullSyncRequested = store.AccountSyncing, a.FullSyncCompleted+1
		return tx.AccountPut(a)
	})
	f.endFullSync(f.account)
	testkit.Eventually(t, 5*time.Second, "the full sync's label pass to be published (the tick is an hour)", func() bool {
		st, err := f.p.Status(f.user, 0)
		return err == nil && st.Pending == nil && len(st.Jobs) == 2
	})
}

// threadsByAccount returns the threads of job jobID's batches, by account.
func (f *fixture) threadsByAccount(jobID string) map[string]int {
	f.t.Helper()
	threads := map[string]int{}
	if err := f.db.View(func(tx *store.Tx) error {
		return tx.ReclassifyBatches(jobID, func(b store.ReclassifyBatch) (bool, error) {
			threads[b.AccountID] += b.Threads
			return true, nil
		})
	}); err != nil {
		f.t.Fatal(err)
	}
	return threads
}

// endFullSync records the account's full sync complete, as the gmail
// pipeline does, with the label pass it schedules.
func (f *fixture) endFullSync(accountID string) {
	f.t.Helper()
	f.update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		a.Status, a.FullSyncCompleted = store.AccountReady, a.FullSyncRequested
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		return f.p.ReclassifyAccount(tx, f.user, accountID)
	})
}

// A full sync's label pass covers the account synced, not the user's other
// accounts, which follow the rules already (a rule that reads bodies
// would download every message of theirs again); a rule saved before the
// pass is published widens it to every account.
func TestFullSyncLabelPassCoversItsAccount(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 4
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	other := f.addAccount(f.user, "ann.new@example.com")
	f.update(func(tx *store.Tx) error {
		for _, acc := range []string{f.account, other} {
			for th := range 6 {
				m := store.Message{ID: fmt.Sprintf("m%03d", th), ThreadID: fmt.Sprintf("t%03d", th), Fetched: true}
				if err := tx.MessagePut(acc, m); err != nil {
					return err
				}
			}
		}
		return nil
	})
	saved, err := f.p.Create(ctx, f.user, spec("Lists", cond("from", "contains", "list@")))
	if err != nil {
		t.Fatal(err)
	}
	first := f.publish()
	for _, task := range f.batchTasks() {
		if err := f.p.HandleBatch(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if j := f.job(first.ID); j.Waiting() != 0 {
		t.Fatalf("the rule's first job still waits for %d batches", j.Waiting())
	}

	f.endFullSync(other)
	pass := f.publish()
	if got := f.threadsByAccount(pass.ID); got[other] != 6 || got[f.account] != 0 {
		t.Errorf("the full sync's label pass covers threads %v; want the synced account's 6 only", got)
	}

	f.endFullSync(other)
	if _, err := f.p.Update(ctx, saved.Rule.ID, spec("Lists", cond("from", "contains", "news@"))); err != nil {
		t.Fatal(err)
	}
	if got := f.threadsByAccount(f.publish().ID); got[other] != 6 || got[f.account] != 6 {
		t.Errorf("with a rule saved before it was published, the pass covers threads %v; want 6 of each account", got)
	}
}

// An account whose full sync failed (in error, its full sync in the dead
// letters) is not left out: nothing finishes that sync by itself, and the
// mail it mirrors must still follow the rules.
func TestPublishKeepsAccountsWhoseFullSyncFailed(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 4
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	f.update(func(tx *store.Tx) error {
		for th := range 6 {
			m := store.Message{ID: fmt.Sprintf("m%03d", th), ThreadID: fmt.Sprintf("t%03d", th), Fetched: true}
			if err := tx.MessagePut(f.account, m); err != nil {
				return err
			}
		}
		a, err := tx.AccountGet(f.account)
		if err != nil {
			return err
		}
		a.Status, a.FullSyncRequested, a.FullSyncCompleted, a.FullSyncDead = store.AccountError, 2, 1, true
		return tx.AccountPut(a)
	})
	if _, err := f.p.Create(ctx, f.user, spec("Lists", cond("from", "contains", "list@"))); err != nil {
		t.Fatal(err)
	}
	st, err := f.p.Publisher(f.q).RunOnce(ctx, time.Now().Add(cfg.MaxWait))
	if err != nil || st.Published != 1 {
		t.Fatalf("published %d jobs (%v), want 1", st.Published, err)
	}
	threads := 0
	if err := f.db.View(func(tx *store.Tx) error {
		return tx.ReclassifyBatches(st.Jobs[0].ID, func(b store.ReclassifyBatch) (bool, error) {
			threads += b.Threads
			return true, nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if threads != 6 {
		t.Errorf("the job covers %d threads of the account whose full sync failed, want its 6", threads)
	}
}
