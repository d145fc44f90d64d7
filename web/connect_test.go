package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"mailroom/store"
)

const testConnectRedirect = "https://app.example/after-gmail"

// linkFlow walks a connect link by hand, as a browser would, without
// following redirects: mailroom's link, Google's consent (the emulator),
// mailroom's callback. It returns where mailroom sends the browser last,
// and the consent request mailroom made (nil when it sent none).
type linkFlow struct {
	t  *testing.T
	se *secEnv
	// noFollow reaches the emulator.
	noFollow *http.Client
}

func newLinkFlow(t *testing.T, se *secEnv) *linkFlow {
	return &linkFlow{t: t, se: se, noFollow: &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// create asks for a link with body as token and returns its URL.
func (f *linkFlow) create(token, uid, body string) string {
	f.t.Helper()
	w := request(f.t, f.se.h, http.MethodPost, "/api/v1/users/"+uid+"/connect", body, bearer(token))
	if w.Code != http.StatusCreated {
		f.t.Fatalf("create link: %d %s", w.Code, w.Body.String())
	}
	v := decode[struct {
		URL       string    `json:"url"`
		ExpiresAt time.Time `json:"expiresAt"`
	}](f.t, w)
	if d := v.ExpiresAt.Sub(f.se.clock.Now()); d < 14*time.Minute || d > 16*time.Minute {
		f.t.Errorf("expiresAt in %v, want 15 minutes", d)
	}
	return v.URL
}

// follow opens a mailroom URL (absolute or a path) and returns the
// redirect's Location, failing unless the answer is a redirect.
func (f *linkFlow) follow(raw string, headers map[string]string) *url.URL {
	f.t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		f.t.Fatal(err)
	}
	w := request(f.t, f.se.h, http.MethodGet, u.RequestURI(), nil, headers)
	return location(f.t, w)
}

func location(t *testing.T, w *httptest.ResponseRecorder) *url.URL {
	t.Helper()
	if w.Code != http.StatusFound && w.Code != http.StatusSeeOther {
		t.Fatalf("want a redirect, got %d: %.300s", w.Code, w.Body.String())
	}
	loc, err := url.Parse(w.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// google follows the consent URL at the emulator and returns its
// redirect (to mailroom's callback).
func (f *linkFlow) google(consent *url.URL) *url.URL {
	f.t.Helper()
	resp, err := f.noFollow.Get(consent.String())
	if err != nil {
		f.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		f.t.Fatalf("consent at Google: %s", resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		f.t.Fatal(err)
	}
	return loc
}

// continuePage GETs a link's page and returns its continue form's token
// and the connect cookie that goes with it.
func (f *linkFlow) continuePage(linkURL string) (form url.Values, cookie string) {
	f.t.Helper()
	u, err := url.Parse(linkURL)
	if err != nil {
		f.t.Fatal(err)
	}
	w := request(f.t, f.se.h, http.MethodGet, u.RequestURI(), nil, nil)
	m := formCSRF.FindStringSubmatch(w.Body.String())
	if w.Code != http.StatusOK || m == nil || !strings.Contains(w.Body.String(), `action="`+u.Path+`"`) {
		f.t.Fatalf("GET %s: %d, want the page with its continue form: %.300s", u.Path, w.Code, w.Body.String())
	}
	for _, ck := range w.Result().Cookies() {
		if strings.HasSuffix(ck.Name, "mailroom_connect") {
			return url.Values{"csrf": {m[1]}}, ck.Name + "=" + ck.Value
		}
	}
	f.t.Fatalf("GET %s set no connect cookie", u.Path)
	return nil, ""
}

var formCSRF = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// post POSTs a link's continue form with cookie (none when empty).
func (f *linkFlow) post(linkURL string, form url.Values, cookie string) *httptest.ResponseRecorder {
	f.t.Helper()
	u, err := url.Parse(linkURL)
	if err != nil {
		f.t.Fatal(err)
	}
	var h map[string]string
	if cookie != "" {
		h = map[string]string{"Cookie": cookie}
	}
	return request(f.t, f.se.h, http.MethodPost, u.RequestURI(), form, h)
}

// open walks a link's page and its continue button, as a person does:
// the redirect to Google's consent.
func (f *linkFlow) open(linkURL string) *url.URL {
	f.t.Helper()
	form, cookie := f.continuePage(linkURL)
	return location(f.t, f.post(linkURL, form, cookie))
}

// run makes a link and walks it to the end: the final redirect.
func (f *linkFlow) run(linkURL string) *url.URL {
	f.t.Helper()
	consent := f.open(linkURL)
	return f.follow(f.google(consent).String(), nil)
}

func wantBack(t *testing.T, got *url.URL, status, errCode, state string) url.Values {
	t.Helper()
	q := got.Query()
	base := *got
	base.RawQuery = ""
	if base.String() != testConnectRedirect || q.Get("status") != status || q.Get("error") != errCode || q.Get("state") != state {
		t.Fatalf("back at %s, want %s?status=%s&error=%s&state=%s", got, testConnectRedirect, status, errCode, state)
	}
	return q
}

// TestConnectLinkFlow: a link made with an admin token (or the user's own)
// sends the browser to Google with PKCE S256, offline access, the Gmail
// scope, the login_hint and a state that is not the link; back from
// consent, the account is connected and the browser returns to the
// redirect URI with status, accountId and the echoed state. The link then
// answers expired_link, and Google's redirect cannot be replayed.
func TestConnectLinkFlow(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	const addr = "alice.mail@example.com"
	se.fake.AddAccount(addr)
	f := newLinkFlow(t, se)
	link := f.create(se.alice.token, se.alice.user, `{"redirectUri":"`+testConnectRedirect+`","state":"xyz 1","email":"`+addr+`"}`)
	consent := f.open(link)
	q := consent.Query()
	token := link[strings.LastIndex(link, "/")+1:]
	switch {
	case !strings.HasPrefix(consent.String(), se.fake.URL()):
		t.Fatalf("the link went to %s, not Google", consent)
	case q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43:
		t.Errorf("no S256 challenge: %v", q)
	case q.Get("access_type") != "offline" || !strings.Contains(q.Get("scope"), "https://www.googleapis.com/auth/gmail.modify"):
		t.Errorf("access_type/scope: %v", q)
	case q.Get("login_hint") != addr:
		t.Errorf("login_hint %q", q.Get("login_hint"))
	case q.Get("state") == "" || q.Get("state") == token || strings.Contains(q.Get("state"), "xyz"):
		t.Errorf("state %q: want a fresh value, not the link's token or the caller's state", q.Get("state"))
	}
	callback := f.google(consent)
	back := wantBack(t, f.follow(callback.String(), nil), "connected", "", "xyz 1")
	w := request(t, se.h, http.MethodGet, "/api/v1/accounts/"+back.Get("accountId"), nil, bearer(se.alice.token))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"email":"`+addr+`"`) || !strings.Contains(w.Body.String(), `"userId":"`+se.alice.user+`"`) {
		t.Fatalf("the connected account: %d %s", w.Code, w.Body.String())
	}
	// Used: the link answers expired_link (its page and its button), and
	// Google's redirect again is not a link any more (nowhere to return: a
	// page, never a 500).
	wantBack(t, f.follow(link, nil), "error", "expired_link", "xyz 1")
	wantBack(t, location(t, f.post(link, nil, "")), "error", "expired_link", "xyz 1")
	if w := request(t, se.h, http.MethodGet, callback.RequestURI(), nil, nil); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "not valid") {
		t.Errorf("replayed callback: %d %.200s", w.Code, w.Body.String())
	}
	// An unknown link: a page saying so.
	if w := request(t, se.h, http.MethodGet, "/connect/cl_nope", nil, nil); w.Code != http.StatusBadRequest {
		t.Errorf("unknown link: %d", w.Code)
	}
	// The link's token and the PKCE verifier are not in the store as such.
	_ = se.db.View(func(tx *store.Tx) error {
		l, err := tx.ConnectLinkGet(store.ConnectLinkKey(token))
		if err != nil || l.Result != "connected" || l.AccountID != back.Get("accountId") || len(l.Verifier) == 0 {
			t.Errorf("stored link %+v, %v", l, err)
		}
		return nil
	})
	// The admin token makes links for any user.
	f.create(se.adminToken, se.bob.user, `{"redirectUri":"`+testConnectRedirect+`"}`)
}

// TestConnectLinkRefusals: a redirect not on the list, a bad email or
// state, another user's id with a user token, an unknown user; then at
// Google: consent refused (denied), another address than the link's
// (wrong_user), Google's own error (google_error); a consent that took
// over 10 minutes, and a link followed after 15 minutes (expired_link).
func TestConnectLinkRefusals(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	f := newLinkFlow(t, se)
	for _, tc := range []struct {
		name, token, uid, body string
		status                 int
		field                  string
	}{
		{"redirect not listed", se.alice.token, se.alice.user, `{"redirectUri":"https://evil.example/"}`, 400, "redirectUri"},
		{"redirect not exact", se.alice.token, se.alice.user, `{"redirectUri":"` + testConnectRedirect + `/"}`, 400, "redirectUri"},
		{"no redirect", se.alice.token, se.alice.user, `{}`, 400, "redirectUri"},
		{"bad email", se.alice.token, se.alice.user, `{"redirectUri":"` + testConnectRedirect + `","email":"not an address"}`, 400, "email"},
		{"long state", se.alice.token, se.alice.user, `{"redirectUri":"` + testConnectRedirect + `","state":"` + strings.Repeat("s", 513) + `"}`, 400, "state"},
		{"another user's id", se.bob.token, se.alice.user, `{"redirectUri":"` + testConnectRedirect + `"}`, 404, ""},
		{"unknown user", se.adminToken, "0000000000000001", `{"redirectUri":"` + testConnectRedirect + `"}`, 404, "uid"},
	} {
		w := request(t, se.h, http.MethodPost, "/api/v1/users/"+tc.uid+"/connect", tc.body, bearer(tc.token))
		if w.Code != tc.status {
			t.Errorf("%s: %d, want %d: %s", tc.name, w.Code, tc.status, w.Body.String())
			continue
		}
		if e := apiError(t, w); e.Field != tc.field {
			t.Errorf("%s: field %q, want %q", tc.name, e.Field, tc.field)
		}
	}
	body := `{"redirectUri":"` + testConnectRedirect + `","state":"s1","email":"carol@example.com"}`
	se.fake.AddAccount("carol@example.com")

	se.fake.DenyConsent(true)
	wantBack(t, f.run(f.create(se.alice.token, se.alice.user, body)), "error", "denied", "s1")
	se.fake.DenyConsent(false)

	se.fake.SetConsentAs("mallory@example.com")
	wantBack(t, f.run(f.create(se.alice.token, se.alice.user, body)), "error", "wrong_user", "s1")
	se.fake.SetConsentAs("")
	// The grant Google gave for mallory is revoked, not left behind.
	if r := se.fake.Revocations(); len(r) != 1 || r[0].Email != "mallory@example.com" || !r[0].Refresh {
		t.Errorf("revocations after wrong_user: %+v, want mallory's refresh token", r)
	}
	// An address connected here keeps its grant (revoking would cut its
	// account off).
	se.fake.AddAccount("alice@gmail.example")
	se.fake.SetConsentAs("alice@gmail.example")
	wantBack(t, f.run(f.create(se.alice.token, se.alice.user, body)), "error", "wrong_user", "s1")
	se.fake.SetConsentAs("")
	if r := se.fake.Revocations(); len(r) != 1 {
		t.Errorf("revocations after a wrong_user of a connected address: %+v, want mallory's only", r)
	}

	consent := f.open(f.create(se.alice.token, se.alice.user, body))
	cb := f.google(consent)
	q := cb.Query()
	q.Del("code")
	q.Set("error", "server_error")
	cb.RawQuery = q.Encode()
	wantBack(t, f.follow(cb.String(), nil), "error", "google_error", "s1")

	// Consent that takes over 10 minutes once the link is followed.
	cb = f.google(f.open(f.create(se.alice.token, se.alice.user, body)))
	se.clock.Advance(10 * time.Minute)
	wantBack(t, f.follow(cb.String(), nil), "error", "expired_link", "s1")

	link := f.create(se.alice.token, se.alice.user, body)
	form, cookie := f.continuePage(link)
	se.clock.Advance(15*time.Minute + time.Second)
	wantBack(t, f.follow(link, nil), "error", "expired_link", "s1")
	wantBack(t, location(t, f.post(link, form, cookie)), "error", "expired_link", "s1")

	var accs int
	_ = se.db.View(func(tx *store.Tx) error {
		list, err := tx.Accounts()
		for _, a := range list {
			if a.UserID == se.alice.user && a.Email != "alice@gmail.example" {
				accs++
			}
		}
		return err
	})
	if accs != 0 {
		t.Errorf("%d accounts connected through refused links", accs)
	}
}

// TestAdminConnectIsAPostWithCSRF: the admin page's connect starts with a
// POST that carries the session's CSRF token (a GET, or a POST from
// another site, does nothing), and finishes only in the session that
// started it: a callback without that session (none, or another admin's)
// is refused and leaves the link for the admin's own callback.
func TestAdminConnectIsAPostWithCSRF(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	se.fake.SetConsentAccount("dora@example.com")
	f := newLinkFlow(t, se)
	s := login(t, se.h)
	if w := request(t, se.h, http.MethodGet, "/oauth/google/start?userId="+se.alice.user, nil, s.headers()); w.Code == http.StatusFound || w.Code == http.StatusSeeOther {
		t.Fatalf("GET /oauth/google/start still redirects to Google: %d %s", w.Code, w.Header().Get("Location"))
	}
	if w := request(t, se.h, http.MethodPost, "/oauth/google/start", url.Values{"userId": {se.alice.user}}, s.headers()); w.Code != http.StatusForbidden {
		t.Fatalf("POST without CSRF: %d, want 403", w.Code)
	}
	start := func(sess session) *url.URL {
		w := request(t, se.h, http.MethodPost, "/oauth/google/start", url.Values{"userId": {se.alice.user}, "csrf": {sess.csrf}}, sess.headers())
		return location(t, w)
	}
	cb := f.google(start(s))
	// No session: a page saying the link is not valid.
	if w := request(t, se.h, http.MethodGet, cb.RequestURI(), nil, nil); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "not valid") {
		t.Fatalf("callback without a session: %d %.300s", w.Code, w.Body.String())
	}
	// Another session: back to its Accounts page.
	other := login(t, se.h)
	if w := request(t, se.h, http.MethodGet, cb.RequestURI(), nil, other.headers()); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/accounts" {
		t.Fatalf("callback in another session: %d %s", w.Code, w.Header().Get("Location"))
	}
	// Neither used the link up: the admin's own callback connects.
	loc := location(t, request(t, se.h, http.MethodGet, cb.RequestURI(), nil, s.headers()))
	if !strings.HasPrefix(loc.Path, "/admin/accounts/") {
		t.Fatalf("the starting session's callback after the others' tries: %s", loc)
	}
	w := request(t, se.h, http.MethodGet, "/api/v1/accounts/"+strings.TrimPrefix(loc.Path, "/admin/accounts/"), nil, bearer(se.alice.token))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "dora@example.com") {
		t.Fatalf("the connected account: %d %s", w.Code, w.Body.String())
	}
	// Then it is used.
	if w := request(t, se.h, http.MethodGet, cb.RequestURI(), nil, s.headers()); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/accounts" {
		t.Fatalf("callback again: %d %s", w.Code, w.Header().Get("Location"))
	}
}

// TestConnectLinkPageUsesNothingUp: GET /connect/{token} is a page with a
// continue button; GETs (a chat app's link preview, the person reloading)
// leave the link usable, and only the button's POST, with the form token
// and the cookie of the browser that was shown the page, goes to Google.
// A POST without them, or with another link's, draws the page again. The
// button pressed twice is fine: only the latest consent's callback
// finishes the link.
func TestConnectLinkPageUsesNothingUp(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	const addr = "erin@example.com"
	se.fake.AddAccount(addr)
	f := newLinkFlow(t, se)
	body := `{"redirectUri":"` + testConnectRedirect + `","state":"p","email":"` + addr + `"}`
	link := f.create(se.alice.token, se.alice.user, body)
	other := f.create(se.alice.token, se.alice.user, body)

	// Two previews, without cookies.
	for range 2 {
		w := request(t, se.h, http.MethodGet, link[strings.Index(link, "/connect/"):], nil, nil)
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "Continue to Google") || w.Header().Get("Location") != "" {
			t.Fatalf("GET the link: %d %s %.300s", w.Code, w.Header().Get("Location"), w.Body.String())
		}
	}
	form, cookie := f.continuePage(link)
	otherForm, _ := f.continuePage(other)
	for name, tc := range map[string]struct {
		form   url.Values
		cookie string
	}{
		"no cookie":          {form, ""},
		"no form token":      {nil, cookie},
		"another link's":     {otherForm, cookie},
		"a cookie not given": {form, strings.SplitN(cookie, "=", 2)[0] + "=" + strings.Repeat("A", connectCookieLen)},
	} {
		w := f.post(link, tc.form, tc.cookie)
		if w.Code != http.StatusForbidden || w.Header().Get("Location") != "" || !strings.Contains(w.Body.String(), "out of date") || !formCSRF.MatchString(w.Body.String()) {
			t.Errorf("POST with %s: %d %s, want the page again (403)", name, w.Code, w.Header().Get("Location"))
		}
	}
	first := f.google(location(t, f.post(link, form, cookie)))
	consent := location(t, f.post(link, form, cookie))
	if !strings.HasPrefix(consent.String(), se.fake.URL()) {
		t.Fatalf("the button went to %s, not Google", consent)
	}
	// The first press's consent is stale, and leaves the link usable.
	if w := request(t, se.h, http.MethodGet, first.RequestURI(), nil, nil); w.Code != http.StatusBadRequest {
		t.Fatalf("the first press's callback: %d %s", w.Code, w.Header().Get("Location"))
	}
	wantBack(t, f.follow(f.google(consent).String(), nil), "connected", "", "p")
	wantBack(t, f.follow(link, nil), "error", "expired_link", "p")
}
