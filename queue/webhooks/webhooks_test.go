package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
	"mailroom/store/storetest"
)

// receiver is a real HTTP endpoint that verifies each delivery's signature
// with the Standard Webhooks library and keeps the events it took, in the
// order it took them. fail decides, per request, an answer other than 204.
type receiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	got    []string // event ids, in order taken
	ids    []string // webhook-id of each taken POST
	posts  int
	at     []time.Time // when each POST came
	sizes  []int
	fail   func(n int) (status int, retryAfter string, sleep time.Duration)
	// failBody is the body of the answers fail decides.
	failBody string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	r.posts++
	r.at = append(r.at, time.Now())
	n, fail, secret := r.posts, r.fail, r.secret
	r.mu.Unlock()
	if fail != nil {
		if status, after, sleep := fail(n); status != 0 {
			time.Sleep(sleep) // a slow receiver: longer than the delivery's timeout
			if after != "" {
				w.Header().Set("Retry-After", after)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, r.failBody)
			return
		}
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		r.t.Errorf("receiver: secret %q: %v", secret, err)
		w.WriteHeader(500)
		return
	}
	if err := wh.Verify(body, req.Header); err != nil {
		r.t.Errorf("receiver: signature does not verify: %v", err)
		w.WriteHeader(400)
		return
	}
	var b struct {
		Events []struct {
			ID string `json:"id"`
		} `json:"events"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		r.t.Errorf("receiver: body %s: %v", body, err)
		w.WriteHeader(400)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// At least once: a batch redelivered under the same webhook-id is
	// taken once, as a receiver that dedupes does.
	if slices.Contains(r.ids, req.Header.Get("webhook-id")) {
		w.WriteHeader(204)
		return
	}
	r.ids = append(r.ids, req.Header.Get("webhook-id"))
	r.sizes = append(r.sizes, len(b.Events))
	for _, e := range b.Events {
		r.got = append(r.got, e.ID)
	}
	w.WriteHeader(204)
}

func (r *receiver) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

type env struct {
	t   *testing.T
	db  *store.DB
	q   *queue.Queue
	p   *Pipeline
	reg *prometheus.Registry
}

func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	db := storetest.Open(t)
	b := brokertest.Embedded(t)
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	cfg.Logger = slog.New(slog.NewTextHandler(testkit.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	table, err := queue.NewTable(Tasks())
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(queue.Config{
		RetryInitial: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		PollInterval: 20 * time.Millisecond, DelayedCheckInterval: 100 * time.Millisecond,
		ShutdownTimeout: 5 * time.Second, Logger: cfg.Logger, Registerer: reg,
	}, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, Deps{DB: db, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Register(table); err != nil {
		t.Fatal(err)
	}
	for _, tt := range table.Types() {
		if tt.Name != TypeDeliver {
			_ = table.Handle(tt.Name, func(context.Context, *queue.Task) error { return nil })
		}
	}
	if err := q.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Stop(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	scheduler := p.Services()[0]
	if err := scheduler.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = scheduler.Stop(context.Background()); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &env{t: t, db: db, q: q, p: p, reg: reg}
}

// hook registers a webhook to r.
func (e *env) hook(r *receiver, req CreateRequest) store.Webhook {
	e.t.Helper()
	req.URL = r.srv.URL + "/hook"
	w, secret, err := e.p.Create(context.Background(), req)
	if err != nil {
		e.t.Fatal(err)
	}
	r.mu.Lock()
	r.secret = secret
	r.mu.Unlock()
	return w
}

// emit appends n events of type typ for user, in transactions of up to
// 37, and returns their ids in order.
func (e *env) emit(n int, user, typ string) []string {
	e.t.Helper()
	var ids []string
	for done := 0; done < n; {
		err := e.db.Update(func(tx *store.Tx) error {
			for i := done; i < min(done+37, n); i++ {
				ev, err := tx.EventAppend(store.Event{Type: typ, UserID: user, Data: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))})
				if err != nil {
					return err
				}
				ids = append(ids, ev.ID())
			}
			return nil
		})
		if err != nil {
			e.t.Fatal(err)
		}
		done = min(done+37, n)
	}
	return ids
}

func waitFor(t *testing.T, r *receiver, want []string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("the receiver to take %d events", len(want)), func() bool { return len(r.events()) >= len(want) })
	if got := r.events(); !slices.Equal(got, want) {
		t.Fatalf("the receiver took %d events, want %d in order:\ngot  %v\nwant %v", len(got), len(want), got, want)
	}
}

// TestDeliveredInOrderSignedBatched: every event after the webhook was
// made arrives once, in order, in signed batches of at most 100; earlier
// events, other users' and other types do not.
func TestDeliveredInOrderSignedBatched(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	e.emit(5, "u1", store.EventFormState) // before the webhook: not sent
	r := newReceiver(t)
	e.hook(r, CreateRequest{UserID: "u1", Types: []string{store.EventFormState}})
	var want []string
	for range 3 {
		want = append(want, e.emit(111, "u1", store.EventFormState)...)
		e.emit(20, "u2", store.EventFormState)
		e.emit(20, "u1", store.EventReclassifyDone)
	}
	waitFor(t, r, want)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, n := range r.sizes {
		if n < 1 || n > MaxBatch {
			t.Errorf("POST %d carried %d events", i, n)
		}
	}
	posts := len(r.sizes)
	r.mu.Unlock()
	// The counter follows the 2xx's transaction.
	testkit.Eventually(t, 10*time.Second, fmt.Sprintf("the delivered counter at %d", posts), func() bool {
		return int(counter(t, e.p.metrics.deliveries.WithLabelValues("delivered"))) == posts
	})
	r.mu.Lock()
}

// TestRetryAfterAndTimeoutLoseNothing: a receiver answering 503 with
// Retry-After for a while, and then one too slow to answer, lose nothing
// and keep the order.
func TestRetryAfterAndTimeoutLoseNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true, Timeout: 300 * time.Millisecond})
	r := newReceiver(t)
	r.fail = func(n int) (int, string, time.Duration) {
		switch {
		case n <= 3:
			return http.StatusServiceUnavailable, "1", 0
		case n <= 5:
			return http.StatusOK, "", time.Second // past the timeout: not delivered
		}
		return 0, "", 0
	}
	e.hook(r, CreateRequest{})
	want := e.emit(150, "u1", store.EventFormState)
	waitFor(t, r, want)
	// Each 503's Retry-After of a second is honoured (the broker schedules
	// a task handed back in whole seconds, so a little under one).
	r.mu.Lock()
	for i := 1; i <= 3; i++ {
		if gap := r.at[i].Sub(r.at[i-1]); gap < 800*time.Millisecond {
			t.Errorf("attempt %d came %s after a 503 with Retry-After: 1", i+1, gap)
		}
	}
	r.mu.Unlock()
	if got := counter(t, e.p.metrics.deliveries.WithLabelValues("retried")); got < 5 {
		t.Errorf("retried counter %v, want at least 5", got)
	}
}

// TestMaxAgeDeadLettersThenGoesOnAndRedrive: a batch refused past the max
// age goes to the dead letters, the later batches are delivered, and the
// redriven batch arrives then.
func TestMaxAgeDeadLettersThenGoesOnAndRedrive(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true, MaxAge: 500 * time.Millisecond})
	r := newReceiver(t)
	var mu sync.Mutex
	refusing := true
	r.fail = func(int) (int, string, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if refusing {
			return http.StatusInternalServerError, "", 0
		}
		return 0, "", 0
	}
	// form.state only: the dead letter's own deadletter.added is not this
	// test's business.
	e.hook(r, CreateRequest{Types: []string{store.EventFormState}})
	first := e.emit(10, "u1", store.EventFormState)
	var dead []store.DeadLetter
	testkit.Eventually(t, 30*time.Second, "the first batch in the dead letters", func() bool {
		_ = e.db.View(func(tx *store.Tx) (err error) {
			dead, _, err = tx.DeadLetters(TypeDeliver, "", 10)
			return err
		})
		return len(dead) == 1
	})
	mu.Lock()
	refusing = false
	mu.Unlock()
	later := e.emit(10, "u1", store.EventFormState)
	waitFor(t, r, later)
	if n, _, err := e.q.Redrive([]string{dead[0].ID}); err != nil || n != 1 {
		t.Fatalf("redrive: %d, %v", n, err)
	}
	waitFor(t, r, append(slices.Clone(later), first...))
	if got := counter(t, e.p.metrics.deliveries.WithLabelValues("deadlettered")); got != 1 {
		t.Errorf("deadlettered counter %v, want 1", got)
	}
}

// TestReplay: a replay from a cursor delivers those events again, under
// new webhook-ids.
func TestReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	r := newReceiver(t)
	w := e.hook(r, CreateRequest{})
	want := e.emit(30, "u1", store.EventFormState)
	waitFor(t, r, want)
	if err := e.p.Replay(w.ID, w.Cursor); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, append(slices.Clone(want), want...))
	if err := e.p.Replay("nope", 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("replay of an unknown webhook: %v", err)
	}
}

// TestReplayCursorChecked: a replay from a cursor past the newest event
// is refused (2^64-1 read as "after" once wrapped to the oldest and looped
// on empty batches), and leaves the webhook as it was.
func TestReplayCursorChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	r := newReceiver(t)
	w := e.hook(r, CreateRequest{})
	want := e.emit(3, "u1", store.EventFormState)
	waitFor(t, r, want)
	// The receiver has them before the delivery's ack moves the cursor.
	testkit.Eventually(t, 5*time.Second, "the cursor past the delivered events", func() bool {
		got, err := e.p.Webhook(w.ID)
		return err == nil && got.Cursor == w.Cursor+3
	})
	for _, after := range []uint64{w.Cursor + 4, math.MaxUint64} {
		if err := e.p.Replay(w.ID, after); !errors.Is(err, store.ErrCursorAhead) {
			t.Errorf("replay after %d (the newest is %d): %v, want ErrCursorAhead", after, w.Cursor+3, err)
		}
	}
	if got, err := e.p.Webhook(w.ID); err != nil || got.Cursor != w.Cursor+3 || got.Generation != w.Generation {
		t.Errorf("after the refused replays: cursor %d generation %d (%v), want %d and %d", got.Cursor, got.Generation, err, w.Cursor+3, w.Generation)
	}
	if err := e.p.Replay(w.ID, w.Cursor+3); err != nil {
		t.Errorf("replay after the newest event: %v", err)
	}
}

// TestStoredCursorFromNowhereCannotLoop: a webhook whose stored cursor
// is past the newest event (an older version's replay of a made-up
// cursor), alone or with the batch that version planned from it in
// flight, posts no empty batch: its cursor is moved to the newest event
// and it takes what happens next.
func TestStoredCursorFromNowhereCannotLoop(t *testing.T) {
	t.Parallel()
	for _, inFlight := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch in flight %v", inFlight), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{AllowPrivate: true})
			e.emit(5, "u1", store.EventFormState) // before the webhook: not its
			r := newReceiver(t)
			w := e.hook(r, CreateRequest{})
			if err := e.db.Update(func(tx *store.Tx) error {
				cur, err := tx.WebhookGet(w.ID)
				if err != nil {
					return err
				}
				cur.Cursor = math.MaxUint64
				if inFlight {
					cur.Batch = &store.WebhookBatch{ID: "msg_" + w.ID + "_0_5", After: math.MaxUint64, Through: 5, Count: 5, CreatedAt: time.Now().UTC()}
					if _, _, err := e.q.Enqueue(tx, TypeDeliver, deliverPayload{WebhookID: w.ID, Batch: *cur.Batch}); err != nil {
						return err
					}
				}
				return tx.WebhookPut(cur)
			}); err != nil {
				t.Fatal(err)
			}
			e.p.Kick()
			testkit.Eventually(t, 10*time.Second, "the cursor moved to the newest event", func() bool {
				got, err := e.p.Webhook(w.ID)
				return err == nil && got.Batch == nil && got.Cursor == 5
			})
			want := e.emit(3, "u1", store.EventFormState)
			waitFor(t, r, want)
			r.mu.Lock()
			defer r.mu.Unlock()
			if r.posts != 1 || !slices.Equal(r.sizes, []int{3}) {
				t.Errorf("the receiver got %d POSTs of %v events, want one of 3 (never an empty one)", r.posts, r.sizes)
			}
		})
	}
}

// TestPrivateTargetsRefused: at creation, a URL that is not https (but to
// a loopback address) or that reaches a private address is refused naming
// url; at delivery, the dialer refuses a private address too.
func TestPrivateTargetsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	for _, u := range []string{
		"http://example.com/hook", "ftp://example.com/", "https://10.1.2.3/hook", "https://127.0.0.1/hook",
		"https://[::1]/hook", "https://169.254.169.254/latest", "https://100.64.0.1/", "http://127.0.0.1:9/hook",
		"https://user:pw@example.com/", "not a url", "https:///nohost",
	} {
		_, _, err := e.p.Create(context.Background(), CreateRequest{URL: u})
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != "url" {
			t.Errorf("create %q: %v, want an invalid url", u, err)
		}
	}
	if _, _, err := e.p.Create(context.Background(), CreateRequest{URL: "https://93.184.216.34/hook", Types: []string{"message.nope"}}); err == nil {
		t.Error("an unknown type was taken")
	}
	// A receiver made while private targets were allowed is refused at
	// delivery once they are not.
	r := newReceiver(t)
	var w store.Webhook
	if err := e.db.Update(func(tx *store.Tx) (err error) {
		w, err = tx.WebhookCreate(store.Webhook{URL: r.srv.URL + "/hook"}, "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA==")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, err := e.p.post(context.Background(), w.URL, "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA==", "msg_test", []store.Event{})
	if !errors.Is(err, ErrPrivateAddress) {
		t.Errorf("delivery to %s: %v, want ErrPrivateAddress", r.srv.URL, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.posts != 0 {
		t.Errorf("the private receiver got %d posts", r.posts)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Duration{
		"": 0, "7": 7 * time.Second, "-3": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		strconv.Itoa(3600): time.Hour,
	} {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", in, got, want)
		}
	}
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestAlertAfterAnHourOfFailures: a webhook failing for an hour raises one
// alert, not one per attempt, and a delivery that then succeeds clears
// its failure.
func TestAlertAfterAnHourOfFailures(t *testing.T) {
	t.Parallel()
	clock := &testkit.Clock{}
	var mu sync.Mutex
	var alerts []string
	e := newEnv(t, Config{AllowPrivate: true, Now: clock.Now, Alert: func(text string) {
		mu.Lock()
		defer mu.Unlock()
		alerts = append(alerts, text)
	}})
	r := newReceiver(t)
	failing := true
	r.fail = func(int) (int, string, time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return http.StatusBadGateway, "", 0
		}
		return 0, "", 0
	}
	w := e.hook(r, CreateRequest{Types: []string{store.EventFormState}})
	want := e.emit(3, "u1", store.EventFormState)
	failingSince := func() time.Time {
		got, err := e.p.Webhook(w.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.FailingSince
	}
	testkit.Eventually(t, 10*time.Second, "the first failure noted", func() bool { return !failingSince().IsZero() })
	mu.Lock()
	if len(alerts) != 0 {
		t.Errorf("alerted at once: %q", alerts)
	}
	mu.Unlock()
	clock.Advance(61 * time.Minute)
	testkit.Eventually(t, 10*time.Second, "the alert", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(alerts) > 0
	})
	// More failed attempts after the alert raise no more.
	r.mu.Lock()
	posts := r.posts
	r.mu.Unlock()
	testkit.Eventually(t, 10*time.Second, "three more attempts", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.posts >= posts+3
	})
	mu.Lock()
	if len(alerts) != 1 || !strings.Contains(alerts[0], "failed for an hour") || !strings.Contains(alerts[0], "502") {
		t.Errorf("alerts %q, want one saying the webhook failed for an hour and how", alerts)
	}
	failing = false
	mu.Unlock()
	waitFor(t, r, want)
	testkit.Eventually(t, 10*time.Second, "the failure cleared", func() bool { return failingSince().IsZero() })
}

// TestNextBatchPlannedAsOneFinishes: a webhook's next batch is recorded in
// the transaction that finishes the one before, not at the scheduler's
// next pass: with passes an hour apart, one pass delivers a backlog of
// three batches, in order.
func TestNextBatchPlannedAsOneFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true, Settle: time.Hour})
	r := newReceiver(t)
	e.hook(r, CreateRequest{})
	want := e.emit(2*MaxBatch+50, "u1", store.EventFormState)
	// The scheduler now waits out its hour: this pass is the only one.
	if _, err := e.p.pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, want)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sizes) != 3 {
		t.Errorf("%d POSTs of %v events, want 3", len(r.sizes), r.sizes)
	}
}

// TestSteadyStreamIsPaced: a webhook taking a steady stream of events
// gets a batch per Pace, not one per event or two, and every event in
// order.
func TestSteadyStreamIsPaced(t *testing.T) {
	t.Parallel()
	const pace = 250 * time.Millisecond
	e := newEnv(t, Config{AllowPrivate: true, Pace: pace})
	r := newReceiver(t)
	e.hook(r, CreateRequest{})
	var want []string
	start := time.Now()
	for range 100 {
		want = append(want, e.emit(1, "u1", store.EventFormState)...)
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	waitFor(t, r, want)
	r.mu.Lock()
	defer r.mu.Unlock()
	// One batch at once, then at most one per pace (and the last).
	if most := int(took/pace) + 2; len(r.sizes) > most {
		t.Errorf("%d POSTs (%v events) for a stream of %s, want at most %d (one per %s)", len(r.sizes), r.sizes, took.Round(time.Millisecond), most, pace)
	}
}

// TestBehindIsNotPaced: a webhook's first batch goes at once, a backlog
// drains batch after batch (the last one not full) without waiting for
// the pace, and only then does the pace hold the next event.
func TestBehindIsNotPaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true, Pace: time.Hour})
	r := newReceiver(t)
	e.hook(r, CreateRequest{})
	var want []string
	err := e.db.Update(func(tx *store.Tx) error { // one commit: the first pass sees them all
		for range 2*MaxBatch + 50 {
			ev, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u1"})
			if err != nil {
				return err
			}
			want = append(want, ev.ID())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, want)
	r.mu.Lock()
	if !slices.Equal(r.sizes, []int{MaxBatch, MaxBatch, 50}) {
		t.Errorf("POSTs of %v events, want 100, 100, 50", r.sizes)
	}
	r.mu.Unlock()
	e.emit(1, "u1", store.EventFormState)
	time.Sleep(time.Second)
	if got := len(r.events()); got != len(want) {
		t.Errorf("the receiver took %d events, want %d: the event after the backlog is held for the pace", got, len(want))
	}
}
