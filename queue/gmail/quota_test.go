package gmail_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/rules"
	"mailroom/store"
)

// Every Gmail call the pipeline makes (profile, list and get of a full
// sync, history pages, the event handlers' gets and label lookups, watch,
// the stop of a deleted account) spends from the account's budget: the
// units Google (the emulator) counted equal the units the budget granted,
// so no call site goes around it.
func TestEveryGmailCallSpendsTheBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: gmail.Config{PubSubTopic: "projects/p/topics/mail"}})
	acc := e.connect(ann, 40)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	testkit.Eventually(t, 10*time.Second, "the watch", func() bool { return !e.account(acc.ID).WatchExpiration.IsZero() })
	mutate(t, e.fake, ann, 3)
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if _, err := e.p.Delete(context.Background(), acc.ID); err != nil {
		t.Fatal(err)
	}
	by := e.fake.Gmail.QuotaUnitsByMethod(ann)
	for _, m := range []string{googlefake.MethodGetProfile, googlefake.MethodMessagesList, googlefake.MethodMessagesGet,
		googlefake.MethodHistoryList, googlefake.MethodWatch, googlefake.MethodStop} {
		if by[m] == 0 {
			t.Errorf("no %s call was made (units by method %v): the test does not cover it", m, by)
		}
	}
	if google, budget := e.fake.Gmail.TotalQuotaUnits(), e.budgetUnits(); google != budget {
		t.Errorf("Google counted %d units, the budget granted %d: a call went around the budget (by method: %v)", google, budget, by)
	}
	if r := e.fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d calls under the budget", r)
	}
}

// When Google's limit is lower than the budget thinks (a project whose
// quota was lowered), its refusals become waits, never failures or dead
// letters: the budget shrinks to what Google allows and the sync converges.
func TestGoogleRefusalsBecomeWaits(t *testing.T) {
	t.Parallel()
	// The minute is compressed to 3 s; Google allows 150 units in it (any
	// sync faster than 10 messages a second reaches it), the budget
	// believes 6,000. At the 2025 prices (5 a messages.get), so that the
	// many calls after the budget adapted are cheap: the 2026 prices'
	// refusals are internal/app's TestSyncAtThePriceList.
	e := newEnv(t, envOptions{
		fake:   googlefake.Options{GmailQuotaPrices: googlefake.GmailPrices2025, GmailUserUnitsPerMinute: 150, GmailQuotaWindow: 3 * time.Second},
		budget: google.BudgetConfig{Prices: google.MustPrices(google.Prices2025), UserUnits: 6000, Window: 3 * time.Second},
	})
	// Over 600 units: the full sync fetches whole threads in fewer calls
	// than one a message, so the mailbox is large enough that the calls
	// after the budget adapted outnumber the first refusals.
	acc := e.connect(ann, 160)
	e.waitConverged(acc.ID, ann, 40*time.Second)
	refused := e.fake.Gmail.QuotaRefusals(ann)[googlefake.ReasonUserRateLimit]
	if refused == 0 {
		t.Fatal("Google refused nothing: the test did not reach its limit")
	}
	calls := 0
	for _, n := range e.fake.CallCounts() {
		calls += n
	}
	// After the first refusals the budget holds the account under Google's
	// limit; refusals stay a small share of the calls.
	if refused*10 > calls {
		t.Errorf("%d of %d calls refused: the budget did not adapt", refused, calls)
	}
	var dead map[string]int
	if err := e.db.View(func(tx *store.Tx) (err error) { dead, err = tx.DeadLetterCounts(); return err }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Errorf("dead letters %v: a quota refusal failed a task", dead)
	}
	u, err := e.budget.Usage(context.Background(), acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.Limit >= 6000 {
		t.Errorf("budget limit %d after Google's refusals, want it shrunk below the 6,000 setting", u.Limit)
	}
	q, err := e.p.Quota(context.Background(), acc.ID)
	if err != nil || q == nil || !strings.Contains(q.Status, "budget lowered") {
		t.Errorf("quota view %+v, %v: want a status saying the budget was lowered", q, err)
	}
}

// While work waits for the account's budget, its quota view says so (the
// status line of the Accounts page and the API).
func TestQuotaStatusWhileWaiting(t *testing.T) {
	t.Parallel()
	// Bulk work may spend 80 of the 100 (20 are kept for live work), all
	// at once (no pacing: the test looks at a window bulk work filled).
	e := newEnv(t, envOptions{budget: google.BudgetConfig{UserUnits: 100, Pace: -1}})
	acc := e.connect(ann, 60) // 1,200 units of gets at the 2026 prices: twelve minutes at 100
	var q *gmail.QuotaView
	testkit.Eventually(t, 30*time.Second, "the full sync to wait for quota", func() bool {
		var err error
		q, err = e.p.Quota(context.Background(), acc.ID)
		return err == nil && q != nil && slices.Contains(q.Waiting, "bulk")
	})
	// Bulk work filled its 80 but for less than its dearest call (a
	// threads.get, 40 at the default 2026 prices).
	pr := google.MustPrices(google.DefaultPrices)
	if !strings.Contains(q.Status, "waiting for Gmail quota: about ") || !strings.Contains(q.Status, "bulk waiting") ||
		q.UnitsLastMinute <= 80-pr.ThreadsGet || q.Setting != 100 {
		t.Errorf("quota view while waiting = %+v", q)
	}
	// The estimate is the full sync's downloads left at a messages.get a
	// message (20 units at the default 2026 prices) and its list page (5;
	// an upper estimate: a thread of several messages costs one
	// threads.get for all of them); at most 80 units were spent, so some
	// are left.
	if q.QueuedUnits <= 0 || q.QueuedUnits > 60*pr.MessagesGet+pr.MessagesList || (q.QueuedUnits-pr.MessagesList)%pr.MessagesGet != 0 ||
		q.QueuedMinutes != (q.QueuedUnits+q.Limit-1)/q.Limit {
		t.Errorf("queued work = %d units, %d minutes (limit %d); want the full sync's downloads left", q.QueuedUnits, q.QueuedMinutes, q.Limit)
	}
	if e.fake.Gmail.TotalQuotaUnits() > 100 {
		t.Errorf("Google counted %d units in the first minute, the budget allows 100", e.fake.Gmail.TotalQuotaUnits())
	}
}

// Without the broker's loss hook (BudgetConfig.SpentUntil, which the app
// sets: TestGmailQuotaAcrossRestart), an account that had synced before
// this process opened it (a restart, perhaps after kill -9 took the
// embedded broker's budget with it) resumes at half its budget, growing
// back, not at full.
func TestRestartResumesTheBudgetConservatively(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	acc := e.connect(ann, 5)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	ctx := context.Background()
	u, err := e.budget.Usage(ctx, acc.ID)
	if err != nil || u.Limit != 6000 {
		t.Fatalf("a new account's budget = %+v, %v; want the full 6,000", u, err)
	}
	// The broker forgets (as the embedded one does in a crash), and a new
	// process (a new accounts service over the same store) opens the
	// account.
	rdb := e.broker.Client()
	keys, err := rdb.Keys(ctx, "mailroom:{gmailquota}:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("budget keys %v, %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	gc := google.New(google.Config{APIURL: e.fake.URL(), TokenURL: e.fake.TokenURL(), Budget: e.budget})
	if _, err := newAccounts(t, accounts.Config{}, accounts.Deps{DB: e.db, Google: gc}).Gmail(ctx, acc.ID); err != nil {
		t.Fatal(err)
	}
	u, err = e.budget.Usage(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if u.Limit < 3000 || u.Limit > 3100 {
		t.Errorf("budget after the restart = %d, want about half the 6,000 setting", u.Limit)
	}
}

// bodyRules is a RuleApplier with one rule, version 1, that reads bodies
// (it matches those that say "text").
type bodyRules struct{ gmail.NoRules }

func (bodyRules) NeedsBody(context.Context, string) (bool, error) { return true, nil }

func (bodyRules) BodyRules(context.Context, string) (*rules.BodyRules, error) {
	return &rules.BodyRules{
		Versions: []store.BodyVerdict{{Rule: "r1", Version: 1}},
		Decide: func(_ store.Message, body string) []store.BodyVerdict {
			return []store.BodyVerdict{{Rule: "r1", Version: 1, Match: strings.Contains(body, "text")}}
		},
	}, nil
}

// While work waits for quota, the status says how many minutes of the
// account's budget its queued work takes: the full sync's downloads left,
// its reclassify batches (a batchModify each, a download a thread when a
// rule reads bodies) and its message-added tasks (a download each), by
// Google's costs, over its units a minute. Another account's work does not
// count.
func TestQuotaStatusEstimatesQueuedWork(t *testing.T) {
	t.Parallel()
	// 600 downloads left and 2 list pages, 3 message-added (the rules
	// read bodies: format full, and so do the full sync's downloads), 2
	// batches of 20 threads (one batchModify of up to 1,000 messages) and
	// 20 threads' bodies; at 100 units a minute.
	for _, c := range []struct {
		prices  string
		units   int
		minutes int
	}{
		{google.Prices2025, 600*5 + 2*5 + 3*5 + 50 + 20*5, 32},
		{google.Prices2026, 600*60 + 2*5 + 3*60 + 50 + 20*60, 375},
	} {
		t.Run(c.prices, func(t *testing.T) {
			t.Parallel()
			testQueuedWorkEstimate(t, c.prices, c.units, c.minutes)
		})
	}
}

func testQueuedWorkEstimate(t *testing.T, prices string, want, minutes int) {
	e := newEnv(t, envOptions{noStart: true, rules: bodyRules{}, budget: google.BudgetConfig{Prices: google.MustPrices(prices), UserUnits: 100}})
	acc := e.connect(ann, 0)
	other := e.connect("bob@example.com", 0)
	err := e.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(acc.ID)
		if err != nil {
			return err
		}
		a.FullSyncStart = &store.FullSyncStart{Requested: a.FullSyncRequested, HistoryID: 1, Messages: 1000, Fetched: 400}
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		// Tagged with the account as their producers tag them (the sync's
		// record and the rules publisher; see TestProducersGroupTasks).
		for i := range 3 {
			if _, _, err := e.q.Enqueue(tx, gmail.TypeMessageAdded, gmail.Event{AccountID: acc.ID, MessageID: fmt.Sprint("m", i)}, queue.Group(acc.ID, 1)); err != nil {
				return err
			}
		}
		for _, id := range []string{acc.ID, acc.ID, other.ID} {
			threads := make([]string, 10)
			for i := range threads {
				threads[i] = fmt.Sprint("t", i)
			}
			if _, _, err := e.q.Enqueue(tx, rules.TypeReclassifyBatch, map[string]any{"jobId": "j", "accountId": id, "threadIds": threads}, queue.Group(id, len(threads))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if q, err := e.p.Quota(ctx, acc.ID); err != nil || q.Status != "" || q.QueuedUnits != 0 {
		t.Fatalf("nothing waits yet: %+v, %v", q, err)
	}
	if g, err := e.budget.TrySpend(ctx, acc.ID, 100, google.PriorityLive); err != nil || !g.OK {
		t.Fatal(g, err)
	}
	if g, err := e.budget.TrySpend(ctx, acc.ID, 5, google.PriorityBulk); err != nil || g.OK {
		t.Fatal("bulk should wait", g, err)
	}
	q, err := e.p.Quota(ctx, acc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if q.QueuedUnits != want || q.QueuedMinutes != minutes {
		t.Errorf("queued = %d units, %d minutes; want %d units, %d minutes of 100 units", q.QueuedUnits, q.QueuedMinutes, want, minutes)
	}
	if !strings.Contains(q.Status, fmt.Sprintf("waiting for Gmail quota: about %d minutes of work queued (bulk waiting; 100 of 100 units spent in the last minute)", minutes)) {
		t.Errorf("status = %q", q.Status)
	}
}

// The sync tags each new-message task it records with its account, so the
// backlog's count of them is the queue's lookup (the rules pipeline tags
// its batches likewise: TestPublishGroupsBatchesByAccount).
func TestSyncGroupsNewMessageTasksByAccount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 0)
	other := e.connect("bob@example.com", 0)
	e.syncNow()
	for email, n := range map[string]int{ann: 3, "bob@example.com": 1} {
		for i := range n {
			if _, err := e.fake.Gmail.AddMessage(email, googlefake.Message{Subject: fmt.Sprint("new ", i)}); err != nil {
				t.Fatal(err)
			}
		}
		e.notify(email)
	}
	e.syncNow()
	if n := len(e.records(gmail.TypeMessageAdded)); n != 4 {
		t.Fatalf("%d message-added tasks recorded, want 4", n)
	}
	for id, want := range map[string]queue.Count{acc.ID: {Tasks: 3, Weight: 3}, other.ID: {Tasks: 1, Weight: 1}} {
		var got queue.Count
		err := e.db.View(func(tx *store.Tx) (err error) {
			got, err = e.q.Queued(tx, gmail.TypeMessageAdded, id)
			return err
		})
		if err != nil || got != want {
			t.Errorf("queued for %s = %+v, %v; want %+v", id, got, err, want)
		}
	}
}

// A full sync's progress reads in people's words.
func TestFullSyncSummary(t *testing.T) {
	for _, c := range []struct {
		v    gmail.FullSyncView
		want string
	}{
		{gmail.FullSyncView{MessagesListed: 2000, MessagesRead: 1200, EstimatedSecondsLeft: 230}, "full sync: 1,200 of 2,000 messages read, about 4 minutes left"},
		{gmail.FullSyncView{MessagesListed: 500, MessagesRead: 0, EstimatedSecondsLeft: 40}, "full sync: 0 of 500 messages read, under 2 minutes left"},
		{gmail.FullSyncView{MessagesListed: 100000, MessagesRead: 10, EstimatedSecondsLeft: 5 * 3600}, "full sync: 10 of 100,000 messages read, about 5 hours left"},
		{gmail.FullSyncView{MessagesListed: 10, MessagesRead: 10}, "full sync: 10 of 10 messages read, almost done"},
	} {
		if got := c.v.Summary(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.v, got, c.want)
		}
	}
}
