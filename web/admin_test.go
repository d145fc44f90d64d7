package web

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"mailroom/queue/gmail"
	"mailroom/queue/sheets"
	"mailroom/store"
)

func TestAdminRequiresSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	w := request(t, e.h, http.MethodGet, "/admin/deadletters?type=x", nil, nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/login?next="+url.QueryEscape("/admin/deadletters?type=x") {
		t.Errorf("GET without session: %d Location %q", w.Code, w.Header().Get("Location"))
	}
	w = request(t, e.h, http.MethodGet, "/admin/overview.json", nil, nil)
	if w.Code != 401 || apiError(t, w).Code != "unauthorized" {
		t.Errorf("overview.json without session: %d", w.Code)
	}
	w = request(t, e.h, http.MethodGet, "/admin", nil, map[string]string{"Cookie": sessionCookie + "=forged"})
	if w.Code != http.StatusSeeOther {
		t.Errorf("forged cookie: %d", w.Code)
	}
	if w := request(t, e.h, http.MethodGet, "/", nil, nil); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin" {
		t.Errorf("root: %d %q", w.Code, w.Header().Get("Location"))
	}
}

func TestLogin(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newEnv(t, envOptions{deps: func(d *Deps) {
		d.PublicURL = "https://mail.example.com"
		d.Now = func() time.Time { return now }
	}})

	if w := request(t, e.h, http.MethodGet, "/admin/login", nil, nil); w.Code != 200 || !strings.Contains(w.Body.String(), `type="password"`) {
		t.Fatalf("login page: %d", w.Code)
	}
	w := postLogin(t, e.h, url.Values{"password": {"wrong"}}, nil)
	if w.Code != http.StatusUnauthorized || !strings.Contains(w.Body.String(), "not right") {
		t.Errorf("wrong password: %d", w.Code)
	}

	w = postLogin(t, e.h, url.Values{"password": {testPassword}, "next": {"/admin/tokens"}}, nil)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/tokens" {
		t.Fatalf("login: %d %q", w.Code, w.Header().Get("Location"))
	}
	var ck *http.Cookie
	for _, c := range w.Result().Cookies() {
		if c.Name == "__Host-"+sessionCookie {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || !ck.Secure || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" {
		t.Fatalf("session cookie = %+v", ck)
	}
	hdr := map[string]string{"Cookie": ck.Name + "=" + ck.Value}
	if w := request(t, e.h, http.MethodGet, "/admin", nil, hdr); w.Code != 200 {
		t.Errorf("overview with session: %d", w.Code)
	}

	// The session ends after its TTL.
	now = now.Add(13 * time.Hour)
	if w := request(t, e.h, http.MethodGet, "/admin", nil, hdr); w.Code != http.StatusSeeOther {
		t.Errorf("expired session: %d", w.Code)
	}
}

func TestLoginOpenRedirect(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"":                       "/admin",
		"/admin/tokens?x=1":      "/admin/tokens?x=1",
		"https://evil.example":   "/admin",
		"//evil.example/admin":   "/admin",
		`/\evil.example`:         "/admin",
		"admin":                  "/admin",
		"/%2F%2Fevil.example":    "/%2F%2Fevil.example",
		"javascript:alert(1)":    "/admin",
		"/admin/deadletters#top": "/admin/deadletters#top",
	} {
		if got := safeNext(next); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", next, got, want)
		}
	}
}

func TestLoginRateLimit(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.Now = func() time.Time { return now } }})
	wrong := url.Values{"password": {"guess"}}
	for i := range 5 {
		if w := postLogin(t, e.h, wrong, nil); w.Code != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i+1, w.Code)
		}
	}
	// Now even the right password is refused, with a clear message.
	w := postLogin(t, e.h, url.Values{"password": {testPassword}}, nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "Too many failed sign-ins") {
		t.Fatalf("6th attempt: %d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	// Another client is not affected.
	req := map[string]string{"X-Forwarded-For": "203.0.113.9"} // not trusted: same client
	if w := postLogin(t, e.h, url.Values{"password": {testPassword}}, req); w.Code != http.StatusTooManyRequests {
		t.Errorf("X-Forwarded-For from an untrusted peer must not escape the limit: %d", w.Code)
	}
	// The window slides.
	now = now.Add(61 * time.Second)
	if w := postLogin(t, e.h, url.Values{"password": {testPassword}}, nil); w.Code != http.StatusSeeOther {
		t.Errorf("after the window: %d", w.Code)
	}
}

func TestLoginWithStoredHash(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.AdminPassword = "" }})
	if w := request(t, e.h, http.MethodGet, "/admin/login", nil, nil); !strings.Contains(w.Body.String(), "No admin password is set") {
		t.Error("login page does not say no password is set")
	}
	generated, err := EnsureAdminPassword(e.db, "")
	if err != nil || len(generated) < 20 {
		t.Fatalf("EnsureAdminPassword: %q %v", generated, err)
	}
	if again, err := EnsureAdminPassword(e.db, ""); err != nil || again != "" {
		t.Errorf("second EnsureAdminPassword = %q %v, want nothing new", again, err)
	}
	if w := postLogin(t, e.h, url.Values{"password": {generated}}, nil); w.Code != http.StatusSeeOther {
		t.Errorf("login with generated password: %d", w.Code)
	}
	if _, err := EnsureAdminPassword(e.db, "chosen-password"); err != nil {
		t.Fatal(err)
	}
	if w := postLogin(t, e.h, url.Values{"password": {generated}}, nil); w.Code != http.StatusUnauthorized {
		t.Errorf("old password after change: %d", w.Code)
	}
	if w := postLogin(t, e.h, url.Values{"password": {"chosen-password"}}, nil); w.Code != http.StatusSeeOther {
		t.Errorf("chosen password: %d", w.Code)
	}
	if _, err := EnsureAdminPassword(e.db, strings.Repeat("x", 73)); err == nil {
		t.Error("a password over 72 bytes was accepted")
	}
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: true})
	s := login(t, e.h)
	id := seedDeadLetter(t, e.db, gmail.TypeSync, "gmail-sync", `{}`, "boom")
	posts := []struct {
		path string
		form url.Values
	}{
		{"/admin/tokens", url.Values{"name": {"x"}}},
		{"/admin/tokens/abc/revoke", nil},
		{"/admin/deadletters/" + id + "/redrive", nil},
		{"/admin/deadletters/" + id + "/discard", nil},
		{"/admin/deadletters/redrive", url.Values{"type": {gmail.TypeSync}}},
		{"/admin/logout", nil},
	}
	for _, p := range posts {
		for name, token := range map[string]string{"missing": "", "wrong": "not-the-token", "other session's": otherSessionCSRF(t, e.db)} {
			form := url.Values{}
			for k, v := range p.form {
				form[k] = v
			}
			if token != "" {
				form.Set("csrf", token)
			}
			w := request(t, e.h, http.MethodPost, p.path, form, s.headers())
			if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "out of date") {
				t.Errorf("POST %s with %s CSRF token: %d", p.path, name, w.Code)
			}
		}
	}
	if ids := deadLetterIDs(t, e.q); len(ids) != 1 {
		t.Errorf("a refused form changed the archive: %v", ids)
	}
	// The header works too (for fetch calls).
	hdr := s.headers()
	hdr[csrfHeader] = s.csrf
	if w := request(t, e.h, http.MethodPost, "/admin/deadletters/"+id+"/discard", nil, hdr); w.Code != http.StatusSeeOther {
		t.Errorf("discard with CSRF header: %d", w.Code)
	}
	// An oversized form is 413, not a silent 403.
	big := url.Values{"csrf": {s.csrf}, "name": {strings.Repeat("x", maxBodyBytes)}}
	if w := request(t, e.h, http.MethodPost, "/admin/tokens", big, s.headers()); w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized form: %d", w.Code)
	}
}

// otherSessionCSRF stores a second live session (another browser's) and
// returns its CSRF token.
func otherSessionCSRF(t *testing.T, db *store.DB) string {
	t.Helper()
	csrf := randomToken(32)
	err := db.Update(func(tx *store.Tx) error {
		return tx.SessionPut(randomToken(32), store.Session{CSRF: csrf, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	return csrf
}

func TestTokensFlow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.APIToken = "" }})
	s := login(t, e.h)
	if w := request(t, e.h, http.MethodGet, "/admin/tokens", nil, s.headers()); !strings.Contains(w.Body.String(), "No tokens yet") {
		t.Error("tokens page has no empty state")
	}
	w := request(t, e.h, http.MethodPost, "/admin/tokens", url.Values{"csrf": {s.csrf}, "name": {"  "}}, s.headers())
	if w.Code != http.StatusBadRequest {
		t.Errorf("empty name: %d", w.Code)
	}
	w = request(t, e.h, http.MethodPost, "/admin/tokens", url.Values{"csrf": {s.csrf}, "name": {"nightly report"}}, s.headers())
	if w.Code != http.StatusCreated {
		t.Fatalf("create token: %d %s", w.Code, w.Body.String())
	}
	m := tokenValue.FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatal("the new token is not shown")
	}
	token := m[1]
	if w := request(t, e.h, http.MethodGet, "/api/v1/users", nil, bearer(token)); w.Code != 200 {
		t.Errorf("new token on the API: %d", w.Code)
	}
	page := request(t, e.h, http.MethodGet, "/admin/tokens", nil, s.headers()).Body.String()
	if strings.Contains(page, token) {
		t.Error("the token is shown again")
	}
	if !strings.Contains(page, "nightly report") || !strings.Contains(page, token[:8]+"…") || strings.Contains(page, ">never<") {
		t.Errorf("tokens list lacks name, prefix or last use")
	}
	var tokens []store.APIToken
	_ = e.db.View(func(tx *store.Tx) error { var err error; tokens, err = tx.APITokens(); return err })
	w = request(t, e.h, http.MethodPost, "/admin/tokens/"+tokens[0].ID+"/revoke", url.Values{"csrf": {s.csrf}}, s.headers())
	if w.Code != http.StatusSeeOther {
		t.Errorf("revoke: %d", w.Code)
	}
	if w := request(t, e.h, http.MethodGet, "/api/v1/users", nil, bearer(token)); w.Code != 401 {
		t.Errorf("revoked token on the API: %d", w.Code)
	}
}

var (
	tokenValue = regexp.MustCompile(`id="new-token"[^>]*value="(mr_[^"]+)"`)
	cssLink    = regexp.MustCompile(`href="(/static/app\.css\?v=[0-9a-f]+)"`)
)

func TestAdminDeadLetterPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: true})
	s := login(t, e.h)
	if w := request(t, e.h, http.MethodGet, "/admin/deadletters", nil, s.headers()); !strings.Contains(w.Body.String(), "No dead letters") {
		t.Error("no empty state")
	}
	id := seedDeadLetter(t, e.db, sheets.TypeFlush, "sheets-flush", `{"sheet":"s1","rows":[1,2]}`, "quota exhausted <b>")
	other := seedDeadLetter(t, e.db, gmail.TypeSync, "gmail-sync", `{}`, "gone")

	page := request(t, e.h, http.MethodGet, "/admin/deadletters?type=sheets:flush", nil, s.headers()).Body.String()
	if !strings.Contains(page, id) || strings.Contains(page, other) || !strings.Contains(page, "quota exhausted &lt;b&gt;") || !strings.Contains(page, "Redrive all of sheets:flush") {
		t.Errorf("filtered list page wrong:\n%s", page)
	}
	w := request(t, e.h, http.MethodGet, "/admin/deadletters/"+id, nil, s.headers())
	if w.Code != 200 || !strings.Contains(w.Body.String(), "&#34;rows&#34;: [\n    1,") {
		t.Errorf("detail: %d, payload not pretty:\n%s", w.Code, w.Body.String())
	}
	if w := request(t, e.h, http.MethodGet, "/admin/deadletters/0000000000000fff", nil, s.headers()); w.Code != 404 || !strings.Contains(w.Body.String(), "Not found") {
		t.Errorf("unknown detail: %d", w.Code)
	}
	w = request(t, e.h, http.MethodPost, "/admin/deadletters/"+id+"/redrive", url.Values{"csrf": {s.csrf}}, s.headers())
	if w.Code != http.StatusSeeOther {
		t.Fatalf("redrive: %d", w.Code)
	}
	// The flash appears on the next page, once.
	flashHdr := s.withFlash(w)
	if page := request(t, e.h, http.MethodGet, "/admin/deadletters", nil, flashHdr).Body.String(); !strings.Contains(page, "is queued again") {
		t.Error("no flash after redrive")
	}
	w = request(t, e.h, http.MethodPost, "/admin/deadletters/redrive", url.Values{"csrf": {s.csrf}, "type": {gmail.TypeSync}}, s.headers())
	if w.Code != http.StatusSeeOther {
		t.Errorf("redrive type: %d", w.Code)
	}
	if ids := deadLetterIDs(t, e.q); len(ids) != 0 {
		t.Errorf("archive holds %v", ids)
	}
}

func TestOverview(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{queue: true, deps: func(d *Deps) { d.Demo = true }})
	s := login(t, e.h)
	page := request(t, e.h, http.MethodGet, "/admin", nil, s.headers()).Body.String()
	for _, q := range e.q.Table().Queues() {
		if !strings.Contains(page, `data-queue="`+q.Name+`"`) {
			t.Errorf("overview lacks queue %s", q.Name)
		}
	}
	if !strings.Contains(page, "simulated Google") || !strings.Contains(page, "<svg class=\"spark\"") {
		t.Error("overview lacks the demo banner or the charts")
	}
	w := request(t, e.h, http.MethodGet, "/admin/overview.json", nil, s.headers())
	v := decode[overviewView](t, w)
	if !v.Running || len(v.Queues) != len(e.q.Table().Queues()) || v.Queues[0].Spark == "" || v.Totals.Workers == 0 {
		t.Errorf("overview.json = %+v", v)
	}

	empty := newEnv(t, envOptions{})
	s = login(t, empty.h)
	if page := request(t, empty.h, http.MethodGet, "/admin", nil, s.headers()).Body.String(); !strings.Contains(page, "not running") {
		t.Error("no empty state without a queue")
	}
}

func TestStaticCaching(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	s := login(t, e.h)
	page := request(t, e.h, http.MethodGet, "/admin", nil, s.headers()).Body.String()
	m := cssLink.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no versioned stylesheet link")
	}
	w := request(t, e.h, http.MethodGet, m[1], nil, nil)
	if w.Code != 200 || !strings.Contains(w.Header().Get("Cache-Control"), "immutable") || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/css") {
		t.Errorf("versioned css: %d %q %q", w.Code, w.Header().Get("Cache-Control"), w.Header().Get("Content-Type"))
	}
	etag := w.Header().Get("ETag")
	w = request(t, e.h, http.MethodGet, "/static/app.css", nil, map[string]string{"If-None-Match": etag})
	if w.Code != http.StatusNotModified || w.Header().Get("Cache-Control") != "public, max-age=300" {
		t.Errorf("revalidation: %d %q", w.Code, w.Header().Get("Cache-Control"))
	}
	if w := request(t, e.h, http.MethodGet, "/static/nope.css", nil, nil); w.Code != 404 {
		t.Errorf("missing static: %d", w.Code)
	}
}

// panickingDebug is a DebugTasks that panics: a programmer error in a
// handler is the contract's 500, never a crash.
type panickingDebug struct{}

func (panickingDebug) EnqueueDebug(int, string, int) (int, error) { panic("programmer error") }

func TestRecoveryAndOptionalRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.DebugTasks = panickingDebug{} }})
	w := request(t, e.h, http.MethodPost, "/api/v1/debug/tasks", `{"count":1}`, bearer(testAPIToken))
	if w.Code != 500 || apiError(t, w).Code != "internal" {
		t.Errorf("panic: %d %s", w.Code, w.Body.String())
	}
	// Without the pipelines their routes do not exist.
	for _, path := range []string{"/push/gmail", "/api/v1/forms", "/api/v1/accounts"} {
		if w := request(t, e.h, http.MethodPost, path, `{}`, bearer(testAPIToken)); w.Code != 404 || apiError(t, w).Code != "not_found" {
			t.Errorf("POST %s without its pipeline: %d", path, w.Code)
		}
	}
	s := login(t, e.h)
	w = request(t, e.h, http.MethodGet, "/admin", nil, s.headers())
	for _, absent := range []string{`href="/admin/rules"`, `href="/admin/accounts"`, `href="/admin/setup"`} {
		if strings.Contains(w.Body.String(), absent) {
			t.Errorf("nav links %s without its pipeline", absent)
		}
	}
}
