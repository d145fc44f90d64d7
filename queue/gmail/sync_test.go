package gmail_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The embedded broker's and asynq's goroutines end after the test's
		// cleanups; the HTTP clients' idle connections close with them.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}

const ann = "ann@example.com"

func TestFullSyncThenHistoryConverges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	acc := e.connect(ann, 120)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	a := e.account(acc.ID)
	if a.Status != store.AccountReady || a.HistoryID != e.fake.Gmail.HistoryID(ann) {
		t.Fatalf("after the full sync: status %s, watermark %d, mailbox at %d", a.Status, a.HistoryID, e.fake.Gmail.HistoryID(ann))
	}

	mutate(t, e.fake, ann, 11)
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if got, want := e.account(acc.ID).HistoryID, e.fake.Gmail.HistoryID(ann); got != want {
		t.Fatalf("watermark %d, mailbox at %d", got, want)
	}
	// A duplicate push changes nothing and records nothing.
	e.notify(ann)
	if !e.idle() {
		t.Fatalf("a duplicate push recorded work: %v", e.outbox())
	}
}

func TestHistoryTooOldFallsBackToFullSync(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	acc := e.connect(ann, 40)
	e.waitConverged(acc.ID, ann, 20*time.Second)

	mutate(t, e.fake, ann, 12)
	if err := e.fake.Gmail.ExpireHistory(ann); err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	d, err := e.p.Detail(acc.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := lastRun(d.Runs, "full"); !ok || r.Trigger != "too_old" {
		t.Fatalf("runs %+v, want the last full sync triggered by too_old", d.Runs)
	}
}

func TestPollSyncsWithoutPush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: gmail.Config{PollInterval: 300 * time.Millisecond}})
	m := e.p.Services()[0] // the maintainer
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Stop(context.Background()) })
	acc := e.connect(ann, 10)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if err := e.fake.Gmail.MarkRead(ann, e.fake.Gmail.Messages(ann)[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := googlefake.NewGenerator(3, time.Time{}).Add(e.fake.Gmail, ann, 3); err != nil {
		t.Fatal(err)
	}
	e.waitConverged(acc.ID, ann, 20*time.Second)
}

// reclassifyRecorder is a RuleApplier that records the reclassifies a full
// sync asks for, and what its transaction held then.
type reclassifyRecorder struct {
	gmail.NoRules
	mu    sync.Mutex
	calls []reclassifyCall
}

type reclassifyCall struct {
	userID, accountID string
	completed         bool // the full sync was recorded complete
	messages          int
}

func (r *reclassifyRecorder) ReclassifyAccount(tx *store.Tx, userID, accountID string) error {
	acc, err := tx.AccountGet(accountID)
	if err != nil {
		return err
	}
	n := 0
	if err := tx.EachMessage(accountID, func(store.Message) error { n++; return nil }); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, reclassifyCall{userID, accountID, acc.FullSyncCompleted >= acc.FullSyncRequested && acc.FullSyncRequested > 0, n})
	return nil
}

func (r *reclassifyRecorder) recorded() []reclassifyCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// A full sync hands the account to the rules in the transaction that
// records it complete, with every message stored: the mail it brings in
// never passes message-added.
func TestFullSyncSchedulesTheRules(t *testing.T) {
	t.Parallel()
	rec := &reclassifyRecorder{}
	e := newEnv(t, envOptions{rules: rec})
	acc := e.connect(ann, 30)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	want := reclassifyCall{userID: e.user.ID, accountID: acc.ID, completed: true, messages: 30}
	testkit.Eventually(t, 10*time.Second, "the reclassify of the synced account", func() bool { return len(rec.recorded()) > 0 })
	if diff := cmp.Diff([]reclassifyCall{want}, rec.recorded(), cmp.AllowUnexported(reclassifyCall{})); diff != "" {
		t.Fatalf("reclassifies asked for (-want +got):\n%s", diff)
	}
	// A history sync does not ask again.
	mutate(t, e.fake, ann, 5)
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if n := len(rec.recorded()); n != 1 {
		t.Errorf("%d reclassifies after a history sync, want still 1", n)
	}
}

// An interrupted full sync goes on where it stopped: the run that resumes it
// fetches only the messages no earlier run stored (the failed run stored
// the rest of its page before it failed), and the mirror ends equal to the
// mailbox.
func TestInterruptedFullSyncResumes(t *testing.T) {
	t.Parallel()
	// 1,200 messages cost over 6,000 units, more than one minute of the
	// account's quota: the minute is compressed to 2 s (emulator and budget
	// alike) so the test waits for the budget but not for a minute.
	e := newEnv(t, envOptions{fake: googlefake.Options{GmailQuotaWindow: 2 * time.Second},
		budget: google.BudgetConfig{Window: 2 * time.Second}, cfg: gmail.Config{FullSyncSlice: 100}})
	refresh := e.fake.AddAccount(ann)
	if _, err := e.fake.Gmail.Generate(ann, 1200, 7); err != nil {
		t.Fatal(err)
	}
	// The oldest lone message (fetched with messages.get) is among the
	// last fetched: its download fails until the fault is removed, so the
	// run that fetches it fails.
	oldest := lone(e.fake.Gmail.Messages(ann))[0].ID
	fault, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, MessageID: oldest, Code: 500})
	if err != nil {
		t.Fatal(err)
	}
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	failedRun := func() bool {
		d, err := e.p.Detail(acc.ID, 10)
		r, ok := lastRun(d.Runs, "full")
		return err == nil && ok && r.Error != ""
	}
	// Generous deadlines: the test is about resuming, and on a loaded
	// machine 1,200 downloads under the budget take a while.
	testkit.Eventually(t, 60*time.Second, "the first full sync run to fail", failedRun)
	fault.Remove()
	e.waitConverged(acc.ID, ann, 60*time.Second)

	d, err := e.p.Detail(acc.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	last, _ := lastRun(d.Runs, "full")
	if last.Kind != "full" || last.Error != "" || last.Messages != 1200 {
		t.Fatalf("the full sync's run: %+v; want 1,200 messages stored", last)
	}
	// Every fetch Gmail answered, less the failed ones: each message once,
	// a thread of two or more with one threads.get and a lone message with
	// one messages.get (the failed run's stored threads are not fetched
	// again).
	units := fetchUnits(e, ann) - fault.Fired()*google.MustPrices(google.DefaultPrices).MessagesGet
	if want := mailboxCost(e, ann); units != want {
		t.Fatalf("%d units of gets answered (failures aside), want %d: each of the 1,200 messages once", units, want)
	}
	if a := e.account(acc.ID); a.FullSyncStart != nil || a.HistoryID != e.fake.Gmail.HistoryID(ann) {
		t.Fatalf("after the full sync: start %+v, watermark %d, mailbox at %d", a.FullSyncStart, a.HistoryID, e.fake.Gmail.HistoryID(ann))
	}
}

// The records of deleted messages are pruned after the retention; the
// mirror stays equal to the mailbox, and later changes still converge.
func TestPruneTombstones(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: gmail.Config{TombstoneRetention: time.Millisecond}})
	acc := e.connect(ann, 30)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	msgs := e.fake.Gmail.Messages(ann)
	for _, m := range msgs[:5] {
		if err := e.fake.Gmail.Delete(ann, m.ID); err != nil {
			t.Fatal(err)
		}
	}
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
	time.Sleep(5 * time.Millisecond) // past the retention
	n, err := e.p.PruneTombstones(context.Background())
	if err != nil || n != 5 {
		t.Fatalf("PruneTombstones = %d, %v; want the 5 deleted", n, err)
	}
	err = e.db.View(func(tx *store.Tx) error {
		for _, m := range msgs[:5] {
			if _, err := tx.MessageGet(acc.ID, m.ID); err == nil {
				t.Errorf("the record of deleted message %s is still there", m.ID)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := e.p.PruneTombstones(context.Background()); err != nil || n != 0 {
		t.Fatalf("second prune = %d, %v; want nothing left", n, err)
	}
	mutate(t, e.fake, ann, 21)
	e.notify(ann)
	e.waitConverged(acc.ID, ann, 20*time.Second)
}

// lastRun returns the newest run of a kind (runs are newest first).
func lastRun(runs []store.SyncRun, kind string) (store.SyncRun, bool) {
	for _, r := range runs {
		if r.Kind == kind {
			return r, true
		}
	}
	return store.SyncRun{}, false
}
