package web

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/store"
	"mailroom/store/storetest"
)

type eventsAnswer struct {
	Events []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		UserID    string `json:"userId"`
		AccountID string `json:"accountId"`
	} `json:"events"`
	Next string `json:"next"`
}

// TestEventsFeed: the feed's answers, its filters, a user token's reach,
// its bad inputs, the long poll and an expired cursor.
func TestEventsFeed(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	admin, alice := bearer(se.adminToken), bearer(se.alice.token)
	get := func(path string, headers map[string]string) eventsAnswer {
		t.Helper()
		w := request(t, se.h, "GET", path, nil, headers)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return decode[eventsAnswer](t, w)
	}

	// Each tenant's account, message and form are events of theirs.
	all := get("/api/v1/events", admin)
	if len(all.Events) < 6 {
		t.Fatalf("the admin sees %d events, want each tenant's account.status, message.added and form.created", len(all.Events))
	}
	mine := get("/api/v1/events", alice)
	if len(mine.Events) != 3 {
		t.Fatalf("alice sees %d events, want 3: %+v", len(mine.Events), mine.Events)
	}
	for _, e := range mine.Events {
		if e.UserID != se.alice.user {
			t.Errorf("alice sees an event of user %s", e.UserID)
		}
	}
	if got := get("/api/v1/events?types=message.added&userId="+se.bob.user, admin); len(got.Events) != 1 || got.Events[0].AccountID != se.bob.account {
		t.Errorf("bob's message.added: %+v", got.Events)
	}
	// A page of one continues where it stopped.
	first := get("/api/v1/events?limit=1", admin)
	second := get("/api/v1/events?limit=1&after="+first.Next, admin)
	if len(first.Events) != 1 || len(second.Events) != 1 || first.Events[0].ID == second.Events[0].ID || second.Events[0].ID != all.Events[1].ID {
		t.Errorf("pages of one: %+v then %+v", first.Events, second.Events)
	}

	for _, c := range []struct{ path, field string }{
		{"/api/v1/events?after=evt_1", "after"},
		{"/api/v1/events?types=message.added,message.nope", "types"},
		{"/api/v1/events?limit=0", "limit"},
		{"/api/v1/events?limit=1001", "limit"},
		{"/api/v1/events?wait=31s", "wait"},
		{"/api/v1/events?wait=soon", "wait"},
	} {
		w := request(t, se.h, "GET", c.path, nil, admin)
		if e := apiError(t, w); w.Code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("GET %s: %d %+v, want 400 naming %s", c.path, w.Code, e, c.field)
		}
	}
	if w := request(t, se.h, "GET", "/api/v1/events?userId="+se.bob.user, nil, alice); w.Code != http.StatusNotFound {
		t.Errorf("alice asking for bob's events: %d, want 404", w.Code)
	}

	// The long poll answers when an event arrives, with it.
	now := get("/api/v1/events?after=now&wait=0s", alice)
	if len(now.Events) != 0 {
		t.Fatalf("after=now gave %d events", len(now.Events))
	}
	go func() {
		time.Sleep(200 * time.Millisecond) // the request below is waiting by then
		_ = se.db.Update(func(tx *store.Tx) error {
			a, err := tx.AccountGet(se.alice.account)
			if err != nil {
				return err
			}
			a.Status, a.StatusReason = store.AccountError, "test"
			return tx.AccountPut(a)
		})
	}()
	start := time.Now()
	woke := get("/api/v1/events?wait=20s&after="+now.Next, alice)
	if len(woke.Events) != 1 || woke.Events[0].Type != store.EventAccountStatus {
		t.Fatalf("the long poll answered %+v, want alice's account.status", woke.Events)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the long poll took %s to answer an event made after 200ms", took)
	}
	if empty := get("/api/v1/events?wait=100ms&after="+woke.Next, alice); len(empty.Events) != 0 || empty.Next != woke.Next {
		t.Errorf("a wait with nothing new: %+v", empty)
	}

	// Pruned past the cursor: 410.
	if _, err := se.db.EventsPrune(time.Now().Add(time.Hour), 3); err != nil {
		t.Fatal(err)
	}
	w := request(t, se.h, "GET", "/api/v1/events?after="+first.Next, nil, admin)
	if e := apiError(t, w); w.Code != http.StatusGone || e.Code != "cursor_expired" {
		t.Errorf("an expired cursor: %d %+v, want 410 cursor_expired", w.Code, e)
	}
}

// eventsServer is a bare server (the store alone) for the feed's long
// polls, with its limiter in reach and its logs counted.
type eventsServer struct {
	t                  *testing.T
	s                  *server
	h                  http.Handler
	db                 *store.DB
	logs               *countingHandler
	alice, alice2, bob string // tokens: two of Alice's, one of Bob's
	aliceUser, bobUser string
}

func newEventsServer(t *testing.T, more func(*Deps)) *eventsServer {
	t.Helper()
	ev := &eventsServer{t: t, db: storetest.Open(t), logs: &countingHandler{counts: map[string]int{}},
		alice: "mr_alice-token-one", alice2: "mr_alice-token-two", bob: "mr_bob-token"}
	if err := ev.db.Update(func(tx *store.Tx) error {
		a, err := tx.UserCreate("alice@example.com", "Alice")
		if err != nil {
			return err
		}
		b, err := tx.UserCreate("bob@example.com", "Bob")
		if err != nil {
			return err
		}
		ev.aliceUser, ev.bobUser = a.ID, b.ID
		for token, user := range map[string]string{ev.alice: a.ID, ev.alice2: a.ID, ev.bob: b.ID} {
			if _, err := tx.APITokenCreate(token, token, user, time.Time{}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	deps := Deps{DB: ev.db, Logger: slog.New(ev.logs), APIToken: testAPIToken}
	if more != nil {
		more(&deps)
	}
	var err error
	if ev.s, err = newServer(deps); err != nil {
		t.Fatal(err)
	}
	if ev.h, err = ev.s.engine(); err != nil {
		t.Fatal(err)
	}
	return ev
}

// longPoll is GET /api/v1/events?after=…&wait=… with token, from the
// client address addr, until ctx ends.
func (ev *eventsServer) longPoll(ctx context.Context, token, addr, after, wait string) (*http.Request, *httptest.ResponseRecorder) {
	req := httptest.NewRequest("GET", "/api/v1/events?after="+after+"&wait="+wait, nil).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+token)
	req.RemoteAddr = addr
	w := httptest.NewRecorder()
	ev.h.ServeHTTP(w, req)
	return req, w
}

func (ev *eventsServer) held() int {
	ev.s.waits.mu.Lock()
	defer ev.s.waits.mu.Unlock()
	return ev.s.waits.held
}

func (ev *eventsServer) appendEvent(userID string) {
	ev.t.Helper()
	if err := ev.db.Update(func(tx *store.Tx) error {
		_, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: userID})
		return err
	}); err != nil {
		ev.t.Fatal(err)
	}
}

// countingHandler counts log records by message and user_id.
type countingHandler struct {
	mu     sync.Mutex
	counts map[string]int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *countingHandler) WithGroup(string) slog.Handler            { return h }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	user := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "user_id" {
			user = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.counts[r.Message+" "+user]++
	return nil
}

func (h *countingHandler) count(msg, user string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg+" "+user]
}

// TestEventsWaitsBounded: long polls held at once are bounded per token,
// per client address and in all; past a bound the answer is 429
// rate_limited with Retry-After, and other tokens and addresses go on.
// 200 waits of one user token were all held before.
func TestEventsWaitsBounded(t *testing.T) {
	t.Parallel()
	ev := newEventsServer(t, func(d *Deps) { d.EventsWaitsPerToken, d.EventsWaitsPerAddress, d.EventsWaits = 2, 3, 4 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		req *http.Request
		w   *httptest.ResponseRecorder
	}
	answers := make(chan answer, 16)
	hold := func(token, addr string) {
		go func() { req, w := ev.longPoll(ctx, token, addr, "now", "20s"); answers <- answer{req, w} }()
	}
	refused := func(what, bound string) {
		t.Helper()
		select {
		case a := <-answers:
			checkAPIResponse(t, a.req, a.w)
			e := apiError(t, a.w)
			if a.w.Code != http.StatusTooManyRequests || e.Code != "rate_limited" || !strings.Contains(e.Message, bound) {
				t.Fatalf("%s: %d %+v, want 429 rate_limited naming %q", what, a.w.Code, e, bound)
			}
			if ra, err := strconv.Atoi(a.w.Header().Get("Retry-After")); err != nil || ra < 1 {
				t.Errorf("%s: Retry-After %q, want whole seconds", what, a.w.Header().Get("Retry-After"))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer; every wait was held", what)
		}
	}
	answers200 := func(what, token, addr string) {
		t.Helper()
		req, w := ev.longPoll(ctx, token, addr, "now", "50ms")
		checkAPIResponse(t, req, w)
		if w.Code != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", what, w.Code, w.Body)
		}
	}
	const here, there, elsewhere = "192.0.2.1:1000", "192.0.2.2:1000", "192.0.2.3:1000"

	for range 3 {
		hold(ev.alice, here)
	}
	refused("alice's third wait", "this token")
	testkit.Eventually(t, 10*time.Second, "alice's two waits held", func() bool { return ev.held() == 2 })
	answers200("a wait of alice's other token", ev.alice2, here)

	for range 2 {
		hold(ev.bob, here)
	}
	refused("a fourth wait from one address", "this client address")
	testkit.Eventually(t, 10*time.Second, "bob's wait held", func() bool { return ev.held() == 3 })
	answers200("bob from another address", ev.bob, there) // his 2nd, the 4th in all: held for 50ms

	hold(testAPIToken, there)
	testkit.Eventually(t, 10*time.Second, "the admin's wait held", func() bool { return ev.held() == 4 })
	hold(ev.alice2, elsewhere)
	refused("a fifth wait in all", "the server")

	// The waits over, their places are free again.
	cancel()
	testkit.Eventually(t, 10*time.Second, "every wait released", func() bool { return ev.held() == 0 })
	req, w := ev.longPoll(context.Background(), ev.alice, here, "now", "10ms")
	checkAPIResponse(t, req, w)
	if w.Code != http.StatusOK {
		t.Errorf("alice's wait once the others ended: %d %s", w.Code, w.Body)
	}
}

// TestEventsWaitWokenOnlyByItsUser: a user token's long poll is woken by
// its user's events, not by every event another user commits.
func TestEventsWaitWokenOnlyByItsUser(t *testing.T) {
	t.Parallel()
	ev := newEventsServer(t, nil)
	ev.appendEvent(ev.bobUser)
	got := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		_, w := ev.longPoll(context.Background(), ev.alice, "192.0.2.1:1000", "now", "10s")
		got <- w
	}()
	testkit.Eventually(t, 10*time.Second, "alice's read to wait", func() bool { return ev.logs.count("events read waits", ev.aliceUser) > 0 })
	for range 3 {
		ev.appendEvent(ev.bobUser)
	}
	// A short window for a wake that must not come (before the fix it
	// came at once, at each of Bob's commits).
	time.Sleep(150 * time.Millisecond)
	if n := ev.logs.count("events read woken", ev.aliceUser); n != 0 {
		t.Errorf("alice's read was woken %d times by bob's events", n)
	}
	ev.appendEvent(ev.aliceUser)
	select {
	case w := <-got:
		if a := decode[eventsAnswer](t, w); w.Code != http.StatusOK || len(a.Events) != 1 || a.Events[0].UserID != ev.aliceUser {
			t.Errorf("alice's read answered %d %+v, want her one event", w.Code, a.Events)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice's read was not woken by her own event")
	}
	if n := ev.logs.count("events read woken", ev.aliceUser); n != 1 {
		t.Errorf("alice's read was woken %d times, want once (by her event)", n)
	}
}

// TestCursorsChecked: a cursor past the newest event is a 400 naming
// after (invalid_cursor), for the feed and for a webhook's replay; it was
// read as one before the oldest (2^64-1 plus one wrapped to 0), and a
// replay from it looped forever. The newest is good; one older than what
// is kept is 410 cursor_expired.
func TestCursorsChecked(t *testing.T) {
	t.Parallel()
	se := newWebhooksEnv(t)
	admin, alice := bearer(se.adminToken), bearer(se.alice.token)
	w := request(t, se.h, "GET", "/api/v1/events?after=now", nil, admin)
	head, ok := store.ParseEventCursor(decode[eventsAnswer](t, w).Next)
	if w.Code != http.StatusOK || !ok || head < 4 {
		t.Fatalf("after=now: %d %s", w.Code, w.Body)
	}
	w = request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": "https://93.184.216.34/hook"}, alice)
	hook := decode[webhookAnswer](t, w)
	if w.Code != http.StatusCreated {
		t.Fatalf("create a webhook: %d %s", w.Code, w.Body)
	}
	replay := "/api/v1/webhooks/" + hook.ID + "/replay"
	wantError := func(what string, w *httptest.ResponseRecorder, status int, code string) {
		t.Helper()
		if e := apiError(t, w); w.Code != status || e.Code != code || e.Field != "after" {
			t.Errorf("%s: %d %+v, want %d %s naming after", what, w.Code, e, status, code)
		}
	}
	for _, cursor := range []string{"cur___________8", store.EventCursor(head + 1), store.EventCursor(1 << 40)} {
		for name, token := range map[string]map[string]string{"admin": admin, "alice": alice} {
			wantError("the feed after "+cursor+" for "+name, request(t, se.h, "GET", "/api/v1/events?after="+cursor, nil, token), http.StatusBadRequest, "invalid_cursor")
		}
		wantError("a replay after "+cursor, request(t, se.h, "POST", replay, map[string]any{"after": cursor}, alice), http.StatusBadRequest, "invalid_cursor")
	}
	if w := request(t, se.h, "GET", "/api/v1/events?after="+store.EventCursor(head), nil, alice); w.Code != http.StatusOK {
		t.Errorf("the feed after the newest event: %d %s", w.Code, w.Body)
	}
	if w := request(t, se.h, "POST", replay, map[string]any{"after": store.EventCursor(head)}, alice); w.Code != http.StatusAccepted {
		t.Errorf("a replay after the newest event: %d %s", w.Code, w.Body)
	}

	if _, err := se.db.EventsPrune(time.Now().Add(time.Hour), 2); err != nil {
		t.Fatal(err)
	}
	expired := store.EventCursor(1)
	wantError("the feed after a pruned cursor", request(t, se.h, "GET", "/api/v1/events?after="+expired, nil, admin), http.StatusGone, "cursor_expired")
	wantError("a replay after a pruned cursor", request(t, se.h, "POST", replay, map[string]any{"after": expired}, alice), http.StatusBadRequest, "cursor_expired")
}
