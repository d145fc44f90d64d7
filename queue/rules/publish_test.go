package rules

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/store"
	"mailroom/store/storetest"
)

// Hole 1: the merge was a read-then-write outside a transaction and lost
// rules under concurrent saves.
func TestConcurrentSavesAllLandInOneJob(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.SaveLimit = 100
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	const n = 50
	ids := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			s, err := f.p.Create(ctx, f.user, spec(fmt.Sprintf("Label %d", i), cond("from", "contains", fmt.Sprintf("sender%d@", i))))
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = s.Rule.ID
		})
	}
	close(start)
	wg.Wait()
	st, err := f.p.Publisher(f.q).RunOnce(ctx, time.Now().Add(cfg.MaxWait))
	if err != nil {
		t.Fatal(err)
	}
	if st.Published != 1 {
		t.Fatalf("published %d jobs, want 1", st.Published)
	}
	slices.Sort(ids)
	if got := st.Jobs[0].RuleIDs; !slices.Equal(got, ids) {
		t.Fatalf("the job carries %d rules, want all %d", len(got), n)
	}
}

// Hole 3: the scheduler had no lock, so two instances published twice.
func TestRacingPublishersPublishEachJobOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 4
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	now := time.Now()
	const users = 60
	// Every user has a pending reclassify and an account with 10 threads.
	f.update(func(tx *store.Tx) error {
		for i := range users {
			u, err := tx.UserCreate(fmt.Sprintf("u%d@example.com", i), "")
			if err != nil {
				return err
			}
			acc := store.NewID()
			if err := tx.AccountPut(store.Account{ID: acc, UserID: u.ID, Email: u.Email, Status: store.AccountReady}); err != nil {
				return err
			}
			for th := range 10 {
				m := store.Message{ID: fmt.Sprintf("m%03d", th), ThreadID: fmt.Sprintf("t%03d", th), Fetched: true}
				if err := tx.MessagePut(acc, m); err != nil {
					return err
				}
			}
			if _, err := tx.ReclassifyMerge(u.ID, "rule-"+u.ID, "", now, time.Millisecond, time.Second); err != nil {
				return err
			}
		}
		return nil
	})
	var (
		mu   sync.Mutex
		jobs []store.ReclassifyJob
		wg   sync.WaitGroup
	)
	for range 2 {
		pub := f.p.Publisher(f.q)
		wg.Go(func() {
			for {
				st, err := pub.RunOnce(ctx, now.Add(time.Second))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				jobs = append(jobs, st.Jobs...)
				mu.Unlock()
				if st.Published == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, j := range jobs {
		if seen[j.UserID] {
			t.Fatalf("user %s published twice", j.UserID)
		}
		seen[j.UserID] = true
		if j.Batches != 3 {
			t.Errorf("job of %s has %d batches, want 3 (10 threads by 4)", j.UserID, j.Batches)
		}
	}
	if len(seen) != users {
		t.Fatalf("published for %d users, want %d", len(seen), users)
	}
	var outbox int
	f.db.View(func(tx *store.Tx) (err error) { outbox, err = f.q.Len(tx, TypeReclassifyBatch); return err })
	if outbox != 3*users {
		t.Fatalf("outbox holds %d batch tasks, want %d", outbox, 3*users)
	}
}

// Hole 4: due jobs were found by scanning every key.
func TestDueJobsComeFromTheIndexWithoutAScan(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("100,000 users")
	}
	cfg := testConfig()
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	const users = 100_000
	due := map[string]bool{"user-017": true, "user-50000": true, "user-99999": true}
	for start := 0; start < users; start += 20_000 {
		f.update(func(tx *store.Tx) error {
			for i := start; i < start+20_000; i++ {
				id := fmt.Sprintf("user-%03d", i)
				at := t0.Add(time.Hour) // not due
				if due[id] {
					at = t0
				}
				if _, err := tx.ReclassifyMerge(id, "r", "", at, time.Minute, 10*time.Minute); err != nil {
					return err
				}
			}
			return nil
		})
	}
	st, err := f.p.Publisher(f.q).RunOnce(ctx, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if st.Published != 3 {
		t.Fatalf("published %d, want 3", st.Published)
	}
	// Three due entries, then one that is not due stops the walk.
	if st.Visited != 4 {
		t.Fatalf("visited %d index entries, want 4 (the 3 due and the first not due) out of %d users", st.Visited, users)
	}
	for _, j := range st.Jobs {
		if !due[j.UserID] {
			t.Errorf("published for %s, which is not due", j.UserID)
		}
	}
}

func TestDebounceAndMaxWait(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	t0 := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	const debounce, maxWait = time.Minute, 5 * time.Minute
	var p store.ReclassifyPending
	merge := func(at time.Duration, rule string) {
		t.Helper()
		if err := db.Update(func(tx *store.Tx) (err error) {
			p, err = tx.ReclassifyMerge("u", rule, "", t0.Add(at), debounce, maxWait)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	merge(0, "a")
	if want := t0.Add(time.Minute); !p.FiresAt.Equal(want) {
		t.Fatalf("fires at %s, want %s", p.FiresAt, want)
	}
	// Someone who never stops editing: a save every 50 s.
	for i := 1; i <= 10; i++ {
		merge(time.Duration(i)*50*time.Second, "b")
	}
	if want := t0.Add(maxWait); !p.FiresAt.Equal(want) {
		t.Fatalf("fires at %s, want the max wait %s", p.FiresAt, want)
	}
	if !slices.Equal(p.RuleIDs, []string{"a", "b"}) || !p.FirstSave.Equal(t0) {
		t.Fatalf("pending %+v", p)
	}
	// Exactly one index entry, at the fire time.
	db.View(func(tx *store.Tx) error {
		var at []time.Time
		if _, err := tx.ReclassifyDue(t0.Add(time.Hour), func(_ string, firesAt time.Time) bool { at = append(at, firesAt); return true }); err != nil {
			t.Fatal(err)
		}
		if len(at) != 1 || !at[0].Equal(p.FiresAt) {
			t.Fatalf("index holds %v, want one entry at %s", at, p.FiresAt)
		}
		return nil
	})
}

func TestPendingSurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Now()
	db, err := store.Open(dir, store.Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *store.Tx) error {
		_, err := tx.ReclassifyMerge("u", "r", "", t0, time.Second, time.Minute)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = storetest.OpenAt(t, dir)
	var users []string
	db.View(func(tx *store.Tx) error {
		_, err := tx.ReclassifyDue(t0.Add(time.Second), func(u string, _ time.Time) bool { users = append(users, u); return true })
		return err
	})
	if !slices.Equal(users, []string{"u"}) {
		t.Fatalf("due after restart: %v", users)
	}
}

func TestPublisherTicks(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	f := newFixture(t, cfg, false)
	// The pipeline's own publisher: its one service.
	services := f.p.Services()
	if len(services) != 1 {
		t.Fatalf("services: %d, want the publisher", len(services))
	}
	pub := services[0]
	if err := pub.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer pub.Stop(context.Background())
	if _, err := f.p.Create(context.Background(), f.user, spec("Dev", cond("from", "contains", "@github.com"))); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 3*time.Second, "a published job", func() bool {
		st, err := f.p.Status(f.user, 10)
		return err == nil && st.Pending == nil && len(st.Jobs) == 1
	})
	if err := pub.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := pub.Stop(context.Background()); err != nil { // twice is fine
		t.Fatal(err)
	}
}

// A full sync hands its account over: every live rule of the user joins the
// pending reclassify, the same again when it runs again, and neither the
// save limit (used up here) nor the saves metric counts it.
func TestReclassifyAccountMergesEveryRule(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.SaveLimit = 2
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	var ids []string
	for _, l := range []string{"A", "B"} {
		s, err := f.p.Create(ctx, f.user, spec(l, cond("from", "contains", l)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.Rule.ID)
	}
	f.publish() // takes the saves' pending reclassify
	for range 2 {
		f.update(func(tx *store.Tx) error { return f.p.ReclassifyAccount(tx, f.user, f.account) })
	}
	st, err := f.p.Status(f.user, 10)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	if st.Pending == nil || !slices.Equal(st.Pending.RuleIDs, ids) {
		t.Fatalf("pending %+v, want rules %v", st.Pending, ids)
	}
	// Due at once, not after the debounce: a full sync is not an edit.
	if now := f.p.cfg.Now(); st.Pending.FiresAt.After(now) {
		t.Errorf("the full sync's reclassify fires at %v, %v from now; want at once", st.Pending.FiresAt, st.Pending.FiresAt.Sub(now))
	}
	var accepted dto.Metric
	if err := f.p.metrics.saves.WithLabelValues("accepted").Write(&accepted); err != nil {
		t.Fatal(err)
	}
	if got := accepted.GetCounter().GetValue(); got != 2 {
		t.Errorf("%v accepted saves, want 2: the full sync's reclassify is not a save", got)
	}
}

// A full sync that finishes while the user's own saves wait out their
// debounce joins them and keeps the debounce: the user is still editing.
func TestReclassifyAccountKeepsAUsersDebounce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig(), false)
	ctx := context.Background()
	if _, err := f.p.Create(ctx, f.user, spec("A", cond("from", "contains", "a"))); err != nil {
		t.Fatal(err)
	}
	f.update(func(tx *store.Tx) error { return f.p.ReclassifyAccount(tx, f.user, f.account) })
	st, err := f.p.Status(f.user, 10)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending == nil || !st.Pending.FiresAt.After(f.p.cfg.Now()) {
		t.Fatalf("pending %+v: want the user's save still waiting out its debounce", st.Pending)
	}
}

// The publisher tags each batch with its account and weighs it by its
// threads, so the Gmail backlog asks the queue instead of reading this
// pipeline's payloads; a newer job's publish cancels the waiting batches
// and the count follows.
func TestPublishGroupsBatchesByAccount(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.BatchSize = 10
	f := newFixture(t, cfg, false)
	ctx := context.Background()
	f.addThreads(25, fromEvenOdd)
	f.mirror()
	queued := func() queue.Count {
		t.Helper()
		var c queue.Count
		err := f.db.View(func(tx *store.Tx) (err error) {
			c, err = f.q.Queued(tx, TypeReclassifyBatch, f.account)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	saved, err := f.p.Create(ctx, f.user, spec("Dev", cond("from", "contains", "@github.com")))
	if err != nil {
		t.Fatal(err)
	}
	if job := f.publish(); job.Batches != 3 || job.Threads != 25 {
		t.Fatalf("job of %d batches, %d threads; want 3 and 25", job.Batches, job.Threads)
	}
	if c := queued(); c != (queue.Count{Tasks: 3, Weight: 25}) {
		t.Errorf("queued after the publish = %+v, want 3 batches weighing 25 threads", c)
	}
	if _, err := f.p.Update(ctx, saved.Rule.ID, spec("Dev", cond("from", "contains", "Person 1"))); err != nil {
		t.Fatal(err)
	}
	f.publish()
	if c := queued(); c != (queue.Count{Tasks: 3, Weight: 25}) {
		t.Errorf("queued after a newer job replaced the first = %+v, want 3 batches weighing 25 threads", c)
	}
}
