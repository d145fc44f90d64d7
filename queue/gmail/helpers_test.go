package gmail_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/rules"
	"mailroom/store"
	"mailroom/store/storetest"
)

// env is the pipeline over a real bbolt file, a real queue on the embedded
// broker and the Google emulator.
type env struct {
	t     *testing.T
	fake  *googlefake.Server
	db    *store.DB
	table *queue.Table
	q     *queue.Queue
	p     *gmail.Pipeline
	user  store.User

	broker *broker.Broker
	budget *google.Budget
	reg    *prometheus.Registry // the budget's metrics
}

// budgetUnits returns the units the budget granted
// (mailroom_gmail_quota_units_total).
func (e *env) budgetUnits() int {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "mailroom_gmail_quota_units_total" {
			return int(mf.GetMetric()[0].GetCounter().GetValue())
		}
	}
	e.t.Fatal("no mailroom_gmail_quota_units_total")
	return 0
}

type envOptions struct {
	fake    googlefake.Options
	cfg     gmail.Config
	noStart bool // do not start the task servers: the test runs handlers itself
	rules   gmail.RuleApplier
	oauth   bool // an OAuth client the emulator knows (consent flow)
	// budget configures the Gmail budget (zero: Google's defaults, as
	// serve runs).
	budget google.BudgetConfig
	// handled, when set, is told of each event task (message-added and
	// the state changes) whose handler succeeded, after it returned.
	handled func(typ string, ev gmail.Event)
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	gcfg := google.Config{}
	if o.oauth {
		o.fake.ClientID, o.fake.ClientSecret = testClientID, "client-secret"
		gcfg.ClientID, gcfg.ClientSecret, gcfg.RedirectURL = testClientID, "client-secret", testRedirectURL
	}
	e := &env{t: t, fake: googlefake.StartForTest(t, o.fake), db: storetest.Open(t)}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	b := brokertest.Embedded(t)
	e.broker = b
	e.reg = prometheus.NewRegistry()
	if o.budget.Registerer == nil {
		o.budget.Registerer = e.reg
	}
	if o.budget.Wait == nil {
		o.budget.Wait = queue.Wait // as the app gives it
	}
	budget, err := google.NewBudget(o.budget, b.Client())
	if err != nil {
		t.Fatal(err)
	}
	e.budget = budget
	gcfg.APIURL, gcfg.TokenURL = e.fake.URL(), e.fake.TokenURL()
	gcfg.HTTPClient = &http.Client{Timeout: 10 * time.Second, Transport: tr}
	gcfg.Budget = budget
	gc := google.New(gcfg)
	cfg := o.cfg
	cfg.Logger = slog.New(slog.NewTextHandler(testkit.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	// The rules' rows too: a rule match records a label write.
	e.table, err = queue.NewTable(gmail.Tasks(gmail.TaskConfig{MaxRetries: 3, ConcurrencyMessageAdded: 3, ConcurrencyState: 5}), rules.Tasks(3))
	if err != nil {
		t.Fatal(err)
	}
	e.q, err = queue.New(queue.Config{
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, DelayedCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, Logger: cfg.Logger,
	}, e.db, b.RedisConnOpt(), e.table)
	if err != nil {
		t.Fatal(err)
	}
	e.p, err = gmail.New(cfg, gmail.Deps{DB: e.db, Accounts: newAccounts(t, accounts.Config{Logger: cfg.Logger}, accounts.Deps{DB: e.db, Google: gc}), Queue: e.q, Rules: o.rules})
	if err != nil {
		t.Fatal(err)
	}
	if err := register(e.p, e.table, o.handled); err != nil {
		t.Fatal(err)
	}
	for _, tt := range e.table.Types() {
		if tt.Handler == nil {
			_ = e.table.Handle(tt.Name, func(context.Context, *queue.Task) error { return nil })
		}
	}
	if !o.noStart {
		if err := e.q.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.q.Stop(context.Background()) })
	}
	err = e.db.Update(func(tx *store.Tx) (err error) {
		e.user, err = tx.UserCreate("owner@example.com", "Owner")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// register registers the pipeline's handlers in table; with handled, each
// event task's handler tells it of the event once it succeeded (the
// pipeline registers into a table of its own, whose rows are then copied
// with their handlers wrapped).
func register(p *gmail.Pipeline, table *queue.Table, handled func(string, gmail.Event)) error {
	if handled == nil {
		return p.Register(table)
	}
	own, err := queue.NewTable(gmail.Tasks(gmail.TaskConfig{ConcurrencyMessageAdded: 1, ConcurrencyState: 1}))
	if err != nil {
		return err
	}
	if err := p.Register(own); err != nil {
		return err
	}
	events := []string{gmail.TypeMessageAdded, gmail.TypeMessageRead, gmail.TypeMessageUnread,
		gmail.TypeMessageTrashed, gmail.TypeMessageRestored, gmail.TypeMessageDeleted, gmail.TypeMessageLabeled}
	for _, row := range own.Types() {
		h := row.Handler
		if h != nil && slices.Contains(events, row.Name) {
			typ, inner := row.Name, h
			h = func(ctx context.Context, t *queue.Task) error {
				if err := inner(ctx, t); err != nil {
					return err
				}
				// One change, or a group of one account's.
				var pl struct {
					gmail.Event
					Events []gmail.Event `json:"events"`
				}
				if err := json.Unmarshal(t.Payload, &pl); err != nil {
					return err
				}
				if len(pl.Events) == 0 {
					pl.Events = []gmail.Event{pl.Event}
				}
				for _, ev := range pl.Events {
					handled(typ, ev)
				}
				return nil
			}
		}
		if h != nil {
			if err := table.Handle(row.Name, h); err != nil {
				return err
			}
		}
		if row.OnDead != nil {
			if err := table.OnDead(row.Name, row.OnDead); err != nil {
				return err
			}
		}
	}
	return nil
}

// connect adds a mailbox with n generated messages to the emulator and
// connects it.
func (e *env) connect(email string, n int) store.Account {
	e.t.Helper()
	refresh := e.fake.AddAccount(email)
	if n > 0 {
		if _, err := e.fake.Gmail.Generate(email, n, 7); err != nil {
			e.t.Fatal(err)
		}
	}
	acc, created, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: email, Token: google.Token{RefreshToken: refresh}})
	if err != nil || !created {
		e.t.Fatalf("connect: %v (created %v)", err, created)
	}
	return acc
}

// notify is a push of the mailbox's current history id.
func (e *env) notify(email string) {
	e.t.Helper()
	if _, err := e.p.Notify(gmail.Notification{EmailAddress: email, HistoryID: e.fake.Gmail.HistoryID(email)}); err != nil {
		e.t.Fatal(err)
	}
}

// mirrorMsg is what the mirror and the mailbox are compared on.
type mirrorMsg struct {
	ID, ThreadID, From, To, Subject, Snippet string
	Labels                                   []string
	Unread, Trashed                          bool
	HistoryID                                string
}

// want returns the emulator's mailbox as the API should show it.
func (e *env) want(email string) map[string]mirrorMsg {
	names := e.fake.Gmail.LabelNames(email)
	out := map[string]mirrorMsg{}
	for _, m := range e.fake.Gmail.Messages(email) {
		labels := make([]string, 0, len(m.LabelIDs))
		for _, id := range m.LabelIDs {
			labels = append(labels, names[id])
		}
		sort.Strings(labels)
		out[m.ID] = mirrorMsg{
			ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Subject: m.Subject, Snippet: m.Snippet,
			Labels: labels, Unread: m.Unread(), Trashed: m.Trashed(), HistoryID: strconv.FormatUint(m.HistoryID, 10),
		}
	}
	return out
}

// got returns the mirror through the pipeline's read API.
func (e *env) got(accountID string) map[string]mirrorMsg {
	e.t.Helper()
	out := map[string]mirrorMsg{}
	cursor := ""
	for {
		page, next, err := e.p.Messages(accountID, gmail.MessageQuery{Limit: 500, Cursor: cursor})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, m := range page {
			out[m.ID] = mirrorMsg{
				ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Subject: m.Subject, Snippet: m.Snippet,
				Labels: m.Labels, Unread: m.Unread, Trashed: m.Trashed, HistoryID: m.HistoryID,
			}
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

// waitConverged waits until the mirror equals the mailbox and no gmail
// task is left, and fails with the diff.
func (e *env) waitConverged(accountID, email string, d time.Duration) {
	e.t.Helper()
	testkit.EventuallyNil(e.t, d, "the mirror to converge", func() error {
		diff := cmp.Diff(e.want(email), e.got(accountID))
		if diff == "" && e.idle() {
			return nil
		}
		return fmt.Errorf("(-mailbox +mirror):\n%s\noutbox: %v", truncate(diff, 4000), e.outbox())
	})
}

// idle reports whether no gmail task is waiting in the outbox.
func (e *env) idle() bool { return len(e.outbox()) == 0 }

func (e *env) outbox() map[string]int {
	out := map[string]int{}
	_ = e.db.View(func(tx *store.Tx) error {
		for _, tt := range e.table.Types() {
			if strings.HasPrefix(tt.Name, "gmail") {
				if n, _ := e.q.Len(tx, tt.Name); n > 0 {
					out[tt.Queue] = n
				}
			}
		}
		return nil
	})
	return out
}

func (e *env) account(id string) store.Account {
	e.t.Helper()
	var a store.Account
	if err := e.db.View(func(tx *store.Tx) (err error) { a, err = tx.AccountGet(id); return err }); err != nil {
		e.t.Fatal(err)
	}
	return a
}

// message returns the mirror's record of a message.
func (e *env) message(accountID, id string) store.Message {
	e.t.Helper()
	var m store.Message
	if err := e.db.View(func(tx *store.Tx) (err error) { m, err = tx.MessageGet(accountID, id); return err }); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… (%d more bytes)", len(s)-n)
}

// mutate applies a mix of changes to the mailbox: adds, reads, unreads,
// trashes, restores, deletes and label changes, like the contract's test.
func mutate(t *testing.T, fake *googlefake.Server, email string, seed uint64) {
	t.Helper()
	g := fake.Gmail
	if _, err := googlefake.NewGenerator(seed, time.Time{}).Add(g, email, 50); err != nil {
		t.Fatal(err)
	}
	msgs := g.Messages(email)
	var read, unread []googlefake.Message
	for _, m := range msgs {
		if m.Unread() {
			unread = append(unread, m)
		} else {
			read = append(read, m)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range unread[:min(30, len(unread))] {
		must(g.MarkRead(email, m.ID))
	}
	for _, m := range read[:min(10, len(read))] {
		must(g.MarkUnread(email, m.ID))
	}
	var trashed []string
	for i := 0; len(trashed) < 10; i += 7 {
		m := msgs[i%len(msgs)]
		if m.Trashed() || slices.Contains(trashed, m.ID) {
			continue
		}
		must(g.Trash(email, m.ID))
		trashed = append(trashed, m.ID)
	}
	for _, id := range trashed[:5] {
		must(g.Untrash(email, id))
	}
	for _, m := range msgs[len(msgs)-5:] {
		must(g.Delete(email, m.ID))
	}
	work, err := g.CreateLabel(email, fmt.Sprintf("Work %d", seed))
	must(err)
	for _, m := range msgs[3:15] {
		must(g.AddLabels(email, m.ID, work, googlefake.LabelStarred))
	}
	for _, m := range msgs[5:8] {
		must(g.RemoveLabels(email, m.ID, work, googlefake.LabelInbox))
	}
}

// diff compares the mailbox with the mirror (-mailbox +mirror).
func (e *env) diff(accountID, email string) string {
	return cmp.Diff(e.want(email), e.got(accountID))
}

// newAccounts builds the Google-accounts service or fails the test.
func newAccounts(t testing.TB, cfg accounts.Config, deps accounts.Deps) *accounts.Service {
	t.Helper()
	s, err := accounts.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
