package rules

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/google"
	"mailroom/store"
	"mailroom/store/storetest"
)

// fixture is the pipeline over a real store, broker, queue and the Google
// emulator, with one user and one account whose mailbox is mirrored into
// the store by the fixture itself (no gmail pipeline here).
type fixture struct {
	t       testing.TB
	db      *store.DB
	broker  *broker.Broker
	fake    *googlefake.Server
	client  *google.Client
	p       *Pipeline
	q       *queue.Queue
	user    string
	account string
	email   string

	mu      sync.Mutex
	tokens  map[string]string // account id -> refresh token
	openers map[string]Gmail
}

func testConfig() Config {
	return Config{
		Debounce: 300 * time.Millisecond, MaxWait: 2 * time.Second, Tick: 50 * time.Millisecond,
		BatchSize: 50, SaveLimit: 20, SaveWindow: time.Minute,
	}
}

// newFixture builds the pipeline; the queue is started when start is set.
func newFixture(t testing.TB, cfg Config, start bool) *fixture {
	t.Helper()
	f := &fixture{t: t, db: storetest.Open(t), broker: brokertest.Embedded(t), tokens: map[string]string{}, openers: map[string]Gmail{}}
	// Google's 2025 price list on both sides (a body read 5 units, 15,000
	// a minute): the tests read hundreds of bodies, which the 2026 list's
	// 60 units each would spread over minutes; what the lists cost is
	// queue/google's and internal/app's to test.
	f.fake = googlefake.StartForTest(t, googlefake.Options{GmailQuotaPrices: googlefake.GmailPrices2025})
	// The Gmail budget at Google's defaults for that list, over the
	// fixture's broker, as serve runs it.
	budget, err := google.NewBudget(google.BudgetConfig{Prices: google.MustPrices(google.Prices2025), Wait: queue.Wait}, f.broker.Client())
	if err != nil {
		t.Fatal(err)
	}
	f.client = google.New(google.Config{APIURL: f.fake.URL(), TokenURL: f.fake.TokenURL(), ReadRetries: -1, Budget: budget})
	table, err := queue.NewTable(Tasks(3))
	if err != nil {
		t.Fatal(err)
	}
	f.q, err = queue.New(queue.Config{
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, DelayedCheckInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		// Durable alerts that are never posted (the alerter is not
		// started): a test reads what a dead letter left pending.
		Alerts: queue.NewAlerter(queue.AlertConfig{WebhookURL: "http://127.0.0.1:1/never", DB: f.db}),
	}, f.db, f.broker.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	f.p, err = New(cfg, Deps{DB: f.db, Broker: f.broker.Client(), Gmail: f.open, Queue: f.q})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Register(table); err != nil {
		t.Fatal(err)
	}
	for _, tt := range table.Types() {
		if tt.Name != TypeReclassifyBatch && tt.Name != TypeLabelWrite {
			if err := table.Handle(tt.Name, func(context.Context, *queue.Task) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if start {
		if err := f.q.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.q.Stop(context.Background()) })
	}
	f.user = f.addUser("ann@example.com")
	f.email = "ann@example.com"
	f.account = f.addAccount(f.user, f.email)
	return f
}

func (f *fixture) addUser(email string) string {
	f.t.Helper()
	var u store.User
	f.update(func(tx *store.Tx) (err error) {
		u, err = tx.UserCreate(email, "")
		return err
	})
	return u.ID
}

func (f *fixture) addAccount(userID, email string) string {
	f.t.Helper()
	id := store.NewID()
	f.mu.Lock()
	f.tokens[id] = f.fake.AddAccount(email)
	f.mu.Unlock()
	f.update(func(tx *store.Tx) error {
		return tx.AccountPut(store.Account{ID: id, UserID: userID, Email: email, Status: store.AccountReady})
	})
	return id
}

func (f *fixture) open(ctx context.Context, accountID string) (Gmail, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g, ok := f.openers[accountID]; ok {
		return g, nil
	}
	tok, ok := f.tokens[accountID]
	if !ok {
		return nil, queue.Permanent(fmt.Errorf("no account %s", accountID))
	}
	g, err := f.client.Gmail(ctx, accountID, f.client.TokenSource(google.Token{RefreshToken: tok}, nil))
	if err != nil {
		return nil, err
	}
	f.openers[accountID] = g
	return g, nil
}

func (f *fixture) update(fn func(tx *store.Tx) error) {
	f.t.Helper()
	if err := f.db.Update(fn); err != nil {
		f.t.Fatal(err)
	}
}

// addThreads adds n threads to the account's mailbox in the emulator; every
// third thread gets a reply. from(i) is the sender of thread i.
func (f *fixture) addThreads(n int, from func(i int) string) {
	f.t.Helper()
	for i := range n {
		id, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{From: from(i), To: f.email, Subject: fmt.Sprintf("thread %d", i), Body: "hello"})
		if err != nil {
			f.t.Fatal(err)
		}
		if i%3 == 0 {
			if _, err := f.fake.Gmail.AddMessage(f.email, googlefake.Message{ThreadID: id, From: f.email, To: from(i), Subject: fmt.Sprintf("Re: thread %d", i), Body: "thanks"}); err != nil {
				f.t.Fatal(err)
			}
		}
	}
}

// mirror copies the emulator's mailbox and labels into the store, as the
// gmail pipeline's full sync would.
func (f *fixture) mirror() {
	f.t.Helper()
	msgs := f.fake.Gmail.Messages(f.email)
	labels := f.fake.Gmail.LabelNames(f.email)
	f.update(func(tx *store.Tx) error {
		user := map[string]string{}
		for id, name := range labels {
			if id != name {
				user[id] = name
			}
		}
		if err := tx.LabelsReplace(f.account, user); err != nil {
			return err
		}
		for _, m := range msgs {
			cur, err := tx.MessageGet(f.account, m.ID)
			if err != nil {
				cur = store.Message{ID: m.ID}
			}
			cur.MergeFetched(store.Message{ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Cc: m.Cc,
				Subject: m.Subject, LabelIDs: m.LabelIDs, HistoryID: m.HistoryID})
			if err := tx.MessagePut(f.account, cur); err != nil {
				return err
			}
		}
		return nil
	})
}

// gmailLabeled returns the ids of the account's messages that carry the
// label named name in the emulator.
func (f *fixture) gmailLabeled(name string) map[string]bool {
	out := map[string]bool{}
	id, ok := f.fake.Gmail.LabelID(f.email, name)
	if !ok {
		return out
	}
	for _, m := range f.fake.Gmail.Messages(f.email) {
		for _, l := range m.LabelIDs {
			if l == id {
				out[m.ID] = true
			}
		}
	}
	return out
}

func (f *fixture) job(id string) store.ReclassifyJob {
	f.t.Helper()
	var j store.ReclassifyJob
	if err := f.db.View(func(tx *store.Tx) (err error) {
		j, err = tx.ReclassifyJobGet(id)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
	return j
}

func spec(label string, conds ...Condition) Spec {
	return Spec{Label: label, Match: MatchAll, Conditions: conds}
}

func cond(field, op, value string) Condition { return Condition{Field: field, Op: op, Value: value} }

// writerTask returns the account's label writer task from the outbox (the
// queue is not started: the test runs the handler itself), or nil.
func (f *fixture) writerTask() *queue.Task {
	f.t.Helper()
	r, ok := f.writerRecord()
	if !ok {
		return nil
	}
	return &queue.Task{ID: r.ID, Type: r.Type, Queue: r.Queue, Payload: r.Payload, Attempt: 1}
}

// writerRecord returns the account's label writer record in the outbox.
func (f *fixture) writerRecord() (rec queue.Record, ok bool) {
	f.t.Helper()
	f.db.View(func(tx *store.Tx) error {
		return f.q.Tasks(tx, TypeLabelWrite, func(r queue.Record) bool {
			rec, ok = r, true
			return false
		})
	})
	return rec, ok
}

// runWriter runs the account's label writer once, as the queue would.
func (f *fixture) runWriter() error {
	f.t.Helper()
	task := f.writerTask()
	if task == nil {
		f.t.Fatal("no label writer task in the outbox")
	}
	return f.p.HandleLabelWrite(context.Background(), task)
}
