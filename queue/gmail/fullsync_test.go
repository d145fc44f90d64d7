package gmail_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// liveApplied records the event tasks that ran while the account's full
// sync was still due.
type liveApplied struct {
	mu     sync.Mutex
	db     *store.DB
	during map[string]int // message id -> events applied during the full sync
	after  int
}

func (l *liveApplied) observe(_ string, ev gmail.Event) {
	var acc store.Account
	err := l.db.View(func(tx *store.Tx) (err error) { acc, err = tx.AccountGet(ev.AccountID); return err })
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && acc.FullSyncCompleted < acc.FullSyncRequested {
		l.during[ev.MessageID]++
	} else {
		l.after++
	}
}

func (l *liveApplied) duringFullSync(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.during[id]
}

// TestLiveChangesDuringFullSync: while a full sync of 1,200 messages (three
// list pages of 500, all listed before any fetch) is held in its second
// page (one lone message's download is slow), messages are read, trashed,
// labelled and deleted on every side of its cursor: among those it stored,
// those it downloaded but has not stored yet (its snapshots are older than
// the changes), those it has not fetched yet, and on the slow message
// itself; a message arrives. A push
// then has its history read and its events applied while the full sync
// still runs (not after it), and at the end the mirror equals the mailbox,
// message for message, history ids included.
func TestLiveChangesDuringFullSync(t *testing.T) {
	t.Parallel()
	live := &liveApplied{during: map[string]int{}}
	// 1,200 downloads are 6,000 units, more than the account's minute:
	// the minute is compressed to 2 s (emulator and budget alike).
	e := newEnv(t, envOptions{
		fake:    googlefake.Options{GmailQuotaWindow: 2 * time.Second},
		budget:  google.BudgetConfig{Window: 2 * time.Second},
		handled: live.observe,
	})
	live.db = e.db
	g := e.fake.Gmail
	refresh := e.fake.AddAccount(ann)
	if _, err := g.Generate(ann, 1200, 7); err != nil {
		t.Fatal(err)
	}
	msgs := g.Messages(ann) // oldest first; the list pages are newest first
	stored, fetched, unlisted := msgs[1100:1199], msgs[300:600], msgs[0:150]
	slow := lone(msgs[:201])[len(lone(msgs[:201]))-1] // about the last of the second page, fetched alone
	fault, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, MessageID: slow.ID, Latency: 6 * time.Second, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the full sync to be held in its second page", func() bool {
		return fault.Fired() == 1
	})

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	label, err := g.CreateLabel(ann, "During")
	must(err)
	var changed []string
	for _, side := range [][]googlefake.Message{stored, fetched, unlisted} {
		read, trash, del, lab := side[0], side[1], side[2], side[3]
		if read.Unread() {
			must(g.MarkRead(ann, read.ID))
		} else {
			must(g.MarkUnread(ann, read.ID))
		}
		must(g.Trash(ann, trash.ID))
		must(g.Delete(ann, del.ID))
		must(g.AddLabels(ann, lab.ID, label, googlefake.LabelStarred))
		must(g.RemoveLabels(ann, lab.ID, googlefake.LabelInbox))
		changed = append(changed, read.ID, trash.ID, del.ID, lab.ID)
	}
	must(g.AddLabels(ann, slow.ID, label))
	newID, err := g.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "during the full sync"})
	must(err)
	changed = append(changed, newID)
	e.notify(ann)

	// Every change is applied as a live event before the full sync ends.
	testkit.Eventually(t, 20*time.Second, "the live events to run during the full sync", func() bool {
		for _, id := range changed {
			if live.duringFullSync(id) == 0 {
				return false
			}
		}
		return true
	})
	if a := e.account(acc.ID); a.FullSyncCompleted >= a.FullSyncRequested {
		t.Fatal("the full sync ended before the test could check that live events ran during it")
	}
	e.waitConverged(acc.ID, ann, 60*time.Second)
	a := e.account(acc.ID)
	if a.Status != store.AccountReady || a.HistoryID != g.HistoryID(ann) || a.FullSyncStart != nil {
		t.Fatalf("after the full sync: status %s, watermark %d (mailbox at %d), start %+v", a.Status, a.HistoryID, g.HistoryID(ann), a.FullSyncStart)
	}
	d, err := e.p.Detail(acc.ID, 20)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := lastRun(d.Runs, "full"); !ok || r.Error != "" || r.Messages < 1199 {
		t.Fatalf("the full sync's run: %+v", r)
	}
}

// TestPushDuringFullSyncBeforeItBegins: a push recorded while a full sync
// is due but has not begun (the history sync has nothing to read from yet)
// is not lost: the full sync's start covers it, and the mirror converges.
// The tasks run by hand in the order that matters.
func TestPushDuringFullSyncBeforeItBegins(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 20)
	g := e.fake.Gmail
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(g.MarkRead(ann, g.Messages(ann)[0].ID))
	e.notify(ann)
	// The history sync runs first: nothing to read, the task is done, the
	// account stays syncing.
	for _, r := range e.records(gmail.TypeSync) {
		must(e.run(r, r.Payload))
	}
	if n := len(e.records(gmail.TypeSync)); n != 0 {
		t.Fatalf("%d history syncs left", n)
	}
	if a := e.account(acc.ID); a.Status != store.AccountSyncing || a.HistoryID != 0 {
		t.Fatalf("before the full sync: status %s, watermark %d", a.Status, a.HistoryID)
	}
	// A change during the full sync, then the full sync, then what it
	// recorded.
	must(g.Trash(ann, g.Messages(ann)[1].ID))
	e.syncNow()
	for _, typ := range []string{gmail.TypeMessageRead, gmail.TypeMessageTrashed, gmail.TypeMessageAdded} {
		for _, r := range e.records(typ) {
			must(e.run(r, r.Payload))
		}
	}
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("mirror differs (-mailbox +mirror):\n%s", diff)
	}
	if a := e.account(acc.ID); a.Status != store.AccountReady || a.HistoryID != g.HistoryID(ann) {
		t.Fatalf("after: status %s, watermark %d, mailbox at %d", a.Status, a.HistoryID, g.HistoryID(ann))
	}
}

// TestResyncKeepsReadingHistory: after a resync is requested and before its
// full sync begins, pushes are read from the account's watermark (live
// changes do not wait for the full sync); once Gmail calls that watermark
// too old, the history sync stops reading from it (no new full sync
// request: the due one serves) until the full sync begins.
func TestResyncKeepsReadingHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 20)
	e.syncNow()
	g := e.fake.Gmail
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	runSyncs := func() {
		t.Helper()
		for _, r := range e.records(gmail.TypeSync) {
			must(e.run(r, r.Payload))
		}
	}
	must(e.p.Resync(context.Background(), acc.ID))
	must(g.MarkRead(ann, g.Messages(ann)[0].ID))
	e.notify(ann)
	runSyncs()
	if n := len(e.records(gmail.TypeMessageRead)); n != 1 {
		t.Fatalf("%d message-read events recorded before the full sync began, want 1", n)
	}
	if n := len(e.records(gmail.TypeFullSync)); n != 1 {
		t.Fatalf("%d full syncs waiting, want the resync's", n)
	}

	must(g.MarkUnread(ann, g.Messages(ann)[0].ID))
	must(g.ExpireHistory(ann))
	requested := e.account(acc.ID).FullSyncRequested
	e.notify(ann)
	runSyncs()
	if a := e.account(acc.ID); a.StaleHistoryID != a.HistoryID {
		t.Fatalf("Gmail's 404 did not mark watermark %d as too old (stale %d)", a.HistoryID, a.StaleHistoryID)
	}
	calls := e.fake.Calls(googlefake.MethodHistoryList)
	must(g.Trash(ann, g.Messages(ann)[1].ID))
	e.notify(ann)
	runSyncs()
	if got := e.fake.Calls(googlefake.MethodHistoryList); got != calls {
		t.Errorf("history.list called %d more times from a watermark Gmail called too old", got-calls)
	}
	if a := e.account(acc.ID); a.FullSyncRequested != requested {
		t.Errorf("full sync requests %d, want still %d (the resync's full sync serves)", a.FullSyncRequested, requested)
	}
	e.syncNow()
	for range 3 {
		for _, typ := range []string{gmail.TypeMessageRead, gmail.TypeMessageUnread, gmail.TypeMessageTrashed} {
			for _, r := range e.records(typ) {
				must(e.run(r, r.Payload))
			}
		}
		e.syncNow()
	}
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("mirror differs (-mailbox +mirror):\n%s", diff)
	}
	if a := e.account(acc.ID); a.Status != store.AccountReady || a.HistoryID != g.HistoryID(ann) || a.StaleHistoryID != 0 {
		t.Fatalf("after: status %s, watermark %d (mailbox at %d), stale %d", a.Status, a.HistoryID, g.HistoryID(ann), a.StaleHistoryID)
	}
}

// TestHistoryTooOldDuringFullSync: while a full sync runs, Gmail drops the
// history since its start (history.list answers 404 from there). The
// history sync asks for one new full sync (not one per push), the running
// one does it as its next pass from a new start, and the mirror converges.
func TestHistoryTooOldDuringFullSync(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		fake:   googlefake.Options{GmailQuotaWindow: 2 * time.Second},
		budget: google.BudgetConfig{Window: 2 * time.Second},
	})
	g := e.fake.Gmail
	refresh := e.fake.AddAccount(ann)
	if _, err := g.Generate(ann, 300, 9); err != nil {
		t.Fatal(err)
	}
	slow := lone(g.Messages(ann))[0] // the last download, fetched alone
	fault, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, MessageID: slow.ID, Latency: 3 * time.Second, Times: 1})
	if err != nil {
		t.Fatal(err)
	}
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the full sync to be held", func() bool { return fault.Fired() == 1 })
	for i, m := range g.Messages(ann)[100:103] {
		if err := g.AddLabels(ann, m.ID, googlefake.LabelStarred); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := g.ExpireHistory(ann); err != nil {
				t.Fatal(err)
			}
		}
		e.notify(ann)
	}
	testkit.Eventually(t, 10*time.Second, "the history sync to find its start too old", func() bool {
		return e.account(acc.ID).StaleHistoryID != 0
	})
	e.waitConverged(acc.ID, ann, 60*time.Second)
	a := e.account(acc.ID)
	if a.FullSyncRequested != 2 || a.FullSyncCompleted != 2 || a.Status != store.AccountReady || a.HistoryID != g.HistoryID(ann) {
		t.Fatalf("after: requested %d, completed %d (want 2: the connect's and one for the lost history), status %s, watermark %d of %d",
			a.FullSyncRequested, a.FullSyncCompleted, a.Status, a.HistoryID, g.HistoryID(ann))
	}
}
