package gmail_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"mailroom/queue/gmail"
	"mailroom/queue/google/googlefake"
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
	if len(d.Runs) == 0 || d.Runs[0].Kind != "full" || d.Runs[0].Trigger != "too_old" {
		t.Fatalf("last run %+v, want a full sync triggered by too_old", d.Runs)
	}
}

func TestPollSyncsWithoutPush(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: gmail.Config{PollInterval: 300 * time.Millisecond}})
	m := e.p.Maintainer()
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
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
