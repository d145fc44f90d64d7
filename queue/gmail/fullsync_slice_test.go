package gmail_test

import (
	"fmt"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// answeredGets is how many messages.get of the account Gmail answered
// (refused calls cost nothing, so they are not among them).
func answeredGets(e *env, email string) int {
	return e.fake.Gmail.QuotaUnitsByMethod(email)[googlefake.MethodMessagesGet] / google.UnitsMessagesGet
}

// fullSyncStored is how many messages the account's full sync stored: all
// of them once it is complete.
func fullSyncStored(e *env, accountID string, total int) int {
	a := e.account(accountID)
	if a.FullSyncCompleted >= a.FullSyncRequested && a.FullSyncRequested > 0 {
		return total
	}
	if a.FullSyncStart == nil {
		return 0
	}
	return a.FullSyncStart.Fetched
}

// TestFullSyncHandedBackMidPageFetchesNoMessageTwice: the account's budget
// (280 units for bulk work a window) runs out in the middle of the first
// list page and the run is handed back for quota (it may not wait: MaxWait
// 1 ms). The messages it fetched are stored, and the runs that follow,
// each handed back in turn until the full sync ends, fetch none of them
// again: Gmail answers one messages.get per message.
func TestFullSyncHandedBackMidPageFetchesNoMessageTwice(t *testing.T) {
	t.Parallel()
	const n = 150
	e := newEnv(t, envOptions{
		noStart: true,
		fake:    googlefake.Options{GmailQuotaWindow: time.Second},
		budget:  google.BudgetConfig{UserUnits: 300, Window: time.Second, MaxWait: time.Millisecond},
		cfg:     gmail.Config{FullSyncSlice: 100},
	})
	acc := e.connect(ann, n)
	runFullSync := func() (handedBack bool) {
		t.Helper()
		for _, r := range e.records(queue.TypeGmailFullSync) {
			err := e.run(r, r.Payload)
			if _, limited := queue.RetryAfter(err); limited {
				handedBack = true
			} else if err != nil {
				t.Fatalf("full sync run: %v", err)
			}
		}
		return handedBack
	}
	if !runFullSync() {
		t.Fatal("the first run was not handed back for quota")
	}
	first := fullSyncStored(e, acc.ID, n)
	if first == 0 || first >= 100 {
		t.Fatalf("the handed-back run stored %d messages, want some of its page of 100 (all it fetched)", first)
	}
	if got := answeredGets(e, ann); got != first {
		t.Fatalf("Gmail answered %d messages.get, the run stored %d: fetched messages were thrown away", got, first)
	}
	handBacks := 1
	testkit.Eventually(t, 30*time.Second, "the full sync to end through handed-back runs", func() bool {
		if runFullSync() {
			handBacks++
		}
		a := e.account(acc.ID)
		return a.FullSyncCompleted >= a.FullSyncRequested
	})
	if got := answeredGets(e, ann); got != n {
		t.Errorf("Gmail answered %d messages.get for %d messages (%d runs handed back)", got, n, handBacks)
	}
	if got := e.fake.Calls(googlefake.MethodMessagesGet); got != n {
		t.Errorf("%d messages.get sent for %d messages", got, n)
	}
	e.syncNow()
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("mirror differs (-mailbox +mirror):\n%s", diff)
	}
	d, err := e.p.Detail(acc.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := lastRun(d.Runs, "full"); !ok || r.Error != "" || r.Messages != n {
		t.Fatalf("the full sync's run: %+v; want %d messages stored", r, n)
	}
}

// TestFullSyncsTakeTurns: six accounts' first full syncs (150 messages
// each, runs of 25) share four gmail-full-sync workers under a project
// budget that binds (1,000 units a window). They take turns: when half of
// all the messages are stored, every account has stored at least half as
// many as the account that stored most (one full sync per worker after
// another would have stored two accounts' mail and none of the others').
// No message is fetched twice, and every mirror converges.
func TestFullSyncsTakeTurns(t *testing.T) {
	t.Parallel()
	const accounts, n = 6, 150
	e := newEnv(t, envOptions{
		fake:   googlefake.Options{GmailQuotaWindow: time.Second},
		budget: google.BudgetConfig{ProjectUnits: 1000, Window: time.Second},
		cfg:    gmail.Config{FullSyncSlice: 25},
	})
	var emails []string
	var accs []store.Account
	for i := range accounts {
		email := fmt.Sprintf("user%d@example.com", i)
		emails = append(emails, email)
		accs = append(accs, e.connect(email, n))
	}
	stored := func() (counts []int, total int) {
		for _, a := range accs {
			c := fullSyncStored(e, a.ID, n)
			counts = append(counts, c)
			total += c
		}
		return counts, total
	}
	var counts []int
	testkit.Eventually(t, 60*time.Second, "half of all the messages to be stored", func() bool {
		var total int
		counts, total = stored()
		return total >= accounts*n/2
	})
	most, least := 0, n
	for _, c := range counts {
		most, least = max(most, c), min(least, c)
	}
	if least*2 < most {
		t.Errorf("stored per account when half of all was stored: %v; want each at least half the most", counts)
	}
	for i, a := range accs {
		e.waitConverged(a.ID, emails[i], 60*time.Second)
		if got := answeredGets(e, emails[i]); got != n {
			t.Errorf("%s: Gmail answered %d messages.get for %d messages", emails[i], got, n)
		}
	}
}

// TestFullSyncWaitsInTaskForTheProjectWindow: a full sync run that finds
// the project's window spent (200 units a window, its slice needs about
// 255) waits in its task instead of being handed back (a run handed back
// comes back after the accounts enqueued behind it and loses its turn),
// even though the budget's longest in-task wait is 1 ms; a wait for the
// account's own budget still hands it back
// (TestFullSyncHandedBackMidPageFetchesNoMessageTwice).
func TestFullSyncWaitsInTaskForTheProjectWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		noStart: true,
		fake:    googlefake.Options{GmailQuotaWindow: time.Second},
		budget:  google.BudgetConfig{ProjectUnits: 200, Window: time.Second, MaxWait: time.Millisecond},
		cfg:     gmail.Config{FullSyncSlice: 50},
	})
	acc := e.connect(ann, 120)
	recs := e.records(queue.TypeGmailFullSync)
	if len(recs) != 1 {
		t.Fatalf("%d full sync tasks, want 1", len(recs))
	}
	if err := e.run(recs[0], recs[0].Payload); err != nil {
		t.Fatalf("the run: %v; want it to wait for the project's window and do its slice", err)
	}
	if got := fullSyncStored(e, acc.ID, 120); got != 50 {
		t.Fatalf("the run stored %d messages, want its slice of 50", got)
	}
	next := e.records(queue.TypeGmailFullSync)
	if len(next) != 1 || next[0].ID == recs[0].ID {
		t.Fatalf("after the slice: full sync tasks %+v, want the account's next run", next)
	}
}

// TestFullSyncSlicesShareListPages: runs of 25 messages take their ids
// from messages.list pages of 500 kept between runs, so a mailbox of 620
// costs two list calls (not one per run), each message is fetched once,
// and every run but the last hands on to the next.
func TestFullSyncSlicesShareListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 25},
		fake: googlefake.Options{GmailQuotaWindow: time.Second}, budget: google.BudgetConfig{Window: time.Second}})
	acc := e.connect(ann, 620)
	runs := 0
	for ; runs < 100; runs++ {
		recs := e.records(queue.TypeGmailFullSync)
		if len(recs) == 0 {
			break
		}
		if len(recs) != 1 {
			t.Fatalf("%d full sync tasks, want 1", len(recs))
		}
		if err := e.run(recs[0], recs[0].Payload); err != nil {
			t.Fatalf("run %d: %v", runs+1, err)
		}
		if a := e.account(acc.ID); a.FullSyncStart != nil {
			var listed []string
			if err := e.db.View(func(tx *store.Tx) (err error) {
				listed, err = tx.FullSyncListed(acc.ID, a.FullSyncStart.Requested)
				return err
			}); err != nil || len(listed) > 500 {
				t.Fatalf("run %d: %d ids kept (%v), more than a page", runs+1, len(listed), err)
			}
		}
	}
	if want := (620 + 24) / 25; runs != want {
		t.Errorf("%d runs, want %d of 25 messages", runs, want)
	}
	if got := e.fake.Gmail.QuotaUnitsByMethod(ann)[googlefake.MethodMessagesList] / google.UnitsMessagesList; got != 2 {
		t.Errorf("%d messages.list calls, want 2 (pages of 500)", got)
	}
	if got := answeredGets(e, ann); got != 620 {
		t.Errorf("Gmail answered %d messages.get for 620 messages", got)
	}
	if a := e.account(acc.ID); a.FullSyncStart != nil || a.FullSyncCompleted != a.FullSyncRequested {
		t.Fatalf("after the runs: start %+v, completed %d of %d", a.FullSyncStart, a.FullSyncCompleted, a.FullSyncRequested)
	}
}
