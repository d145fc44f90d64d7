package web

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
)

// tokenEndpoint answers like Google's OAuth token endpoint does for an
// authorization-code grant with a made-up code: 401 invalid_client when
// the client id or secret is wrong, else 400 invalid_grant.
type tokenEndpoint struct {
	*httptest.Server
	calls atomic.Int32
	// answer, when set, replaces the default answers.
	answer func(w http.ResponseWriter, r *http.Request)
}

func newTokenEndpoint(t *testing.T, clientID, secret string) *tokenEndpoint {
	t.Helper()
	te := &tokenEndpoint{}
	te.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		te.calls.Add(1)
		if te.answer != nil {
			te.answer(w, r)
			return
		}
		oauthError := func(status int, code, desc string) {
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": desc})
		}
		if err := r.ParseForm(); err != nil || r.Method != http.MethodPost || r.URL.Path != "/token" {
			oauthError(http.StatusBadRequest, "invalid_request", "Bad request.")
			return
		}
		f := r.PostForm
		if f.Get("grant_type") != "authorization_code" || f.Get("code") != setupCheckCode || f.Get("redirect_uri") == "" {
			oauthError(http.StatusBadRequest, "invalid_request", "Unexpected grant: "+f.Encode())
			return
		}
		if f.Get("client_id") != clientID || f.Get("client_secret") != secret {
			oauthError(http.StatusUnauthorized, "invalid_client", "The OAuth client was not found.")
			return
		}
		oauthError(http.StatusBadRequest, "invalid_grant", "Malformed auth code.")
	}))
	t.Cleanup(te.Close)
	return te
}

// client is the Google client of the setup page, pointed at the endpoint.
func (te *tokenEndpoint) client(id, secret, redirect string) *google.Client {
	return google.New(google.Config{TokenURL: te.URL + "/token", ClientID: id, ClientSecret: secret, RedirectURL: redirect, HTTPClient: te.Client()})
}

// webhook counts the posts of a Discord/Slack-style incoming webhook.
type webhook struct {
	*httptest.Server
	posts  atomic.Int32
	status int
}

func newWebhook(t *testing.T, status int) *webhook {
	t.Helper()
	h := &webhook{status: status}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Text string `json:"text"`
		}
		if json.NewDecoder(r.Body).Decode(&body) == nil && body.Text != "" {
			h.posts.Add(1)
		}
		w.WriteHeader(h.status)
	}))
	t.Cleanup(h.Close)
	return h
}

// setupEnv is a web handler with the setup page over opts, and alerts
// when not nil.
// setupEnv has a queue (not started): the dead-letters page, with its
// test-alert button, reads the queue's archive.
func setupEnv(t *testing.T, opts SetupOptions, alerts *queue.Alerter) *env {
	t.Helper()
	return newEnv(t, envOptions{queue: true, deps: func(d *Deps) {
		d.Setup = &opts
		d.Alerts = alerts
	}})
}

var setupRow = regexp.MustCompile(`(?s)<tr data-item="([a-z_]+)" data-state="([a-z]+)">(.*?)</tr>`)

// setupRows reads the checklist off the page: item key → state and text.
func setupRows(t *testing.T, body string) map[string][2]string {
	t.Helper()
	rows := map[string][2]string{}
	for _, m := range setupRow.FindAllStringSubmatch(body, -1) {
		rows[m[1]] = [2]string{m[2], html.UnescapeString(m[3])}
	}
	want := 6 // and the Gmail quota when its settings are given
	if _, ok := rows["gmail_quota"]; ok {
		want = 7
	}
	if len(rows) != want {
		t.Fatalf("checklist has %d items, want %d: %v", len(rows), want, rows)
	}
	return rows
}

// postAndFollow posts a setup form and returns the setup page it
// redirects to, with its flash.
func postAndFollow(t *testing.T, h http.Handler, s session, path string) string {
	t.Helper()
	return postAndFollowTo(t, h, s, path, "/admin/setup")
}

// postAndFollowTo is postAndFollow for a button that comes back to the page
// back.
func postAndFollowTo(t *testing.T, h http.Handler, s session, path, back string) string {
	t.Helper()
	w := request(t, h, http.MethodPost, path, url.Values{"csrf": {s.csrf}}, s.headers())
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != back {
		t.Fatalf("POST %s: %d to %q, want 303 to %s: %s", path, w.Code, w.Header().Get("Location"), back, w.Body.String())
	}
	w = request(t, h, http.MethodGet, back, nil, s.withFlash(w))
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s after POST %s: %d", back, path, w.Code)
	}
	return html.UnescapeString(w.Body.String())
}

func flashText(body string) (kind, text string) {
	m := regexp.MustCompile(`(?s)<div class="flash flash-(\w+)" role="status">(.*?)</div>`).FindStringSubmatch(body)
	if m == nil {
		return "", ""
	}
	return m[1], m[2]
}

func TestSetupPageNothingConfigured(t *testing.T) {
	t.Parallel()
	te := newTokenEndpoint(t, "id", "secret")
	opts := SetupOptions{
		PublicURL: "http://127.0.0.1:8080", RedirectURL: "http://127.0.0.1:8080/oauth/google/callback",
		PollInterval: 15 * time.Minute, Google: te.client("", "", "http://127.0.0.1:8080/oauth/google/callback"),
	}
	e := setupEnv(t, opts, queue.NewAlerter(queue.AlertConfig{}))
	s := login(t, e.h)
	w := request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers())
	if w.Code != http.StatusOK {
		t.Fatalf("GET /admin/setup: %d", w.Code)
	}
	body := html.UnescapeString(w.Body.String())
	if !strings.Contains(body, `href="/admin/setup" class="active"`) {
		t.Error("the nav lacks an active Setup entry")
	}
	// Every item is missing or needs a look, and says which setting fixes it.
	want := map[string]struct {
		state string
		fix   []string
	}{
		"public_url":    {setupWarn, []string{"set MAILROOM_PUBLIC_URL", "https://"}},
		"oauth_client":  {setupMissing, []string{"set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET"}},
		"redirect_url":  {setupWarn, []string{"set MAILROOM_PUBLIC_URL (or MAILROOM_GOOGLE_REDIRECT_URL)"}},
		"pubsub_topic":  {setupWarn, []string{"polling alone, every 15 minutes", "set MAILROOM_PUBSUB_TOPIC=projects/PROJECT/topics/TOPIC", "not set: polling only"}},
		"push_auth":     {setupMissing, []string{"Every push is refused", "set MAILROOM_PUSH_AUDIENCE", "MAILROOM_PUSH_TOKEN"}},
		"alert_webhook": {setupMissing, []string{"set MAILROOM_ALERT_WEBHOOK_URL"}},
	}
	rows := setupRows(t, body)
	for key, wt := range want {
		got := rows[key]
		if got[0] != wt.state {
			t.Errorf("%s: state %q, want %q", key, got[0], wt.state)
		}
		for _, f := range wt.fix {
			if !strings.Contains(got[1], f) {
				t.Errorf("%s: %q lacks %q", key, got[1], f)
			}
		}
	}
	for _, s := range []string{"3 items are missing and 3 need a look", "http://127.0.0.1:8080/push/gmail", gmailPushPublisher,
		"https://www.googleapis.com/auth/gmail.modify", "https://www.googleapis.com/auth/spreadsheets", "It needs the OAuth client first."} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	// No button that could only fail: no client to check, no webhook.
	for _, s := range []string{`action="/admin/setup/google"`, `action="/admin/setup/alert"`, "emulator"} {
		if strings.Contains(body, s) {
			t.Errorf("page shows %q with nothing configured", s)
		}
	}
	if strings.Contains(body, "?token=") && !strings.Contains(body, "MAILROOM_PUSH_TOKEN") {
		t.Error("a token push URL is shown without token auth")
	}
}

func TestSetupPageEverythingConfigured(t *testing.T) {
	t.Parallel()
	const (
		clientSecret = "GOCSPX-client-secret-value"
		pushToken    = "push-token-secret-value"
		hookSecret   = "T000/B000/webhook-secret-path"
		redirect     = "https://mail.example.com/oauth/google/callback"
	)
	te := newTokenEndpoint(t, "1234-abc.apps.googleusercontent.com", clientSecret)
	opts := SetupOptions{
		PublicURL: "https://mail.example.com/", PublicURLSet: true,
		GoogleClientID: "1234-abc.apps.googleusercontent.com", GoogleClientSecretSet: true,
		RedirectURL: redirect, PubSubTopic: "projects/acme/topics/gmail", PollInterval: 15 * time.Minute,
		PushAudience: "https://mail.example.com/push/gmail", PushServiceAccount: "push@acme.iam.gserviceaccount.com",
		PushTokenSet: true, AlertWebhookURL: "https://hooks.slack.com/services/" + hookSecret,
		GmailUserUnits: 6000, GmailProjectUnits: 1200000,
		Google: te.client("1234-abc.apps.googleusercontent.com", clientSecret, redirect),
	}
	e := setupEnv(t, opts, queue.NewAlerter(queue.AlertConfig{WebhookURL: opts.AlertWebhookURL}))
	s := login(t, e.h)
	w := request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers())
	body := html.UnescapeString(w.Body.String())
	for key, row := range setupRows(t, body) {
		if row[0] != setupOK {
			t.Errorf("%s: state %q, want ok: %s", key, row[0], row[1])
		}
	}
	for _, s := range []string{
		"Everything a production deployment needs is configured.",
		`id="setup-redirect" class="mono" type="text" readonly value="` + redirect + `"`,
		`id="setup-push" class="mono" type="text" readonly value="https://mail.example.com/push/gmail"`,
		`id="setup-audience" class="mono" type="text" readonly value="https://mail.example.com/push/gmail"`,
		`id="setup-sa" class="mono" type="text" readonly value="push@acme.iam.gserviceaccount.com"`,
		`id="setup-publisher" class="mono" type="text" readonly value="` + gmailPushPublisher + `"`,
		"https://mail.example.com/push/gmail?token=<MAILROOM_PUSH_TOKEN>",
		"https://www.googleapis.com/auth/gmail.modify", "https://www.googleapis.com/auth/spreadsheets",
		"1234-abc.apps.googleusercontent.com · secret set (not shown)", "projects/acme/topics/gmail",
		"posts to hooks.slack.com", `action="/admin/setup/google"`, `action="/admin/setup/alert"`,
		"6,000 units a minute per account, 1,200,000 for the project, at Google's 2026 price list (messages.get 20, threads.get 40)",
		"A first sync of 10,000 messages costs up to 200,100 units: about 34 minutes of one account's quota.",
	} {
		if !strings.Contains(body, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	for _, secret := range []string{clientSecret, pushToken, hookSecret, "webhook-secret"} {
		if strings.Contains(body, secret) {
			t.Errorf("page shows the secret %q", secret)
		}
	}
	if te.calls.Load() != 0 {
		t.Error("rendering the page called the token endpoint")
	}
}

func TestSetupPageTokenAuthOnly(t *testing.T) {
	t.Parallel()
	e := setupEnv(t, SetupOptions{PublicURL: "https://mail.example.com", PublicURLSet: true, PushTokenSet: true}, nil)
	s := login(t, e.h)
	body := html.UnescapeString(request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers()).Body.String())
	if !strings.Contains(body, `id="setup-push" class="mono" type="text" readonly value="https://mail.example.com/push/gmail?token=<MAILROOM_PUSH_TOKEN>"`) {
		t.Error("token auth: the push endpoint lacks the ?token= placeholder")
	}
	if row := setupRows(t, body)["push_auth"]; row[0] != setupOK || !strings.Contains(row[1], "shared ?token= (set, not shown)") {
		t.Errorf("push_auth: %v", row)
	}
}

func TestSetupPageDemo(t *testing.T) {
	t.Parallel()
	opts := SetupOptions{
		Demo: true, PublicURL: "http://127.0.0.1:8080", GoogleClientID: "mailroom-demo.apps.googleusercontent.com", GoogleClientSecretSet: true,
		RedirectURL: "http://127.0.0.1:8080/oauth/google/callback", PubSubTopic: "projects/mailroom-demo/topics/gmail",
		PushAudience: "http://127.0.0.1:8080/push/gmail", PushServiceAccount: "push@emulator",
		GmailUserUnits: 15000, GmailProjectUnits: 1200000, GmailPrices: google.MustPrices(google.Prices2025),
	}
	e := setupEnv(t, opts, queue.NewAlerter(queue.AlertConfig{}))
	s := login(t, e.h)
	body := html.UnescapeString(request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers()).Body.String())
	if !strings.Contains(body, "the Google settings point at the built-in Google emulator") {
		t.Error("demo: the page does not say Google is emulated")
	}
	rows := setupRows(t, body)
	for _, key := range []string{"oauth_client", "redirect_url", "pubsub_topic", "push_auth", "gmail_quota", "alert_webhook"} {
		if rows[key][0] != setupDemo {
			t.Errorf("demo: %s is %q, want demo", key, rows[key][0])
		}
	}
	if q := rows["gmail_quota"][1]; !strings.Contains(q, "15,000 units a minute per account") || !strings.Contains(body, "on Google's 2025 price list with 15,000 units a minute per user") ||
		!strings.Contains(body, "costs up to 50,100 units: about 4 minutes") {
		t.Errorf("demo: the Gmail quota row %q does not say the emulated project has 15,000 units", q)
	}
	if !strings.Contains(body, `action="/admin/setup/alert"`) {
		t.Error("demo: no test alert button (the demo catches alerts in process)")
	}
}

func TestSetupCSRF(t *testing.T) {
	t.Parallel()
	te := newTokenEndpoint(t, "id", "secret")
	hook := newWebhook(t, http.StatusNoContent)
	opts := SetupOptions{PublicURL: "https://m.example.com", GoogleClientID: "id", GoogleClientSecretSet: true,
		RedirectURL: "https://m.example.com/oauth/google/callback", AlertWebhookURL: hook.URL, Google: te.client("id", "secret", "https://m.example.com/oauth/google/callback")}
	e := setupEnv(t, opts, queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL}))
	s := login(t, e.h)
	for _, path := range []string{"/admin/setup/alert", "/admin/setup/google"} {
		for name, token := range map[string]string{"missing": "", "wrong": "not-the-token", "other session's": otherSessionCSRF(t, e.db)} {
			form := url.Values{}
			if token != "" {
				form.Set("csrf", token)
			}
			w := request(t, e.h, http.MethodPost, path, form, s.headers())
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "out of date") {
				t.Errorf("POST %s with %s CSRF token: %d", path, name, w.Code)
			}
		}
		// Not logged in: to the login page, nothing called.
		if w := request(t, e.h, http.MethodPost, path, url.Values{"csrf": {s.csrf}}, nil); w.Code == http.StatusSeeOther && w.Header().Get("Location") == "/admin/setup" {
			t.Errorf("POST %s without a session was served", path)
		}
	}
	if n, m := te.calls.Load(), hook.posts.Load(); n != 0 || m != 0 {
		t.Errorf("refused forms made calls: token endpoint %d, webhook %d", n, m)
	}
}

func TestSetupCheckGoogleCredentials(t *testing.T) {
	t.Parallel()
	const redirect = "https://m.example.com/oauth/google/callback"
	te := newTokenEndpoint(t, "good-id.apps.googleusercontent.com", "good-secret")
	for _, tc := range []struct {
		name, id, secret, kind string
		want                   []string
	}{
		{"valid client", "good-id.apps.googleusercontent.com", "good-secret", "ok", []string{"Google accepts this OAuth client id and secret", "400 invalid_grant"}},
		{"wrong secret", "good-id.apps.googleusercontent.com", "old-secret", "error", []string{"Google does not accept this OAuth client (401 invalid_client)", "MAILROOM_GOOGLE_CLIENT_SECRET"}},
		{"unknown client", "other-id", "good-secret", "error", []string{"401 invalid_client", "MAILROOM_GOOGLE_CLIENT_ID"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := SetupOptions{PublicURL: "https://m.example.com", PublicURLSet: true, GoogleClientID: tc.id, GoogleClientSecretSet: true,
				RedirectURL: redirect, Google: te.client(tc.id, tc.secret, redirect)}
			e := setupEnv(t, opts, nil)
			s := login(t, e.h)
			before := te.calls.Load()
			body := postAndFollow(t, e.h, s, "/admin/setup/google")
			if n := te.calls.Load() - before; n != 1 {
				t.Errorf("the check made %d calls, want 1", n)
			}
			kind, text := flashText(body)
			if kind != tc.kind {
				t.Errorf("flash kind %q (%q), want %q", kind, text, tc.kind)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("flash %q lacks %q", text, w)
				}
			}
			if strings.Contains(body, tc.secret) {
				t.Error("the page shows the client secret")
			}
		})
	}
	// Without a client the button is refused with the fix, and nothing is called.
	e := setupEnv(t, SetupOptions{PublicURL: "https://m.example.com", Google: te.client("", "", redirect)}, nil)
	before := te.calls.Load()
	body := postAndFollow(t, e.h, login(t, e.h), "/admin/setup/google")
	if kind, text := flashText(body); kind != "error" || !strings.Contains(text, "set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET") {
		t.Errorf("no client: flash %s %q", kind, text)
	}
	if te.calls.Load() != before {
		t.Error("no client: the token endpoint was called")
	}
}

// TestSetupCheckGoogleAnswers covers the token endpoint's other answers:
// each gives one sentence, and a silent endpoint is given up on in time.
func TestSetupCheckGoogleAnswers(t *testing.T) {
	t.Parallel()
	const redirect = "https://m.example.com/oauth/google/callback"
	jsonAnswer := func(status int, body string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}
	}
	cases := []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request)
		ok     bool
		want   string
	}{
		{"redirect mismatch", jsonAnswer(400, `{"error":"redirect_uri_mismatch","error_description":"Bad Request"}`), false, "does not list " + redirect},
		{"unauthorized client", jsonAnswer(400, `{"error":"unauthorized_client"}`), false, "Web application"},
		{"accepted a made-up code", jsonAnswer(200, `{"access_token":"x","token_type":"Bearer","expires_in":3600}`), false, "not Google's: check MAILROOM_GOOGLE_TOKEN_URL"},
		{"server error", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "<html>oops</html>", 502) }, false, "answered 502 without an OAuth error code"},
		{"silent", nil, false, "did not answer within 200ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			te := newTokenEndpoint(t, "id", "secret")
			te.answer = tc.answer
			if te.answer == nil {
				// Never answers; released at cleanup (before te.Close, which
				// waits for it).
				release := make(chan struct{})
				t.Cleanup(func() { close(release) })
				te.answer = func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}
			}
			start := time.Now()
			ok, text := checkGoogleClient(context.Background(), te.client("id", "secret", redirect), 200*time.Millisecond, redirect)
			if ok != tc.ok || !strings.Contains(text, tc.want) {
				t.Errorf("got %v %q, want %v and %q", ok, text, tc.ok, tc.want)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("the check took %s", d)
			}
		})
	}
	// An endpoint nobody listens on.
	te := newTokenEndpoint(t, "id", "secret")
	gc := te.client("id", "secret", redirect)
	te.Close()
	if ok, text := checkGoogleClient(context.Background(), gc, time.Second, redirect); ok || !strings.Contains(text, "could not be reached") {
		t.Errorf("closed endpoint: %v %q", ok, text)
	}
}

func TestSetupTestAlert(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		path   string // the setup page's button, or the dead-letters page's
		back   string
		status int
		kind   string
		want   string
	}{
		{"delivered", "/admin/setup/alert", "/admin/setup", http.StatusNoContent, "ok", "A test alert was posted to the webhook."},
		{"refused", "/admin/setup/alert", "/admin/setup", http.StatusNotFound, "error", "The test alert was not delivered: webhook answered 404"},
		{"dead letters delivered", "/admin/alerts/test", "/admin/deadletters", http.StatusNoContent, "ok", "A test alert was posted to the webhook."},
		{"dead letters refused", "/admin/alerts/test", "/admin/deadletters", http.StatusNotFound, "error", "The test alert was not delivered: webhook answered 404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hook := newWebhook(t, tc.status)
			e := setupEnv(t, SetupOptions{PublicURL: "https://m.example.com", AlertWebhookURL: hook.URL},
				queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL, Client: hook.Client()}))
			body := postAndFollowTo(t, e.h, login(t, e.h), tc.path, tc.back)
			if n := hook.posts.Load(); n != 1 {
				t.Errorf("webhook got %d posts, want 1", n)
			}
			if kind, text := flashText(body); kind != tc.kind || !strings.Contains(text, tc.want) {
				t.Errorf("flash %s %q, want %s %q", kind, text, tc.kind, tc.want)
			}
		})
	}
	// Without an Alerter the button is a clear 503.
	e := setupEnv(t, SetupOptions{PublicURL: "https://m.example.com"}, nil)
	s := login(t, e.h)
	if w := request(t, e.h, http.MethodPost, "/admin/setup/alert", url.Values{"csrf": {s.csrf}}, s.headers()); w.Code != http.StatusServiceUnavailable {
		t.Errorf("no alerter: %d, want 503", w.Code)
	}
}

// setupSample is the setup page's data for TestRenderEveryTemplate: a mix
// of states, every value, both buttons.
func setupSample(time.Time) setupView {
	x := &setupHandlers{opts: normalizeSetup(SetupOptions{
		PublicURL: "http://mail.example.com", PublicURLSet: true, GoogleClientID: "id.apps.googleusercontent.com", GoogleClientSecretSet: true,
		RedirectURL: "http://mail.example.com/oauth/google/callback", PollInterval: 15 * time.Minute,
		PushAudience: "https://mail.example.com/push/gmail", PushTokenSet: true,
		Google: google.New(google.Config{ClientID: "id.apps.googleusercontent.com"}),
	})}
	v := x.view()
	v.CanAlert = true
	return v
}

// TestSetupPageShowsConnectLinks: the setup page shows how a service makes
// a connect link (a curl call to this server with an allowed redirect
// URI), which return addresses are allowed, and what a link brought back
// when it returns to the page (the demo lists the page as one).
func TestSetupPageShowsConnectLinks(t *testing.T) {
	t.Parallel()
	opts := SetupOptions{Demo: true, PublicURL: "http://127.0.0.1:8080", ConnectRedirectURIs: []string{"http://127.0.0.1:8080/admin/setup"}}
	e := setupEnv(t, opts, nil)
	s := login(t, e.h)
	body := html.UnescapeString(request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers()).Body.String())
	for _, want := range []string{"data-setup-connect", `"redirectUri":"http://127.0.0.1:8080/admin/setup"`, "http://127.0.0.1:8080/api/v1/users/$USER_ID/connect",
		"status=error&error=denied|expired_link|wrong_user|google_error", "/api/v1/openapi.json"} {
		if !strings.Contains(body, want) {
			t.Errorf("the setup page lacks %q", want)
		}
	}
	body = html.UnescapeString(request(t, e.h, http.MethodGet, "/admin/setup?status=connected&accountId=a1&state=x", nil, s.headers()).Body.String())
	if !strings.Contains(body, "A connect link came back here") || !strings.Contains(body, "<code>status=connected</code>") || !strings.Contains(body, "<code>accountId=a1</code>") {
		t.Error("the page does not show what a link brought back")
	}
	e = setupEnv(t, SetupOptions{PublicURL: "http://127.0.0.1:8080"}, nil)
	s = login(t, e.h)
	if body := request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers()).Body.String(); !strings.Contains(body, "set <code>MAILROOM_CONNECT_REDIRECT_URIS</code>") {
		t.Error("without redirect URIs the page does not say to set them")
	}
}

// The Gmail quota row reads the price list in force: 15,000 units a user
// is a mistake under the 2026 list and the quota itself under 2025's, and
// its sizing of a first sync is the list's.
func TestSetupPageGmailQuotaFollowsPrices(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prices string
		state  string
		words  []string
	}{
		{google.Prices2026, setupWarn, []string{"More than the 6,000 units a minute per user of Google's 2026 price list", "about 14 minutes"}},
		{google.Prices2025, setupOK, []string{"at the 2025 price list's costs", "about 4 minutes"}},
	} {
		opts := SetupOptions{PublicURL: "https://mail.example.com", PublicURLSet: true, PushTokenSet: true,
			GmailUserUnits: 15000, GmailProjectUnits: 1200000, GmailPrices: google.MustPrices(c.prices)}
		e := setupEnv(t, opts, nil)
		s := login(t, e.h)
		body := html.UnescapeString(request(t, e.h, http.MethodGet, "/admin/setup", nil, s.headers()).Body.String())
		row := setupRows(t, body)["gmail_quota"]
		if row[0] != c.state {
			t.Errorf("%s prices, 15,000 units: state %q, want %q", c.prices, row[0], c.state)
		}
		for _, w := range c.words {
			if !strings.Contains(body, w) {
				t.Errorf("%s prices: the page lacks %q", c.prices, w)
			}
		}
	}
}
