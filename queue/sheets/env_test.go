package sheets

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/google"
	"mailroom/store"
	"mailroom/store/storetest"
)

// testClients gives each test account's Sheets through the real adapter,
// talking to the emulator with the account's refresh token.
type testClients struct {
	g      *google.Client
	mu     sync.Mutex
	tokens map[string]string // account id -> refresh token
	cache  map[string]SheetsClient
	// onWrite, when set, is told of every successful write.
	onWrite func(spreadsheetID string, rows int)
}

// recordingClient tells testClients.onWrite of each successful write.
type recordingClient struct {
	SheetsClient
	c *testClients
}

func (r recordingClient) WriteRange(ctx context.Context, id, a1 string, rows [][]string) error {
	err := r.SheetsClient.WriteRange(ctx, id, a1, rows)
	r.c.mu.Lock()
	on := r.c.onWrite
	r.c.mu.Unlock()
	if err == nil && on != nil {
		on(id, len(rows))
	}
	return err
}

func (c *testClients) Sheets(ctx context.Context, accountID string) (SheetsClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.cache[accountID]; s != nil {
		return s, nil
	}
	tok, ok := c.tokens[accountID]
	if !ok {
		return nil, fmt.Errorf("test clients: account %s: %w", accountID, store.ErrNotFound)
	}
	s, err := c.g.Sheets(ctx, c.g.TokenSource(google.Token{RefreshToken: tok}, nil))
	if err != nil {
		return nil, err
	}
	c.cache[accountID] = recordingClient{SheetsClient: s, c: c}
	return c.cache[accountID], nil
}

// env is the pipeline over real bbolt, a real broker and asynq, and the
// Google emulator, with time compressed.
type env struct {
	t       *testing.T
	db      *store.DB
	fake    *googlefake.Server
	q       *queue.Queue
	p       *Pipeline
	reg     *prometheus.Registry
	clients *testClients
	alerts  *recordingAlerts
	user    store.User
}

// recordingAlerts keeps the notices the pipeline sends.
type recordingAlerts struct {
	mu      sync.Mutex
	notices []string // "id: text"
}

func (a *recordingAlerts) Notice(_, id, text string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.notices = append(a.notices, id+": "+text)
}

func (a *recordingAlerts) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.notices)
}

type envOptions struct {
	cfg Config
	// fakeLimit and fakeWindow: the emulator's write quota (default: the
	// pipeline's).
	fakeLimit  int
	fakeWindow time.Duration
	// fake holds further emulator options (its quotas and window above
	// are set from the fields before).
	fake googlefake.Options
	// delayedCheck is how often the broker makes scheduled and retrying
	// tasks ready. Zero: 100ms (tests run faster than serve's 1s).
	delayedCheck time.Duration
	// concurrency of the sheets-flush queue is the table's (16).
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	cfg := o.cfg
	if cfg.FlushDelay == 0 {
		cfg.FlushDelay = time.Second
	}
	if cfg.QuotaWindow == 0 {
		cfg.QuotaWindow = time.Second
	}
	if cfg.WritesPerMinute == 0 {
		cfg.WritesPerMinute = 60
	}
	// The submission limits have their own tests; the others submit
	// bursts far over a real form's.
	if cfg.SubmitsPerForm == 0 {
		cfg.SubmitsPerForm = 1 << 30
	}
	if cfg.SubmitsPerUser == 0 {
		cfg.SubmitsPerUser = 1 << 30
	}
	if o.fakeLimit == 0 {
		o.fakeLimit = cfg.WritesPerMinute
	}
	if o.fakeWindow == 0 {
		o.fakeWindow = cfg.QuotaWindow
	}
	if o.delayedCheck == 0 {
		o.delayedCheck = 100 * time.Millisecond
	}
	level := slog.LevelWarn
	if os.Getenv("SHEETS_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testkit.LogWriter(t), &slog.HandlerOptions{Level: level}))
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg

	fo := o.fake
	fo.SheetsWriteLimit, fo.SheetsWindow = o.fakeLimit, o.fakeWindow
	fake := googlefake.StartForTest(t, fo)
	b := brokertest.Embedded(t)
	db := storetest.Open(t)
	clients := &testClients{
		g:      google.New(google.Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ReadRetries: -1}),
		tokens: map[string]string{},
		cache:  map[string]SheetsClient{},
	}
	table, err := queue.NewTable(Tasks(3))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(queue.Config{
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, DelayedCheckInterval: o.delayedCheck,
		ShutdownTimeout: 5 * time.Second, Logger: cfg.Logger, Registerer: reg,
	}, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	alerts := &recordingAlerts{}
	p, err := New(cfg, Deps{DB: db, Queue: q, Broker: b.Client(), Clients: clients, Alerts: alerts})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Register(table); err != nil {
		t.Fatal(err)
	}
	for _, tt := range table.Types() {
		if tt.Name != TypeFlush {
			if err := table.Handle(tt.Name, func(context.Context, *queue.Task) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	e := &env{t: t, db: db, fake: fake, q: q, p: p, reg: reg, clients: clients, alerts: alerts}
	err = db.Update(func(tx *store.Tx) error {
		e.user, err = tx.UserCreate("owner@example.com", "Owner")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// account connects a Google account in the emulator and the store.
func (e *env) account(email string) store.Account {
	e.t.Helper()
	refresh := e.fake.AddAccount(email)
	a := store.Account{ID: store.NewID(), UserID: e.user.ID, Email: email, Status: store.AccountReady}
	if err := e.db.Update(func(tx *store.Tx) error { return tx.AccountPut(a) }); err != nil {
		e.t.Fatal(err)
	}
	e.clients.mu.Lock()
	e.clients.tokens[a.ID] = refresh
	e.clients.mu.Unlock()
	return a
}

// form makes a spreadsheet owned by the account and a form writing it.
func (e *env) form(a store.Account, columns ...string) FormView {
	e.t.Helper()
	id, err := e.fake.Sheets.CreateSpreadsheet(a.Email, "Survey")
	if err != nil {
		e.t.Fatal(err)
	}
	f, err := e.p.CreateForm(context.Background(), FormInput{UserID: e.user.ID, AccountID: a.ID, SpreadsheetID: id, Sheet: "Sheet1", Columns: columns})
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

func (e *env) submit(formID string, answers map[string]string) store.Submission {
	e.t.Helper()
	m := make(map[string]json.RawMessage, len(answers))
	for k, v := range answers {
		raw, _ := json.Marshal(v)
		m[k] = raw
	}
	s, err := e.p.Submit(context.Background(), formID, m)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

// rows returns what the form's sheet holds.
func (e *env) rows(f FormView) [][]string {
	e.t.Helper()
	rows, err := e.fake.Sheets.Rows(f.SpreadsheetID, f.Sheet)
	if err != nil {
		e.t.Fatal(err)
	}
	return rows
}

// checkRows asserts the sheet holds exactly the submissions, each once, in
// submission order, from the form's start row.
func (e *env) checkRows(f FormView, subs []store.Submission) {
	e.t.Helper()
	subs = slices.Clone(subs)
	slices.SortFunc(subs, func(a, b store.Submission) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	got := e.rows(f)
	if len(got) < f.StartRow-1 {
		e.t.Fatalf("sheet has %d rows, form starts at %d", len(got), f.StartRow)
	}
	got = got[f.StartRow-1:]
	if len(got) != len(subs) {
		e.t.Fatalf("sheet holds %d rows of form %s, want %d", len(got), f.ID, len(subs))
	}
	for i, s := range subs {
		want := row(s)
		if !slices.Equal(got[i], want) {
			e.t.Fatalf("form %s row %d: got %q, want %q", f.ID, f.StartRow+i, got[i], want)
		}
	}
}

func (e *env) formView(id string) FormView {
	e.t.Helper()
	v, err := e.p.Form(id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// outboxEmpty reports whether no flush record is left.
func (e *env) outboxEmpty() bool {
	n := 0
	_ = e.db.View(func(tx *store.Tx) (err error) { n, err = e.q.Len(tx, TypeFlush); return err })
	return n == 0
}

// counter reads a counter or gauge of the env's registry.
func (e *env) metric(name string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	return 0
}
