package gmail_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// fetchUnits is what Gmail answered the account's messages.get and
// threads.get calls, in quota units (refused calls cost nothing, so they
// are not among them).
func fetchUnits(e *env, email string) int {
	u := e.fake.Gmail.QuotaUnitsByMethod(email)
	return u[googlefake.MethodMessagesGet] + u[googlefake.MethodThreadsGet]
}

// threadCost is the least a full sync's fetches of msgs (whole threads)
// cost: one threads.get a thread of two or more, one messages.get a lone
// message. A full sync that fetches no message twice spends exactly that.
func threadCost[M any](msgs []M, threadOf func(M) string) (units, threads, singles int) {
	size := map[string]int{}
	for _, m := range msgs {
		size[threadOf(m)]++
	}
	for _, n := range size {
		if n >= 2 {
			threads++
		} else {
			singles++
		}
	}
	return threads*google.MustPrices(google.DefaultPrices).ThreadsGet + singles*google.MustPrices(google.DefaultPrices).MessagesGet, threads, singles
}

// mailboxCost is threadCost of the whole mailbox of email.
func mailboxCost(e *env, email string) int {
	u, _, _ := threadCost(e.fake.Gmail.Messages(email), func(m googlefake.Message) string { return m.ThreadID })
	return u
}

// lone returns the messages of msgs alone in their thread, in their order:
// a full sync fetches them with messages.get, so a fault on a message
// (googlefake.Fault.MessageID) reaches its fetch.
func lone(msgs []googlefake.Message) []googlefake.Message {
	size := map[string]int{}
	for _, m := range msgs {
		size[m.ThreadID]++
	}
	return slices.DeleteFunc(slices.Clone(msgs), func(m googlefake.Message) bool { return size[m.ThreadID] > 1 })
}

// largestThread is the most messages a thread of email's mailbox holds:
// a slice never splits a thread, so it may go past FullSyncSlice by up to
// one less.
func largestThread(e *env, email string) int {
	size, most := map[string]int{}, 0
	for _, m := range e.fake.Gmail.Messages(email) {
		size[m.ThreadID]++
		most = max(most, size[m.ThreadID])
	}
	return most
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
// (180 units for bulk work a window) runs out in the middle of the first
// list page and the run is handed back for quota (it may not wait: MaxWait
// 1 ms). The messages it fetched are stored, and the runs that follow,
// each handed back in turn until the full sync ends, fetch none of them
// again: Gmail answers one threads.get a thread and one messages.get a
// lone message.
func TestFullSyncHandedBackMidPageFetchesNoMessageTwice(t *testing.T) {
	t.Parallel()
	const n = 150
	e := newEnv(t, envOptions{
		noStart: true,
		fake:    googlefake.Options{GmailQuotaWindow: time.Second},
		budget:  google.BudgetConfig{UserUnits: 200, Window: time.Second, MaxWait: time.Millisecond},
		cfg:     gmail.Config{FullSyncSlice: 100},
	})
	acc := e.connect(ann, n)
	runFullSync := func() (handedBack bool) {
		t.Helper()
		for _, r := range e.records(gmail.TypeFullSync) {
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
	stored := e.got(acc.ID)
	want, _, _ := threadCost(slices.Collect(maps.Values(stored)), func(m mirrorMsg) string { return m.ThreadID })
	if got := fetchUnits(e, ann); got != want {
		t.Fatalf("Gmail answered %d units of gets, the %d messages stored cost %d: fetched messages were thrown away", got, first, want)
	}
	handBacks := 1
	testkit.Eventually(t, 30*time.Second, "the full sync to end through handed-back runs", func() bool {
		if runFullSync() {
			handBacks++
		}
		a := e.account(acc.ID)
		return a.FullSyncCompleted >= a.FullSyncRequested
	})
	if got, want := fetchUnits(e, ann), mailboxCost(e, ann); got != want {
		t.Errorf("Gmail answered %d units of gets for %d messages, want %d (%d runs handed back)", got, n, want, handBacks)
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
	// A slice never splits a thread: each of the most's slices may have
	// gone past 25 by up to a thread less one message.
	over := most / 25 * (largestThread(e, emails[0]) - 1)
	if least*2 < most-over {
		t.Errorf("stored per account when half of all was stored: %v; want each at least half the most (less %d a thread's overshoot)", counts, over)
	}
	for i, a := range accs {
		e.waitConverged(a.ID, emails[i], 60*time.Second)
		if got, want := fetchUnits(e, emails[i]), mailboxCost(e, emails[i]); got != want {
			t.Errorf("%s: Gmail answered %d units of gets for %d messages, want %d", emails[i], got, n, want)
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
		cfg:     gmail.Config{FullSyncSlice: 50, FullSyncRunMax: 50},
	})
	acc := e.connect(ann, 120)
	recs := e.records(gmail.TypeFullSync)
	if len(recs) != 1 {
		t.Fatalf("%d full sync tasks, want 1", len(recs))
	}
	if err := e.run(recs[0], recs[0].Payload); err != nil {
		t.Fatalf("the run: %v; want it to wait for the project's window and do its slice", err)
	}
	if got, most := fullSyncStored(e, acc.ID, 120), 50+largestThread(e, ann)-1; got < 50 || got > most {
		t.Fatalf("the run stored %d messages, want its slice of 50 (%d at most: a thread is not split)", got, most)
	}
	next := e.records(gmail.TypeFullSync)
	if len(next) != 1 || next[0].ID == recs[0].ID {
		t.Fatalf("after the slice: full sync tasks %+v, want the account's next run", next)
	}
}

// A full sync that no other account's waits for goes on past its slice,
// slice after slice, up to FullSyncRunMax (each hand-on is a round trip
// through the broker, most of a lone first sync's time in runs of 25);
// once another account's full sync is recorded, a run does its slice and
// hands on behind it.
func TestLoneFullSyncGoesOnPastItsSlice(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 25, FullSyncRunMax: 200},
		fake: googlefake.Options{GmailQuotaWindow: time.Second}, budget: google.BudgetConfig{Window: time.Second}})
	acc := e.connect(ann, 620)
	overshoot := largestThread(e, ann) - 1
	run := func() {
		t.Helper()
		recs := e.records(gmail.TypeFullSync)
		if len(recs) == 0 {
			t.Fatal("no full sync task")
		}
		for _, r := range recs {
			if strings.Contains(string(r.Payload), acc.ID) {
				if err := e.run(r, r.Payload); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatalf("no full sync task of %s among %d", acc.ID, len(recs))
	}
	run()
	if got := fullSyncStored(e, acc.ID, 620); got < 200 || got > 200+overshoot {
		t.Fatalf("the lone run stored %d messages, want its run's most (200, %d at most: a thread is not split)", got, 200+overshoot)
	}
	e.connect("bob@example.com", 10) // bob's full sync waits now
	before := fullSyncStored(e, acc.ID, 620)
	run()
	if got := fullSyncStored(e, acc.ID, 620) - before; got < 25 || got > 25+overshoot {
		t.Fatalf("with another full sync waiting, the run stored %d messages, want its slice of 25 (%d at most)", got, 25+overshoot)
	}
}

// TestFullSyncSlicesShareListPages: the first run lists the whole mailbox
// of 620 (two messages.list pages of 500, not one per run) and runs of 25
// messages take their threads from that listing; each run but the last
// stores at least its 25 (at most a thread's overshoot more) and hands on
// to the next, and no message is fetched twice: Gmail answers one
// threads.get a thread and one messages.get a lone message.
func TestFullSyncSlicesShareListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 25, FullSyncRunMax: 25},
		fake: googlefake.Options{GmailQuotaWindow: time.Second}, budget: google.BudgetConfig{Window: time.Second}})
	acc := e.connect(ann, 620)
	most := 25 + largestThread(e, ann) - 1
	runs, stored := 0, 0
	for ; runs < 100; runs++ {
		recs := e.records(gmail.TypeFullSync)
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
			if n := a.FullSyncStart.Fetched - stored; n < 25 || n > most {
				t.Fatalf("run %d stored %d messages, want 25 to %d", runs+1, n, most)
			}
			stored = a.FullSyncStart.Fetched
		}
	}
	if runs < 620/most || runs > (620+24)/25 {
		t.Errorf("%d runs of 25 to %d messages for 620", runs, most)
	}
	if got := e.fake.Gmail.QuotaUnitsByMethod(ann)[googlefake.MethodMessagesList] / google.MustPrices(google.DefaultPrices).MessagesList; got != 2 {
		t.Errorf("%d messages.list calls, want 2 (pages of 500)", got)
	}
	if got, want := fetchUnits(e, ann), mailboxCost(e, ann); got != want {
		t.Errorf("Gmail answered %d units of gets for 620 messages, want %d", got, want)
	}
	if a := e.account(acc.ID); a.FullSyncStart != nil || a.FullSyncCompleted != a.FullSyncRequested {
		t.Fatalf("after the runs: start %+v, completed %d of %d", a.FullSyncStart, a.FullSyncCompleted, a.FullSyncRequested)
	}
}

// TestFullSyncFetchesThreadsWhole: a mailbox of 600 threads of 1 to 5
// messages (1,800 messages), each thread's messages added in rounds so
// that they fall on different list pages of 500, is fully synced in runs
// of 100 messages. Each message is fetched once, so the full sync costs
// exactly Google's floor for it: 4 list pages x 5 units, one threads.get
// (10 units) for each of the 480 threads of two or more, one messages.get
// (5 units) for each of the 120 lone messages, and the fixed calls (the
// labels and the profile, 1 unit each); the mirror equals the mailbox.
func TestFullSyncFetchesThreadsWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 100},
		fake: googlefake.Options{GmailQuotaWindow: time.Second}, budget: google.BudgetConfig{Window: time.Second}})
	refresh := e.fake.AddAccount(ann)
	const threads = 600
	ids := make([]string, threads)
	for round := range 5 {
		for i := range threads {
			if i%5 < round { // thread i has i%5+1 messages
				continue
			}
			id, err := e.fake.Gmail.AddMessage(ann, googlefake.Message{ThreadID: ids[i], From: "p@example.org", To: ann,
				Subject: fmt.Sprintf("thread %d", i), Body: fmt.Sprintf("message %d", round)})
			if err != nil {
				t.Fatal(err)
			}
			if round == 0 {
				ids[i] = id // a thread's id is its first message's
			}
		}
	}
	msgs := e.fake.Gmail.Messages(ann)
	if len(msgs) != 1800 {
		t.Fatalf("%d messages, want 1,800", len(msgs))
	}
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	for runs := 0; ; runs++ {
		recs := e.records(gmail.TypeFullSync)
		if len(recs) == 0 {
			break
		}
		if runs == 100 {
			t.Fatal("the full sync did not end in 100 runs")
		}
		if err := e.run(recs[0], recs[0].Payload); err != nil {
			t.Fatalf("run %d: %v", runs+1, err)
		}
	}
	got := e.fake.Gmail.QuotaUnitsByMethod(ann)
	want := map[string]int{
		googlefake.MethodMessagesList: 4 * google.MustPrices(google.DefaultPrices).MessagesList,
		googlefake.MethodThreadsGet:   480 * google.MustPrices(google.DefaultPrices).ThreadsGet,
		googlefake.MethodMessagesGet:  120 * google.MustPrices(google.DefaultPrices).MessagesGet,
		googlefake.MethodLabelsList:   google.MustPrices(google.DefaultPrices).LabelsList,
		googlefake.MethodGetProfile:   google.MustPrices(google.DefaultPrices).GetProfile,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("units by method (-Google's floor +spent):\n%s", diff)
	}
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("mirror differs (-mailbox +mirror):\n%s", diff)
	}
}

// TestFullSyncFinishesAnOldRecord: a data dir from before full syncs
// fetched whole threads holds a full sync in progress as that version
// kept it: its one page (300 ids, listed) with 100 of them stored and 200
// left, ids without their thread ids (FullSyncListed), no Grouped mark.
// The next run moves the 200 to groups of one and fetches each with
// messages.get, as the old version would have: no list call, no
// threads.get, no message fetched twice; the full sync ends and the
// mirror equals the mailbox.
func TestFullSyncFinishesAnOldRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 100},
		fake: googlefake.Options{GmailQuotaWindow: time.Second}, budget: google.BudgetConfig{Window: time.Second}})
	acc := e.connect(ann, 300)
	msgs := e.fake.Gmail.Messages(ann)
	slices.Reverse(msgs) // the listing's order, newest first
	var left []string
	for _, m := range msgs[100:] {
		left = append(left, m.ID)
	}
	err := e.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(acc.ID)
		if err != nil {
			return err
		}
		a.FullSyncStart = &store.FullSyncStart{Requested: a.FullSyncRequested, HistoryID: e.fake.Gmail.HistoryID(ann),
			At: time.Now().UTC(), Messages: 300, Fetched: 100, ListedAll: true}
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		var stored []string
		for _, m := range msgs[:100] {
			sm := store.Message{ID: m.ID}
			sm.MergeFetched(store.Message{ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject,
				Snippet: m.Snippet, Date: m.Date, LabelIDs: m.LabelIDs, HistoryID: m.HistoryID})
			if err := tx.MessagePut(acc.ID, sm); err != nil {
				return err
			}
			stored = append(stored, m.ID)
		}
		if err := tx.FullSyncNoteFetched(acc.ID, stored); err != nil {
			return err
		}
		return tx.FullSyncListedPut(acc.ID, a.FullSyncRequested, left)
	})
	if err != nil {
		t.Fatal(err)
	}
	for runs := 0; ; runs++ {
		recs := e.records(gmail.TypeFullSync)
		if len(recs) == 0 {
			break
		}
		if runs == 10 {
			t.Fatal("the full sync did not end in 10 runs")
		}
		if err := e.run(recs[0], recs[0].Payload); err != nil {
			t.Fatalf("run %d: %v", runs+1, err)
		}
	}
	got := e.fake.Gmail.QuotaUnitsByMethod(ann)
	want := map[string]int{googlefake.MethodMessagesGet: 200 * google.MustPrices(google.DefaultPrices).MessagesGet}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("units by method (-want +got):\n%s", diff)
	}
	if a := e.account(acc.ID); a.FullSyncStart != nil || a.FullSyncCompleted != a.FullSyncRequested {
		t.Fatalf("after the runs: start %+v, completed %d of %d", a.FullSyncStart, a.FullSyncCompleted, a.FullSyncRequested)
	}
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("mirror differs (-mailbox +mirror):\n%s", diff)
	}
}
