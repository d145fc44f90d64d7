package web

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/gmail"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
	"mailroom/store"
	"mailroom/store/storetest"
)

const (
	sessionCookie = "mailroom_session" // its name over http (over https: __Host-mailroom_session)
	flashCookie   = "mailroom_flash"
	testAPIToken  = "static-test-token"
	testPassword  = "correct horse battery staple"
)

// env is one web handler over a fresh store and (optionally) a queue.
type env struct {
	t     testing.TB
	h     http.Handler
	db    *store.DB
	q     *queue.Queue
	flaky *flakyHandler
}

type envOptions struct {
	queue      bool // build a queue (not started)
	startQueue bool // and start it over an embedded broker
	deps       func(*Deps)
}

func newEnv(t testing.TB, o envOptions) *env {
	t.Helper()
	e := &env{t: t, db: storetest.Open(t)}
	if o.queue || o.startQueue {
		e.q, e.flaky = newTestQueue(t, e.db, o.startQueue)
	}
	deps := Deps{
		Logger:        testLogger(t),
		DB:            e.db,
		Queue:         e.q,
		APIToken:      testAPIToken,
		AdminPassword: testPassword,
	}
	if o.deps != nil {
		o.deps(&deps)
	}
	h, err := New(deps)
	if err != nil {
		t.Fatalf("web.New: %v", err)
	}
	e.h = h
	return e
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testkit.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// flakyHandler backs debug:record: a payload {"id":X,"fail":N} fails
// permanently on its first N runs, then succeeds.
type flakyHandler struct {
	mu   sync.Mutex
	runs map[string]int
	ok   map[string]bool
}

func (f *flakyHandler) handle(_ context.Context, t *queue.Task) error {
	var p struct {
		ID   string `json:"id"`
		Fail int    `json:"fail"`
	}
	if err := json.Unmarshal(t.Payload, &p); err != nil {
		return queue.Permanent(fmt.Errorf("bad payload: %w", err))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[p.ID]++
	if f.runs[p.ID] <= p.Fail {
		return queue.Permanent(fmt.Errorf("simulated failure %d of %d for %s", f.runs[p.ID], p.Fail, p.ID))
	}
	f.ok[p.ID] = true
	return nil
}

func (f *flakyHandler) succeeded(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ok[id]
}

// typeDebugRecord is the web tests' own task type (the app's debug type).
const typeDebugRecord = "debug:record"

func newTestQueue(t testing.TB, db *store.DB, start bool) (*queue.Queue, *flakyHandler) {
	t.Helper()
	table, err := queue.NewTable(
		gmail.Tasks(gmail.TaskConfig{MaxRetries: 1, ConcurrencyMessageAdded: 1, ConcurrencyState: 1}),
		rules.Tasks(1), sheets.Tasks(1), webhooks.Tasks(),
		[]queue.TaskType{{Name: typeDebugRecord, Queue: "debug", Concurrency: 2, MaxRetries: 1, Timeout: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyHandler{runs: map[string]int{}, ok: map[string]bool{}}
	for _, tt := range table.Types() {
		h := func(context.Context, *queue.Task) error { return nil }
		if tt.Name == typeDebugRecord {
			h = flaky.handle
		}
		if err := table.Handle(tt.Name, h); err != nil {
			t.Fatal(err)
		}
	}
	b := brokertest.Embedded(t)
	q, err := queue.New(queue.Config{
		RetryInitial: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
		PollInterval: 10 * time.Millisecond, DelayedCheckInterval: 50 * time.Millisecond,
		ShutdownTimeout: 2 * time.Second, Logger: testLogger(t),
	}, db, b.RedisConnOpt(), table)
	if err != nil {
		t.Fatalf("queue.New: %v", err)
	}
	if start {
		if err := q.Start(context.Background()); err != nil {
			t.Fatalf("queue.Start: %v", err)
		}
		t.Cleanup(func() { _ = q.Stop(context.Background()) })
	}
	return q, flaky
}

// seeded numbers the dead letters the tests seed: ids in seeding order,
// far above the ids the queue gives out in a test.
var seeded atomic.Uint64

// seedDeadLetter puts a dead letter straight into the archive, as the
// queue leaves a task that failed for good.
func seedDeadLetter(t testing.TB, db *store.DB, typ, queueName, payload, errText string) string {
	t.Helper()
	id := fmt.Sprintf("%016x", 1<<32+seeded.Add(1))
	err := db.Update(func(tx *store.Tx) error {
		now := time.Now().UTC()
		return tx.DeadLetterPut(store.DeadLetter{ID: id, Type: typ, Queue: queueName, Payload: json.RawMessage(payload),
			Error: errText, Attempts: 4, FirstFailedAt: now.Add(-time.Minute), LastFailedAt: now})
	})
	if err != nil {
		t.Fatalf("seed dead letter: %v", err)
	}
	return id
}

// request sends one request to h. body is a string, []byte, url.Values
// (sent as a form) or nil; headers may be nil.
func request(t testing.TB, h http.Handler, method, path string, body any, headers map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	contentType := ""
	switch b := body.(type) {
	case nil:
	case string:
		r, contentType = strings.NewReader(b), "application/json"
	case []byte:
		r, contentType = bytes.NewReader(b), "application/json"
	case url.Values:
		r, contentType = strings.NewReader(b.Encode()), "application/x-www-form-urlencoded"
	case map[string]any:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r, contentType = bytes.NewReader(raw), "application/json"
	default:
		t.Fatalf("request: unsupported body type %T", body)
	}
	req := httptest.NewRequest(method, path, r)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if strings.HasPrefix(path, "/api/v1/") {
		// Every answer of the API is checked against its description.
		checkAPIResponse(t, req, w)
	}
	return w
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// apiError decodes the contract's error shape, failing the test when the
// body is not in it.
func apiError(t testing.TB, w *httptest.ResponseRecorder) errorDetail {
	t.Helper()
	var b struct {
		Error *errorDetail `json:"error"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || b.Error == nil || b.Error.Code == "" || b.Error.Message == "" {
		t.Fatalf("body is not the contract's error shape (status %d): %q", w.Code, w.Body.String())
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	return *b.Error
}

func decode[T any](t testing.TB, w *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, w.Body.String(), err)
	}
	return v
}

// session is a logged-in admin.
type session struct {
	cookie string
	csrf   string
}

func (s session) headers() map[string]string {
	return map[string]string{"Cookie": sessionCookie + "=" + s.cookie}
}

// withFlash is the session's headers plus the flash cookie w set, as the
// browser sends them on the page after a redirect.
func (s session) withFlash(w *httptest.ResponseRecorder) map[string]string {
	hdr := s.headers()
	for _, c := range w.Result().Cookies() {
		if c.Name == flashCookie {
			hdr["Cookie"] += "; " + c.Name + "=" + c.Value
		}
	}
	return hdr
}

// withCookies is the session's headers plus every cookie w set (not the
// ones it cleared), as the browser sends them on the next page.
func (s session) withCookies(w *httptest.ResponseRecorder) map[string]string {
	hdr := s.headers()
	for _, c := range w.Result().Cookies() {
		if c.MaxAge >= 0 && c.Value != "" && c.Name != sessionCookie {
			hdr["Cookie"] += "; " + c.Name + "=" + c.Value
		}
	}
	return hdr
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// loginForm opens the login page as the client headers describe and
// returns the pre-session cookie ("name=value") and the form's CSRF token.
func loginForm(t testing.TB, h http.Handler, headers map[string]string) (cookie, csrf string) {
	t.Helper()
	w := request(t, h, http.MethodGet, "/admin/login", nil, headers)
	for _, c := range w.Result().Cookies() {
		if strings.HasSuffix(c.Name, "mailroom_login") {
			cookie = c.Name + "=" + c.Value
		}
	}
	m := csrfInput.FindStringSubmatch(w.Body.String())
	if cookie == "" || m == nil {
		t.Fatalf("login page (status %d) has no pre-session cookie or CSRF token", w.Code)
	}
	return cookie, m[1]
}

// postLogin posts the login form as a browser does: the form of a fresh
// login page, with its pre-session cookie and CSRF token, plus form.
func postLogin(t testing.TB, h http.Handler, form url.Values, headers map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	cookie, csrf := loginForm(t, h, headers)
	hdr := map[string]string{}
	for k, v := range headers {
		hdr[k] = v
	}
	if hdr["Cookie"] != "" {
		hdr["Cookie"] += "; " + cookie
	} else {
		hdr["Cookie"] = cookie
	}
	f := url.Values{"csrf": {csrf}}
	for k, v := range form {
		f[k] = v
	}
	return request(t, h, http.MethodPost, "/admin/login", f, hdr)
}

// login signs in with the test password and reads the CSRF token off the
// overview page.
func login(t testing.TB, h http.Handler) session {
	t.Helper()
	w := postLogin(t, h, url.Values{"password": {testPassword}}, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("login: status %d, body %s", w.Code, w.Body.String())
	}
	var s session
	for _, c := range w.Result().Cookies() {
		if c.Name == sessionCookie {
			s.cookie = c.Value
		}
	}
	if s.cookie == "" {
		t.Fatal("login: no session cookie")
	}
	w = request(t, h, http.MethodGet, "/admin/tokens", nil, s.headers())
	m := csrfInput.FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatalf("login: no CSRF token on the page (status %d)", w.Code)
	}
	s.csrf = m[1]
	return s
}

func deadLetterIDs(t testing.TB, q *queue.Queue) []string {
	t.Helper()
	list, _, err := q.DeadLetters("", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range list {
		ids = append(ids, d.ID)
	}
	return ids
}
