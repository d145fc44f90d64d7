package web

import (
	"encoding/base64"
	"encoding/json"
	"html/template"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/assets"
	"mailroom/queue"
	"mailroom/queue/sheets"
	"mailroom/store"
	"mailroom/store/storetest"
)

// templateSamples holds data for every page template. A page added to
// assets/templates needs an entry here: the test fails until it has one.
func templateSamples() map[string]any {
	at := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	dl := store.DeadLetter{ID: "00000000000000a1", Type: sheets.TypeFlush, Queue: "sheets-flush",
		Payload: json.RawMessage(`{"sheet":"s"}`), Error: "quota <exhausted>", Attempts: 4, FirstFailedAt: at, LastFailedAt: at}
	row := queueRow{QueueStats: queue.QueueStats{Name: "sheets-flush", Types: []string{sheets.TypeFlush}, Concurrency: 4, Pending: 1200, DeadLettered: 1},
		Status: "dead letters", StatusClass: "err", Spark: sparkline([]int{1, 5, 2}, []int{0, 1, 0}), P50: "1.2ms", P99: "9.8ms", DeadLink: "/admin/deadletters?type=sheets:flush"}
	return map[string]any{
		"error":        &httpError{Status: 404, Code: "not_found", Message: "No such thing.", Field: "id"},
		"connect":      connectView{Title: "Connect your Gmail", Text: "mailroom asks Google.", Error: "Out of date.", Action: "/connect/cl_x", CSRF: "form-token", Email: "ann@example.com", ExpiresAt: "05:21 UTC"},
		"login":        loginView{Next: "/admin", Error: "That password is not right.", NoPassword: true},
		"logout":       nil,
		"overview":     overviewView{Running: true, Queues: []queueRow{row}, Totals: queueTotals{Pending: 1200, Workers: 4}, UpdatedAt: at},
		"deadletters":  deadLettersView{Types: []typeCount{{Type: dl.Type, Count: 1}}, Type: dl.Type, Total: 1, Items: []store.DeadLetter{dl}, Cursor: "00000000000000ff", Next: dl.ID, CanRedrive: true, CanAlert: true},
		"deadletter":   deadLetterView{Letter: dl, Payload: prettyJSON(dl.Payload), CanRedrive: true},
		"accounts":     gmailAccountsSample(at),
		"account":      gmailAccountSample(at),
		"forms":        formsSample(at),
		"rules":        rulesSample(at),
		"rules_users":  rulesUsersSample(at),
		"demo_mailbox": demoMailboxSample(at),
		"demo_sheets":  demoSheetsSample(at),
		"demo_alerts":  demoAlertsSample(at),
		"setup":        setupSample(at),
		"tokens": tokensView{Tokens: []tokenRow{{APIToken: store.APIToken{ID: "t1", Name: "ci", Prefix: "mr_abcde", Admin: true, CreatedAt: at, LastUsed: at}},
			{APIToken: store.APIToken{ID: "t2", Name: "old", Prefix: "mr_zzzzz", UserID: "u1", CreatedAt: at, ExpiresAt: at}, UserEmail: "ann@example.com", Expired: true},
			{APIToken: store.APIToken{ID: "t3", Name: "soon", Prefix: "mr_yyyyy", UserID: "u1", CreatedAt: at, ExpiresAt: at.Add(time.Hour)}, UserEmail: "ann@example.com"}},
			Users: []store.User{{ID: "u1", Email: "ann@example.com"}}, UserID: "u1", ExpiresIn: "720h",
			New: &newToken{Name: "ci", Token: "mr_secret", UserEmail: "ann@example.com", ExpiresAt: at, BaseURL: "https://mail.example.com", Example: "/api/v1/users/u1/rules"}, Error: "bad name"},
		"webhooks": webhooksView{Retention: "7 days", Hooks: []webhookRow{
			{Webhook: store.Webhook{ID: "w1", URL: "https://app.example.com/hook", Types: []string{"message.added"}, UserID: "u1", LastDeliveryAt: at, Delivered: 1200},
				UserEmail: "ann@example.com", Backlog: 10000, BacklogMore: true, Oldest: at},
			{Webhook: store.Webhook{ID: "w2", URL: "https://app.example.com/all", LastError: "webhooks: answered 503 <Service Unavailable>", FailingSince: at}},
		}, Users: []store.User{{ID: "u1", Email: "ann@example.com"}}, Types: store.EventTypes(),
			New:   &createdWebhook{ID: "w3", URL: "https://app.example.com/new", Secret: "whsec_c2VjcmV0"},
			Error: "url: not https", Field: "url", Form: webhookForm{URL: "http://x", UserID: "u1", Types: map[string]bool{"message.added": true}}},
		"webhook": webhookView{Hook: webhookRow{Webhook: store.Webhook{ID: "w1", URL: "https://app.example.com/hook", Types: []string{"message.added"}, CreatedAt: at, LastError: "answered 503", FailingSince: at},
			UserEmail: "ann@example.com", Backlog: 3}, Retention: "7 days", Replays: replayChoices(7 * 24 * time.Hour), Next: "dlc_x", Paged: true,
			Deliveries: []store.Delivery{
				{Seq: 2, Attempt: 2, At: at, Status: 503, Latency: 120 * time.Millisecond, Events: 3, Response: "<h1>busy</h1>", Error: "answered 503"},
				{Seq: 1, Attempt: 1, At: at, Latency: 10 * time.Second, Events: 3, Error: "context deadline exceeded"},
				{Seq: 3, Attempt: 1, At: at, Status: 204, Latency: 80 * time.Millisecond, Events: 1},
			}},
	}
}

// TestRenderEveryTemplate draws every page of assets/templates, logged in
// and out, in demo mode, with a flash.
func TestRenderEveryTemplate(t *testing.T) {
	t.Parallel()
	srv, err := newServer(Deps{DB: storetest.Open(t), Demo: true, DemoSource: fakeDemo{}})
	if err != nil {
		t.Fatal(err)
	}
	samples := templateSamples()
	names := slices.Sorted(maps.Keys(srv.pages))
	if len(names) < len(samples) {
		t.Errorf("parsed %v, want at least %v", names, slices.Sorted(maps.Keys(samples)))
	}
	for _, name := range names {
		data, ok := samples[name]
		if !ok {
			t.Errorf("template %q has no sample data in templateSamples; add one", name)
			continue
		}
		for _, loggedIn := range []bool{true, false} {
			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			c.Request = httptest.NewRequest(http.MethodGet, "/admin/x", nil)
			flash := base64.RawURLEncoding.EncodeToString([]byte(`{"Kind":"ok","Text":"Saved."}`))
			c.Request.AddCookie(&http.Cookie{Name: flashCookie, Value: flash + "." + srv.keys.sign("flash", flash)})
			if loggedIn {
				c.Set(sessionKey, store.Session{CSRF: "csrf-token"})
			}
			srv.render(c, http.StatusOK, name, data)
			body := w.Body.String()
			if w.Code != http.StatusOK {
				t.Errorf("%s (logged in %v): status %d: %s", name, loggedIn, w.Code, body)
				continue
			}
			for _, want := range []string{"<!doctype html>", "</html>", "simulated Google", "Saved."} {
				if !strings.Contains(body, want) {
					t.Errorf("%s (logged in %v): output lacks %q", name, loggedIn, want)
				}
			}
			if loggedIn && (!strings.Contains(body, `value="csrf-token"`) || !strings.Contains(body, `href="/admin/demo/sheets"`)) {
				t.Errorf("%s: logged-in page lacks the sign-out form or the demo pages' nav", name)
			}
		}
	}
}

func TestParsePagesErrors(t *testing.T) {
	t.Parallel()
	funcs := template.FuncMap{"asset": func(string) (string, error) { return "", nil }}
	layout := &fstest.MapFile{Data: []byte(`{{define "layout"}}{{template "content" .}}{{end}}`)}
	cases := map[string]fstest.MapFS{
		"parse error":  {"_layout.html": layout, "bad.html": {Data: []byte(`{{define "content"}}{{.Oops}`)}},
		"no content":   {"_layout.html": layout, "page.html": {Data: []byte(`{{define "title"}}x{{end}}`)}},
		"no layout":    {"page.html": {Data: []byte(`{{define "content"}}x{{end}}`)}},
		"not html":     {"_layout.html": layout, "notes.txt": {Data: []byte(`x`)}},
		"unknown func": {"_layout.html": layout, "page.html": {Data: []byte(`{{define "content"}}{{nope}}{{end}}`)}},
	}
	for name, fsys := range cases {
		if _, err := parsePages(fsys, funcs); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	ok := fstest.MapFS{"_layout.html": layout, "page.html": {Data: []byte(`{{define "content"}}x{{end}}`)}}
	if pages, err := parsePages(ok, funcs); err != nil || pages["page"] == nil {
		t.Errorf("good set: %v %v", pages, err)
	}
	// The embedded set parses (New would fail otherwise).
	if _, err := parsePages(assets.Templates(), (&server{static: &staticFiles{}}).funcs()); err != nil {
		t.Fatal(err)
	}
}

// renderPage draws one page, logged in, and returns its HTML.
func renderPage(t *testing.T, name string, data any) string {
	t.Helper()
	srv, err := newServer(Deps{DB: storetest.Open(t)})
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	c, _ := gin.CreateTestContext(w)
	c.Request = httptest.NewRequest(http.MethodGet, "/admin/x", nil)
	c.Set(sessionKey, store.Session{CSRF: "csrf-token"})
	srv.render(c, http.StatusOK, name, data)
	if w.Code != http.StatusOK {
		t.Fatalf("%s: status %d: %s", name, w.Code, w.Body.String())
	}
	return w.Body.String()
}

// TestHumanDuration: durations read as people say them, never in Go's
// format ("1m0s", "10.00s").
func TestHumanDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                   "—",
		250 * time.Millisecond:              "250 ms",
		1500 * time.Millisecond:             "1.5 seconds",
		time.Second:                         "1 second",
		10 * time.Second:                    "10 seconds",
		10*time.Second + 4*time.Millisecond: "10 seconds",
		time.Minute:                         "1 minute",
		150 * time.Second:                   "2 minutes 30 seconds",
		time.Hour + 5*time.Minute:           "1 hour 5 minutes",
		15 * time.Minute:                    "15 minutes",
		72 * time.Hour:                      "3 days",
	} {
		if got := humanDuration(d); got != want {
			t.Errorf("humanDuration(%v) = %q, want %q", d, got, want)
		}
	}
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{2 * time.Second: "just now", 30 * time.Second: "30 seconds ago", time.Minute: "1 minute ago", 5 * time.Hour: "5 hours ago"} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago(%v) = %q, want %q", d, got, want)
		}
	}
}
