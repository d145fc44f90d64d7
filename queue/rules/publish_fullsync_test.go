package rules

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

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
	pub := f.p.Publisher(f.q)
	publish := func() store.ReclassifyJob {
		t.Helper()
		st, err := pub.RunOnce(ctx, time.Now().Add(cfg.MaxWait))
		if err != nil || st.Published != 1 {
			t.Fatalf("published %d jobs (%v), want 1", st.Published, err)
		}
		return st.Jobs[0]
	}
	batchesOf := func(jobID string) map[string]int {
		t.Helper()
		threads := map[string]int{}
		if err := f.db.View(func(tx *store.Tx) error {
			return tx.ReclassifyBatches(jobID, func(b store.ReclassifyBatch) (bool, error) {
				threads[b.AccountID] += b.Threads
				return true, nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return threads
	}

	during := publish()
	if got := batchesOf(during.ID); got[syncing] != 0 || got[f.account] != 10 {
		t.Fatalf("the job published during the full sync covers threads %v; want the synced account's 10 only", got)
	}

	// The full sync ends: its transaction schedules the user's rules.
	f.update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(syncing)
		if err != nil {
			return err
		}
		a.Status, a.FullSyncCompleted = store.AccountReady, 1
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		return f.p.ReclassifyAccount(tx, f.user, syncing)
	})
	end := publish()
	if !slices.Contains(end.RuleIDs, s.Rule.ID) {
		t.Fatalf("the full sync's job carries rules %v, not the rule saved during it (%s)", end.RuleIDs, s.Rule.ID)
	}
	if got := batchesOf(end.ID); got[syncing] != 10 {
		t.Fatalf("the full sync's job covers threads %v; want the synced account's 10", got)
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
