package web

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/sheets"
	"mailroom/store"
)

func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "mailroom_test_total", Help: "test"})
	reg.MustRegister(c)
	c.Add(3)
	notReady := errors.New("broker is down")
	var ready error
	e := newEnv(t, envOptions{deps: func(d *Deps) {
		d.Gatherer = reg
		d.Ready = func(context.Context) error { return ready }
	}})

	w := request(t, e.h, http.MethodGet, "/healthz", nil, nil)
	if w.Code != 200 || w.Body.String() != "ok" {
		t.Errorf("healthz: %d %q", w.Code, w.Body.String())
	}
	w = request(t, e.h, http.MethodGet, "/readyz", nil, nil)
	if w.Code != 200 || w.Body.String() != "ready" {
		t.Errorf("readyz: %d %q", w.Code, w.Body.String())
	}
	ready = notReady
	w = request(t, e.h, http.MethodGet, "/readyz", nil, nil)
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("readyz not ready: status %d, want 503", w.Code)
	}
	if got := apiError(t, w); got.Code != "not_ready" || strings.Contains(got.Message, "broker is down") {
		t.Errorf("readyz error = %+v, want not_ready without the cause's text (the endpoint is public)", got)
	}
	// A part named by the app is said, its cause is not (a Redis address,
	// WRONGPASS and such stay in the log).
	ready = &Unready{Part: "broker", Err: errors.New("dial tcp 10.1.2.3:6379: WRONGPASS invalid username-password pair")}
	w = request(t, e.h, http.MethodGet, "/readyz", nil, nil)
	if got := apiError(t, w); w.Code != 503 || got.Message != "Not ready: broker unavailable." || strings.Contains(w.Body.String(), "WRONGPASS") || strings.Contains(w.Body.String(), "10.1.2.3") {
		t.Errorf("readyz with the broker down: %d %s", w.Code, w.Body)
	}
	w = request(t, e.h, http.MethodGet, "/metrics", nil, nil)
	if w.Code != 200 || !strings.Contains(w.Body.String(), "mailroom_test_total 3") {
		t.Errorf("metrics: %d %q", w.Code, w.Body.String())
	}
}

func TestReadyzDefaultPingsStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	if w := request(t, e.h, http.MethodGet, "/readyz", nil, nil); w.Code != 200 {
		t.Errorf("readyz: %d %s", w.Code, w.Body.String())
	}
}

// TestAPIAuth checks every /api/v1 route against the four kinds of caller
// (the failed-token limit is raised: TestBearerFailuresRateLimited checks it).
func TestAPIAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: true, deps: func(d *Deps) { d.TokenFailLimit = 1000 }})
	const adminToken = "mr_made-in-the-admin-page"
	if err := e.db.Update(func(tx *store.Tx) error { _, err := tx.APITokenCreate("ci", adminToken, "", time.Time{}); return err }); err != nil {
		t.Fatal(err)
	}
	routes := []struct{ method, path, body string }{
		{"POST", "/api/v1/users", `{"email":"auth@example.com","name":"A"}`},
		{"GET", "/api/v1/users", ""},
		{"GET", "/api/v1/deadletters", ""},
		{"GET", "/api/v1/deadletters/00000000000000ff", ""},
		{"DELETE", "/api/v1/deadletters/00000000000000ff", ""},
		{"POST", "/api/v1/deadletters/00000000000000ff/redrive", ""},
		{"POST", "/api/v1/deadletters/redrive", `{"ids":["00000000000000ff"]}`},
		{"GET", "/api/v1/queues", ""},
	}
	callers := []struct {
		name    string
		headers map[string]string
		authed  bool
	}{
		{"no token", nil, false},
		{"not bearer", map[string]string{"Authorization": "Basic " + testAPIToken}, false},
		{"bad token", bearer("nope"), false},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}, false},
		{"static token", bearer(testAPIToken), true},
		{"admin-made token", bearer(adminToken), true},
	}
	for _, r := range routes {
		for _, c := range callers {
			t.Run(r.method+" "+r.path+"/"+c.name, func(t *testing.T) {
				var body any
				if r.body != "" {
					body = r.body
				}
				w := request(t, e.h, r.method, r.path, body, c.headers)
				if !c.authed {
					if w.Code != http.StatusUnauthorized {
						t.Fatalf("status %d, want 401; body %s", w.Code, w.Body.String())
					}
					if got := apiError(t, w); got.Code != "unauthorized" {
						t.Errorf("code %q, want unauthorized", got.Code)
					}
					if w.Header().Get("WWW-Authenticate") == "" {
						t.Error("no WWW-Authenticate header")
					}
					return
				}
				if w.Code == http.StatusUnauthorized || w.Code >= 500 {
					t.Fatalf("status %d for an authorised caller; body %s", w.Code, w.Body.String())
				}
			})
		}
	}

	// The admin-made token's use is recorded.
	var tok store.APIToken
	if err := e.db.View(func(tx *store.Tx) error { var err error; tok, err = tx.APITokenLookup(adminToken); return err }); err != nil {
		t.Fatal(err)
	}
	if tok.LastUsed.IsZero() {
		t.Error("LastUsed not recorded")
	}
}

func TestUsersAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	auth := bearer(testAPIToken)

	w := request(t, e.h, http.MethodPost, "/api/v1/users", `{"email":"ada@example.com","name":"Ada"}`, auth)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	created := decode[map[string]string](t, w)
	if created["id"] == "" || created["email"] != "ada@example.com" || created["name"] != "Ada" {
		t.Errorf("create answer = %v", created)
	}

	cases := []struct {
		name       string
		body       string
		wantStatus int
		wantCode   string
		wantField  string
	}{
		{"duplicate", `{"email":"ada@example.com","name":"Ada again"}`, 409, "conflict", "email"},
		{"duplicate other case", `{"email":"ADA@example.com"}`, 409, "conflict", "email"},
		{"missing email", `{"name":"Nobody"}`, 400, "invalid", "email"},
		{"empty email", `{"email":"  "}`, 400, "invalid", "email"},
		{"invalid email", `{"email":"not-an-address"}`, 400, "invalid", "email"},
		{"display name", `{"email":"Ada <ada2@example.com>"}`, 400, "invalid", "email"},
		{"no domain dot", `{"email":"ada@localhost"}`, 400, "invalid", "email"},
		{"email wrong type", `{"email":42}`, 400, "invalid_type", "email"},
		{"name wrong type", `{"email":"b@example.com","name":["x"]}`, 400, "invalid_type", "name"},
		{"name too long", `{"email":"b@example.com","name":"` + strings.Repeat("x", 201) + `"}`, 400, "invalid", "name"},
		{"unknown field", `{"email":"b@example.com","nmae":"B"}`, 400, "unknown_field", "nmae"},
		{"malformed", `{"email":`, 400, "malformed_json", ""},
		{"not json", `email=b@example.com`, 400, "malformed_json", ""},
		{"empty body", ``, 400, "malformed_json", ""},
		{"array body", `[1,2]`, 400, "invalid_type", ""},
		{"two values", `{"email":"b@example.com"} {}`, 400, "malformed_json", ""},
		{"oversized", `{"email":"b@example.com","name":"` + strings.Repeat("x", maxBodyBytes) + `"}`, 413, "too_large", ""},
		{"oversized, not json", strings.Repeat("x", maxBodyBytes+1), 413, "too_large", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body any = tc.body
			if tc.body == "" {
				body = nil
			}
			w := request(t, e.h, http.MethodPost, "/api/v1/users", body, auth)
			if w.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d; body %s", w.Code, tc.wantStatus, w.Body.String())
			}
			got := apiError(t, w)
			if got.Code != tc.wantCode || got.Field != tc.wantField {
				t.Errorf("error = %+v, want code %q field %q", got, tc.wantCode, tc.wantField)
			}
		})
	}

	w = request(t, e.h, http.MethodGet, "/api/v1/users", nil, auth)
	list := decode[struct {
		Users []map[string]string `json:"users"`
	}](t, w)
	want := []map[string]string{{"id": created["id"], "email": "ada@example.com", "name": "Ada"}}
	if diff := cmp.Diff(want, list.Users); diff != "" {
		t.Errorf("users (-want +got):\n%s", diff)
	}
}

func TestUsersListEmptyIsArray(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	w := request(t, e.h, http.MethodGet, "/api/v1/users", nil, bearer(testAPIToken))
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"users":[]}` {
		t.Errorf("empty users: %d %s", w.Code, w.Body.String())
	}
}

type deadLetterList struct {
	DeadLetters []deadLetterJSON `json:"deadletters"`
	Next        string           `json:"next"`
}

func TestDeadLettersAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: true})
	auth := bearer(testAPIToken)
	syncID := seedDeadLetter(t, e.db, gmail.TypeSync, "gmail-sync", `{"accountId":"a1"}`, "account deleted")
	var flushIDs []string
	for range 3 {
		flushIDs = append(flushIDs, seedDeadLetter(t, e.db, sheets.TypeFlush, "sheets-flush", `{"sheet":"s1"}`, "quota"))
	}
	oddID := seedDeadLetter(t, e.db, sheets.TypeFlush, "sheets-flush", `"just a string"`, "odd payload")

	// List: newest first, payload as JSON.
	w := request(t, e.h, http.MethodGet, "/api/v1/deadletters", nil, auth)
	if w.Code != 200 {
		t.Fatalf("list: %d %s", w.Code, w.Body.String())
	}
	all := decode[deadLetterList](t, w)
	if len(all.DeadLetters) != 5 || all.Next != "" {
		t.Fatalf("list = %d items, next %q", len(all.DeadLetters), all.Next)
	}
	if all.DeadLetters[0].ID != oddID || string(all.DeadLetters[0].Payload) != `"just a string"` {
		t.Errorf("first = %s payload %s", all.DeadLetters[0].ID, all.DeadLetters[0].Payload)
	}
	last := all.DeadLetters[4]
	if last.ID != syncID || last.Type != gmail.TypeSync || last.Queue != "gmail-sync" || string(last.Payload) != `{"accountId":"a1"}` ||
		last.Error != "account deleted" || last.Attempts != 4 || last.FirstFailedAt.IsZero() || last.LastFailedAt.IsZero() {
		t.Errorf("last = %+v", last)
	}
	var raw map[string][]map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &raw)
	var keys []string
	for k := range raw["deadletters"][0] {
		keys = append(keys, k)
	}
	for _, k := range []string{"id", "type", "queue", "payload", "error", "attempts", "firstFailedAt", "lastFailedAt"} {
		if _, ok := raw["deadletters"][0][k]; !ok {
			t.Errorf("dead letter JSON lacks %q (has %v)", k, keys)
		}
	}

	// Filter and paginate.
	w = request(t, e.h, http.MethodGet, "/api/v1/deadletters?type=sheets:flush&limit=2", nil, auth)
	page1 := decode[deadLetterList](t, w)
	if len(page1.DeadLetters) != 2 || page1.Next == "" {
		t.Fatalf("page 1 = %+v", page1)
	}
	w = request(t, e.h, http.MethodGet, "/api/v1/deadletters?type=sheets:flush&limit=2&cursor="+page1.Next, nil, auth)
	page2 := decode[deadLetterList](t, w)
	if len(page2.DeadLetters) != 2 || page2.Next != "" || page2.DeadLetters[1].ID != flushIDs[0] {
		t.Fatalf("page 2 = %+v", page2)
	}

	bad := []struct{ query, field string }{
		{"limit=0", "limit"}, {"limit=501", "limit"}, {"limit=x", "limit"}, {"limit=-1", "limit"},
		{"cursor=zz", "cursor"}, {"type=no:such-type", "type"},
	}
	for _, b := range bad {
		w := request(t, e.h, http.MethodGet, "/api/v1/deadletters?"+b.query, nil, auth)
		if w.Code != 400 {
			t.Errorf("%s: status %d", b.query, w.Code)
			continue
		}
		if got := apiError(t, w); got.Field != b.field {
			t.Errorf("%s: field %q, want %q", b.query, got.Field, b.field)
		}
	}
	if w := request(t, e.h, http.MethodGet, "/api/v1/deadletters?limit=500", nil, auth); w.Code != 200 {
		t.Errorf("limit=500: %d", w.Code)
	}

	// Get one, and unknown ones.
	w = request(t, e.h, http.MethodGet, "/api/v1/deadletters/"+syncID, nil, auth)
	if got := decode[deadLetterJSON](t, w); w.Code != 200 || got.ID != syncID {
		t.Errorf("get: %d %+v", w.Code, got)
	}
	for _, id := range []string{"0000000000000fff", "nothex", "%00", strings.Repeat("a", 300)} {
		w := request(t, e.h, http.MethodGet, "/api/v1/deadletters/"+id, nil, auth)
		if w.Code != 404 || apiError(t, w).Code != "not_found" {
			t.Errorf("get %q: %d %s", id, w.Code, w.Body.String())
		}
	}

	// Discard.
	w = request(t, e.h, http.MethodDelete, "/api/v1/deadletters/"+oddID, nil, auth)
	if w.Code != 204 || w.Body.Len() != 0 {
		t.Errorf("delete: %d %q", w.Code, w.Body.String())
	}
	if w := request(t, e.h, http.MethodDelete, "/api/v1/deadletters/"+oddID, nil, auth); w.Code != 404 {
		t.Errorf("delete again: %d", w.Code)
	}

	// Redrive one: it leaves the archive and enters the outbox.
	w = request(t, e.h, http.MethodPost, "/api/v1/deadletters/"+syncID+"/redrive", nil, auth)
	if w.Code != 202 {
		t.Errorf("redrive one: %d %s", w.Code, w.Body.String())
	}
	if w := request(t, e.h, http.MethodPost, "/api/v1/deadletters/"+syncID+"/redrive", nil, auth); w.Code != 404 {
		t.Errorf("redrive one again: %d", w.Code)
	}
	if n := queueLen(t, e, gmail.TypeSync); n != 1 {
		t.Errorf("gmail-sync outbox holds %d, want 1", n)
	}

	// Bulk redrive: bad bodies first.
	badBodies := []struct{ body, code, field string }{
		{`{}`, "invalid", "type"},
		{`{"type":"sheets:flush","ids":["x"]}`, "invalid", "ids"},
		{`{"type":""}`, "invalid", "type"},
		{`{"ids":[]}`, "invalid", "ids"},
		{`{"type":"no:such-type"}`, "invalid", "type"},
		{`{"type":7}`, "invalid_type", "type"},
		{`{"ids":"abc"}`, "invalid_type", "ids"},
		{`{"ids":[1]}`, "invalid_type", "ids"},
		{`{"typo":"x"}`, "unknown_field", "typo"},
		{`{"ids":` + `["` + strings.Repeat(`a","`, 1001) + `a"]}`, "invalid", "ids"},
	}
	for _, b := range badBodies {
		w := request(t, e.h, http.MethodPost, "/api/v1/deadletters/redrive", b.body, auth)
		if w.Code != 400 {
			t.Errorf("%s: status %d; %s", b.body, w.Code, w.Body.String())
			continue
		}
		if got := apiError(t, w); got.Code != b.code || !strings.HasPrefix(got.Field, b.field) {
			t.Errorf("%.40s: error %+v, want code %q field %q", b.body, got, b.code, b.field)
		}
	}
	w = request(t, e.h, http.MethodPost, "/api/v1/deadletters/redrive", `{"ids":["`+flushIDs[0]+`","0000000000000fff"]}`, auth)
	if got := decode[redriveAnswer](t, w); w.Code != 200 || got.Redriven != 1 || len(got.Missing) != 1 {
		t.Errorf("redrive ids: %d %+v", w.Code, got)
	}
	w = request(t, e.h, http.MethodPost, "/api/v1/deadletters/redrive", `{"type":"sheets:flush"}`, auth)
	if got := decode[redriveAnswer](t, w); w.Code != 200 || got.Redriven != 2 {
		t.Errorf("redrive type: %d %+v", w.Code, got)
	}
	if ids := deadLetterIDs(t, e.q); len(ids) != 0 {
		t.Errorf("archive still holds %v", ids)
	}
}

// queueLen is how many tasks of type typ are recorded and not finished.
func queueLen(t testing.TB, e *env, typ string) int {
	t.Helper()
	n := 0
	if err := e.db.View(func(tx *store.Tx) (err error) { n, err = e.q.Len(tx, typ); return err }); err != nil {
		t.Fatal(err)
	}
	return n
}

// Without a queue there is no archive to read: every dead-letter endpoint
// answers 503 not_ready (the archive is the queue's, never read around it).
func TestDeadLettersWithoutQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	auth := bearer(testAPIToken)
	id := seedDeadLetter(t, e.db, "gmail:sync", "gmail-sync", `{}`, "boom")
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/api/v1/deadletters"},
		{http.MethodGet, "/api/v1/deadletters/" + id},
		{http.MethodPost, "/api/v1/deadletters/" + id + "/redrive"},
		{http.MethodDelete, "/api/v1/deadletters/" + id},
	} {
		w := request(t, e.h, c.method, c.path, nil, auth)
		if w.Code != 503 || apiError(t, w).Code != "not_ready" {
			t.Errorf("%s %s without queue: %d %s", c.method, c.path, w.Code, w.Body.String())
		}
	}
	w := request(t, e.h, http.MethodGet, "/api/v1/queues", nil, auth)
	if w.Code != 200 || strings.TrimSpace(w.Body.String()) != `{"queues":[]}` {
		t.Errorf("queues without queue: %d %s", w.Code, w.Body.String())
	}
}

// TestDeadLetterRedriveThroughQueue runs the real machinery: a task fails
// for good, shows up in the API, is redriven and then succeeds.
func TestDeadLetterRedriveThroughQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{startQueue: true})
	auth := bearer(testAPIToken)
	if err := e.db.Update(func(tx *store.Tx) error {
		_, _, err := e.q.Enqueue(tx, typeDebugRecord, map[string]any{"id": "t1", "fail": 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var dl deadLetterJSON
	testkit.Eventually(t, 10*time.Second, "the task to be dead-lettered", func() bool {
		list := decode[deadLetterList](t, request(t, e.h, http.MethodGet, "/api/v1/deadletters?type=debug:record", nil, auth))
		if len(list.DeadLetters) == 1 {
			dl = list.DeadLetters[0]
			return true
		}
		return false
	})
	if dl.Attempts != 1 || !strings.Contains(dl.Error, "simulated failure") || dl.Queue != "debug" {
		t.Errorf("dead letter = %+v", dl)
	}

	w := request(t, e.h, http.MethodGet, "/api/v1/queues", nil, auth)
	qs := decode[struct {
		Queues []queue.QueueStats `json:"queues"`
	}](t, w)
	var debugQ *queue.QueueStats
	for i := range qs.Queues {
		if qs.Queues[i].Name == "debug" {
			debugQ = &qs.Queues[i]
		}
	}
	if len(qs.Queues) != len(e.q.Table().Queues()) || debugQ == nil || debugQ.DeadLettered != 1 || debugQ.Failed < 1 {
		t.Errorf("queues = %+v", qs.Queues)
	}

	if w := request(t, e.h, http.MethodPost, "/api/v1/deadletters/"+dl.ID+"/redrive", nil, auth); w.Code != 202 {
		t.Fatalf("redrive: %d %s", w.Code, w.Body.String())
	}
	testkit.Eventually(t, 10*time.Second, "the redriven task to succeed", func() bool { return e.flaky.succeeded("t1") })
	if ids := deadLetterIDs(t, e.q); len(ids) != 0 {
		t.Errorf("archive still holds %v", ids)
	}
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	auth := bearer(testAPIToken)
	cases := []struct {
		method, path string
		status       int
		code         string
	}{
		{"GET", "/nope", 404, "not_found"},
		{"GET", "/api/v1/nope", 404, "not_found"},
		{"GET", "/api/v2/users", 404, "not_found"},
		{"PUT", "/api/v1/users", 405, "method_not_allowed"},
		{"DELETE", "/api/v1/queues", 405, "method_not_allowed"},
		{"PATCH", "/api/v1/deadletters/00000000000000ff", 405, "method_not_allowed"},
		{"POST", "/healthz", 405, "method_not_allowed"},
	}
	for _, c := range cases {
		w := request(t, e.h, c.method, c.path, nil, auth)
		if w.Code != c.status {
			t.Errorf("%s %s: status %d, want %d", c.method, c.path, w.Code, c.status)
			continue
		}
		if got := apiError(t, w); got.Code != c.code {
			t.Errorf("%s %s: code %q, want %q", c.method, c.path, got.Code, c.code)
		}
		if c.status == 405 && w.Header().Get("Allow") == "" {
			t.Errorf("%s %s: no Allow header", c.method, c.path)
		}
	}
}

// TestNoInputGets500 throws odd requests at every route.
func TestNoInputGets500(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: true})
	sess := login(t, e.h)
	bodies := []string{"", "{", "null", "[]", `{"email":null}`, `{"ids":null,"type":null}`, "\x00\xff", `{"a":` + strings.Repeat("[", 10000), `"str"`, "1e999"}
	paths := []string{
		"/api/v1/users", "/api/v1/deadletters", "/api/v1/deadletters/redrive", "/api/v1/deadletters/x", "/api/v1/deadletters/x/redrive",
		"/api/v1/queues", "/admin", "/admin/overview.json", "/admin/deadletters", "/admin/deadletters/x", "/admin/deadletters/x/redrive",
		"/admin/deadletters/redrive", "/admin/tokens", "/admin/tokens/x/revoke", "/admin/login", "/admin/logout", "/static/app.css",
		"/static/../../etc/passwd", "/readyz", "/admin/deadletters?limit=%ff&cursor=%00", "/api/v1/deadletters?type=%00",
	}
	headers := []map[string]string{nil, bearer(testAPIToken), sess.headers()}
	for _, p := range paths {
		for _, m := range []string{"GET", "POST", "DELETE", "PUT"} {
			for _, b := range bodies {
				for _, h := range headers {
					var body any
					if b != "" {
						body = b
					}
					w := request(t, e.h, m, p, body, h)
					if w.Code >= 500 {
						t.Errorf("%s %s %.20q: status %d: %s", m, p, b, w.Code, w.Body.String())
					}
				}
			}
		}
	}
}
