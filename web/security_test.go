package web

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker/brokertest"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/store"
)

const (
	pushAudience = "https://mail.example.com/push/gmail"
	pushSecret   = "push-shared-secret-for-the-tests-0123"
)

// tenant is one user's fixtures: an account with a message, a rule, a
// form, and a user token.
type tenant struct {
	user, account, rule, form, token string
}

// secEnv is the web handler with every pipeline wired (Gmail with the
// emulator's OIDC keys and a shared push token, rules, Sheets) and two
// users, Alice and Bob, each with their own resources and token.
type secEnv struct {
	*env
	fake       *googlefake.Server
	adminToken string
	alice, bob tenant
	clock      *testkit.Clock // the accounts service's (connect links)
}

type noSheets struct{}

func (noSheets) Sheets(context.Context, string) (sheets.SheetsClient, error) {
	return nil, errors.New("no Google Sheets in this test")
}

func newSecEnv(t *testing.T, more func(*Deps)) *secEnv {
	t.Helper()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	verifier, err := google.NewPushVerifier(context.Background(), google.PushVerifierConfig{
		CertsURL: fake.CertsURL(), Audience: pushAudience, ServiceAccount: googlefake.DefaultPushServiceAccount,
	})
	if err != nil {
		t.Fatal(err)
	}
	var rp *rules.Pipeline
	clock := &testkit.Clock{}
	e := newEnv(t, envOptions{queue: true, deps: func(d *Deps) {
		gc := google.New(google.Config{APIURL: fake.URL(), TokenURL: fake.TokenURL(), ClientID: "client-id", ClientSecret: "client-secret",
			RedirectURL: "https://mail.example.com/oauth/google/callback"})
		accts, err := accounts.New(accounts.Config{Now: clock.Now}, accounts.Deps{DB: d.DB, Google: gc})
		if err != nil {
			t.Fatal(err)
		}
		gp, err := gmail.New(gmail.Config{PushToken: pushSecret}, gmail.Deps{DB: d.DB, Accounts: accts, Queue: d.Queue, Verifier: verifier})
		if err != nil {
			t.Fatal(err)
		}
		b := brokertest.Embedded(t)
		rp, err = rules.New(rules.Config{}, rules.Deps{DB: d.DB, Broker: b.Client()})
		if err != nil {
			t.Fatal(err)
		}
		sp, err := sheets.New(sheets.Config{}, sheets.Deps{DB: d.DB, Queue: d.Queue, Broker: b.Client(), Clients: noSheets{}})
		if err != nil {
			t.Fatal(err)
		}
		d.Gmail, d.Rules, d.Forms = gp, rp, sp
		d.Connect, d.ConnectRedirectURIs = accts, []string{testConnectRedirect}
		d.GmailOptions = GmailOptions{PublicURL: "https://mail.example.com", PushAudience: pushAudience, PushToken: true}
		if more != nil {
			more(d)
		}
	}})
	se := &secEnv{env: e, fake: fake, adminToken: "mr_admin-made-token-0123456789", clock: clock}
	se.alice = se.addTenant(t, rp, "alice")
	se.bob = se.addTenant(t, rp, "bob")
	if err := e.db.Update(func(tx *store.Tx) error {
		_, err := tx.APITokenCreate("admin", se.adminToken, "", time.Time{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return se
}

func (se *secEnv) addTenant(t *testing.T, rp *rules.Pipeline, name string) tenant {
	t.Helper()
	var tn tenant
	tn.token = "mr_user-token-of-" + name
	err := se.db.Update(func(tx *store.Tx) error {
		u, err := tx.UserCreate(name+"@example.com", name)
		if err != nil {
			return err
		}
		tn.user = u.ID
		acc := store.Account{ID: store.NewID(), UserID: u.ID, Email: name + "@gmail.example", Status: store.AccountReady}
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		tn.account = acc.ID
		if err := tx.MessagePut(acc.ID, store.Message{ID: "m1", ThreadID: "t1", Fetched: true, Subject: "hello " + name}); err != nil {
			return err
		}
		f, err := tx.FormCreate(store.Form{UserID: u.ID, AccountID: acc.ID, SpreadsheetID: "sheet-" + name, Sheet: "Sheet1", Columns: []string{"name", "email"}})
		if err != nil {
			return err
		}
		tn.form = f.ID
		_, err = tx.APITokenCreate(name, tn.token, u.ID, time.Time{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	saved, err := rp.Create(context.Background(), tn.user, rules.Spec{Label: "L-" + name, Match: rules.MatchAll,
		Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@github.com"}}})
	if err != nil {
		t.Fatal(err)
	}
	tn.rule = saved.Rule.ID
	return tn
}

const ruleBody = `{"label":"New","match":"all","conditions":[{"field":"from","op":"contains","value":"x"}],"actions":{"markRead":false,"archive":false}}`

// TestTokenScopes is the table of (token kind × endpoint) → status: an
// admin token reaches everything; Alice's user token reaches her own
// resources, gets 404 for Bob's (as for ids that do not exist) and 403 for
// the admin-only endpoints.
func TestTokenScopes(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	a, b := se.alice, se.bob
	const skip = 0
	cases := []struct {
		method, path, body string
		admin, user        int // want, by token kind; skip: not sent with it
	}{
		// Admin only.
		{"GET", "/api/v1/users", "", 200, 403},
		{"POST", "/api/v1/users", `{"email":"new@example.com","name":"N"}`, 201, 403},
		{"GET", "/api/v1/tokens", "", 200, 403},
		{"POST", "/api/v1/tokens", `{"name":"x"}`, 201, 403},
		{"POST", "/api/v1/tokens", `{"name":"mine","userId":"` + a.user + `"}`, skip, 403},
		{"DELETE", "/api/v1/tokens/0000000000000fff", "", 404, 403},
		{"GET", "/api/v1/deadletters", "", 200, 403},
		{"GET", "/api/v1/deadletters/0000000000000fff", "", 404, 403},
		{"DELETE", "/api/v1/deadletters/0000000000000fff", "", 404, 403},
		{"POST", "/api/v1/deadletters/redrive", `{"ids":["0000000000000fff"]}`, 200, 403},
		{"GET", "/api/v1/queues", "", 200, 403},
		{"GET", "/api/v1/backup", "", 200, 403},
		// Her own resources.
		{"GET", "/api/v1/accounts", "", 200, 200},
		{"GET", "/api/v1/accounts/" + a.account, "", 200, 200},
		{"GET", "/api/v1/accounts/" + a.account + "/messages", "", 200, 200},
		{"GET", "/api/v1/accounts/" + a.account + "/messages/m1", "", 200, 200},
		{"POST", "/api/v1/accounts/" + a.account + "/resync", "", 202, 202},
		{"GET", "/api/v1/users/" + a.user + "/rules", "", 200, 200},
		{"POST", "/api/v1/users/" + a.user + "/rules", ruleBody, skip, 201},
		{"GET", "/api/v1/users/" + a.user + "/reclassify", "", 200, 200},
		{"GET", "/api/v1/rules/" + a.rule, "", 200, 200},
		{"GET", "/api/v1/forms", "", 200, 200},
		{"GET", "/api/v1/forms?userId=" + a.user, "", 200, 200},
		{"GET", "/api/v1/forms/" + a.form, "", 200, 200},
		{"POST", "/api/v1/forms/" + a.form + "/submissions", `{"answers":{"name":"Ann"}}`, 202, 202},
		// Bob's resources: 404 for her, as if they did not exist.
		{"GET", "/api/v1/accounts?userId=" + b.user, "", 200, 404},
		{"GET", "/api/v1/accounts/" + b.account, "", 200, 404},
		{"GET", "/api/v1/accounts/" + b.account + "/messages", "", 200, 404},
		{"GET", "/api/v1/accounts/" + b.account + "/messages/m1", "", 200, 404},
		{"POST", "/api/v1/accounts/" + b.account + "/resync", "", skip, 404},
		{"DELETE", "/api/v1/accounts/" + b.account, "", skip, 404},
		{"POST", "/api/v1/accounts", `{"userId":"` + b.user + `","email":"x@gmail.example","refreshToken":"r"}`, skip, 404},
		{"GET", "/api/v1/users/" + b.user + "/rules", "", 200, 404},
		{"POST", "/api/v1/users/" + b.user + "/rules", ruleBody, skip, 404},
		{"GET", "/api/v1/users/" + b.user + "/reclassify", "", 200, 404},
		{"GET", "/api/v1/rules/" + b.rule, "", 200, 404},
		{"PUT", "/api/v1/rules/" + b.rule, ruleBody, skip, 404},
		{"DELETE", "/api/v1/rules/" + b.rule, "", skip, 404},
		{"GET", "/api/v1/forms?userId=" + b.user, "", 200, 404},
		{"GET", "/api/v1/forms/" + b.form, "", 200, 404},
		{"DELETE", "/api/v1/forms/" + b.form, "", skip, 404},
		{"POST", "/api/v1/forms/" + b.form + "/submissions", `{"answers":{"name":"Eve"}}`, skip, 404},
		{"POST", "/api/v1/forms", `{"userId":"` + a.user + `","accountId":"` + b.account + `","spreadsheetId":"s","columns":["a"]}`, skip, 404},
		{"POST", "/api/v1/forms", `{"userId":"` + b.user + `","accountId":"` + b.account + `","spreadsheetId":"s","columns":["a"]}`, skip, 404},
	}
	for _, c := range cases {
		for _, k := range []struct {
			name  string
			token string
			want  int
		}{{"admin", se.adminToken, c.admin}, {"static admin", testAPIToken, c.admin}, {"user", a.token, c.user}} {
			if k.want == skip || (k.name == "static admin" && c.method != "GET") {
				continue
			}
			var body any
			if c.body != "" {
				body = c.body
			}
			w := request(t, se.h, c.method, c.path, body, bearer(k.token))
			if w.Code != k.want {
				t.Errorf("%s token: %s %s = %d, want %d; %s", k.name, c.method, c.path, w.Code, k.want, w.Body.String())
				continue
			}
			if w.Code >= 400 {
				got := apiError(t, w)
				if want := map[int]string{403: "forbidden", 404: "not_found"}[w.Code]; want != "" && got.Code != want {
					t.Errorf("%s token: %s %s code %q, want %q", k.name, c.method, c.path, got.Code, want)
				}
			}
		}
	}

	// Bob's things are all still there.
	for _, p := range []string{"/api/v1/accounts/" + b.account, "/api/v1/rules/" + b.rule, "/api/v1/forms/" + b.form} {
		if w := request(t, se.h, "GET", p, nil, bearer(se.adminToken)); w.Code != 200 {
			t.Errorf("after Alice's tries, %s = %d", p, w.Code)
		}
	}
	// Her lists hold only hers.
	w := request(t, se.h, "GET", "/api/v1/accounts", nil, bearer(a.token))
	if accs := decode[struct{ Accounts []gmail.AccountView }](t, w).Accounts; len(accs) != 1 || accs[0].ID != a.account {
		t.Errorf("Alice's account list = %+v", accs)
	}
	w = request(t, se.h, "GET", "/api/v1/forms", nil, bearer(a.token))
	if forms := decode[struct{ Forms []sheets.FormView }](t, w).Forms; len(forms) != 1 || forms[0].ID != a.form {
		t.Errorf("Alice's form list = %+v", forms)
	}
	// Another user's resource answers exactly what an unknown id does.
	for _, pair := range [][2]string{
		{"/api/v1/accounts/" + b.account, "/api/v1/accounts/0000000000000fff"},
		{"/api/v1/rules/" + b.rule, "/api/v1/rules/0000000000000fff"},
		{"/api/v1/forms/" + b.form, "/api/v1/forms/0000000000000fff"},
		{"/api/v1/users/" + b.user + "/rules", "/api/v1/users/0000000000000fff/rules"},
	} {
		theirs := request(t, se.h, "GET", pair[0], nil, bearer(a.token))
		none := request(t, se.h, "GET", pair[1], nil, bearer(a.token))
		if theirs.Code != none.Code || theirs.Body.String() != none.Body.String() {
			t.Errorf("%s tells itself apart from an unknown id: %d %s vs %d %s", pair[0], theirs.Code, theirs.Body, none.Code, none.Body)
		}
	}
}

// TestTokensAPI: the contract's shapes, expiry, last use and immediate
// revocation.
func TestTokensAPI(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	se := newSecEnv(t, func(d *Deps) { d.Now = clock })
	w := request(t, se.h, "POST", "/api/v1/tokens", `{"name":"alice script","userId":"`+se.alice.user+`","expiresIn":"1h"}`, bearer(se.adminToken))
	if w.Code != 201 {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	var made map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &made); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "name", "userId", "expiresAt", "token"} {
		if _, ok := made[k]; !ok {
			t.Errorf("create answer lacks %q: %s", k, w.Body)
		}
	}
	if len(made) != 5 || made["userId"] != se.alice.user || made["expiresAt"] != "2026-03-01T13:00:00Z" {
		t.Errorf("create answer = %s", w.Body)
	}
	token := made["token"].(string)
	if w := request(t, se.h, "GET", "/api/v1/users/"+se.alice.user+"/rules", nil, bearer(token)); w.Code != 200 {
		t.Errorf("new user token: %d", w.Code)
	}
	w = request(t, se.h, "GET", "/api/v1/tokens", nil, bearer(se.adminToken))
	var list struct {
		Tokens []map[string]any `json:"tokens"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tk := range list.Tokens {
		if _, secret := tk["token"]; secret || len(tk) != 6 {
			t.Errorf("listed token shape: %v", tk)
		}
		if tk["id"] == made["id"] {
			found = true
			if tk["lastUsedAt"] != "2026-03-01T12:00:00Z" || tk["createdAt"] == nil || tk["expiresAt"] != "2026-03-01T13:00:00Z" {
				t.Errorf("listed token = %v", tk)
			}
		}
		if tk["name"] == "admin" && (tk["userId"] != nil || tk["expiresAt"] != nil) {
			t.Errorf("admin token listed as %v, want userId and expiresAt null", tk)
		}
	}
	if !found {
		t.Fatalf("the new token is not listed: %s", w.Body)
	}
	// Expiry.
	mu.Lock()
	now = now.Add(time.Hour)
	mu.Unlock()
	if w := request(t, se.h, "GET", "/api/v1/users/"+se.alice.user+"/rules", nil, bearer(token)); w.Code != 401 {
		t.Errorf("expired token: %d", w.Code)
	}
	// Revocation takes effect at once.
	if w := request(t, se.h, "GET", "/api/v1/accounts", nil, bearer(se.alice.token)); w.Code != 200 {
		t.Fatalf("alice before revocation: %d", w.Code)
	}
	var aliceID string
	for _, tk := range list.Tokens {
		if tk["name"] == "alice" {
			aliceID = tk["id"].(string)
		}
	}
	if w := request(t, se.h, "DELETE", "/api/v1/tokens/"+aliceID, nil, bearer(se.adminToken)); w.Code != 204 {
		t.Fatalf("revoke: %d %s", w.Code, w.Body)
	}
	if w := request(t, se.h, "GET", "/api/v1/accounts", nil, bearer(se.alice.token)); w.Code != 401 {
		t.Errorf("revoked token: %d", w.Code)
	}
	if w := request(t, se.h, "DELETE", "/api/v1/tokens/"+aliceID, nil, bearer(se.adminToken)); w.Code != 404 {
		t.Errorf("revoke twice: %d", w.Code)
	}
}

// TestAdminPageMakesUserTokens: the API tokens screen makes a user token
// for the chosen user and shows its secret once.
func TestAdminPageMakesUserTokens(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	s := login(t, se.h)
	page := request(t, se.h, "GET", "/admin/tokens", nil, s.headers()).Body.String()
	if !strings.Contains(page, `<option value="`+se.bob.user+`">User: bob@example.com</option>`) {
		t.Fatalf("the users are not offered:\n%s", page)
	}
	w := request(t, se.h, "POST", "/admin/tokens", url.Values{"csrf": {s.csrf}, "name": {"bob's app"}, "userId": {se.bob.user}, "expiresIn": {"720h"}}, s.headers())
	if w.Code != 201 || !strings.Contains(w.Body.String(), "A user token of bob@example.com") {
		t.Fatalf("create: %d\n%s", w.Code, w.Body)
	}
	m := tokenValue.FindStringSubmatch(w.Body.String())
	if m == nil {
		t.Fatal("the new token is not shown")
	}
	if w := request(t, se.h, "GET", "/api/v1/users/"+se.bob.user+"/rules", nil, bearer(m[1])); w.Code != 200 {
		t.Errorf("bob's new token on his rules: %d", w.Code)
	}
	if w := request(t, se.h, "GET", "/api/v1/users/"+se.alice.user+"/rules", nil, bearer(m[1])); w.Code != 404 {
		t.Errorf("bob's new token on alice's rules: %d", w.Code)
	}
	if w := request(t, se.h, "GET", "/api/v1/queues", nil, bearer(m[1])); w.Code != 403 {
		t.Errorf("bob's new token on the queues: %d", w.Code)
	}
	page = request(t, se.h, "GET", "/admin/tokens", nil, s.headers()).Body.String()
	if strings.Contains(page, m[1]) || !strings.Contains(page, "user bob@example.com") {
		t.Error("the list shows the secret again, or not whose token it is")
	}
	w = request(t, se.h, "POST", "/admin/tokens", url.Values{"csrf": {s.csrf}, "name": {"x"}, "userId": {"nobody"}}, s.headers())
	if w.Code != 404 || !strings.Contains(w.Body.String(), "There is no such user.") {
		t.Errorf("token for an unknown user: %d", w.Code)
	}
}

// requestFrom is request from the client address ip.
func requestFrom(t testing.TB, h http.Handler, ip, method, path string, body any, headers map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	hdr := map[string]string{"X-Test-Remote": ip}
	for k, v := range headers {
		hdr[k] = v
	}
	return request(t, remoteAddr{h}, method, path, body, hdr)
}

// remoteAddr sets the peer address from X-Test-Remote.
type remoteAddr struct{ h http.Handler }

func (r remoteAddr) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if ip := req.Header.Get("X-Test-Remote"); ip != "" {
		req.RemoteAddr = ip + ":40000"
		req.Header.Del("X-Test-Remote")
	}
	r.h.ServeHTTP(w, req)
}

// loginFrom posts the login form from ip with password (and the extra
// cookie header, if any).
func loginFrom(t testing.TB, h http.Handler, ip, password, cookie string) *httptest.ResponseRecorder {
	t.Helper()
	hdr := map[string]string{"X-Test-Remote": ip}
	if cookie != "" {
		hdr["Cookie"] = cookie
	}
	return postLogin(t, remoteAddr{h}, url.Values{"password": {password}}, hdr)
}

// TestLoginParallelGuesses: 100 wrong passwords at once from one address
// get 429s (the attempt is counted before the check, so only the limit's
// worth reach bcrypt), and the right password from another address still
// signs in.
func TestLoginParallelGuesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.AdminPassword = "" }})
	if _, err := EnsureAdminPassword(e.db, testPassword); err != nil { // a bcrypt hash, as in production
		t.Fatal(err)
	}
	// The forms first, so the 100 posts race only each other.
	type form struct{ cookie, csrf string }
	forms := make([]form, 100)
	for i := range forms {
		forms[i].cookie, forms[i].csrf = loginForm(t, e.h, nil)
	}
	codes := make([]int, len(forms))
	var wg sync.WaitGroup
	start := time.Now()
	for i, f := range forms {
		wg.Go(func() {
			w := request(t, remoteAddr{e.h}, "POST", "/admin/login", url.Values{"password": {"guess"}, "csrf": {f.csrf}},
				map[string]string{"Cookie": f.cookie, "X-Test-Remote": "198.51.100.7"})
			codes[i] = w.Code
		})
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[401] != 5 || count[429] != 95 {
		t.Errorf("100 parallel wrong passwords: %v, want 5 × 401 and 95 × 429", count)
	}
	t.Logf("100 parallel guesses answered in %s", time.Since(start))
	if w := loginFrom(t, e.h, "198.51.100.7", testPassword, ""); w.Code != 429 {
		t.Errorf("right password from the guessing address: %d, want 429", w.Code)
	}
	if w := loginFrom(t, e.h, "203.0.113.50", testPassword, ""); w.Code != http.StatusSeeOther {
		t.Errorf("right password from another address: %d, want 303", w.Code)
	}
}

// TestLoginAccountCeiling: guesses spread over many addresses stop at the
// account-wide ceiling; a browser that signed in before still can.
func TestLoginAccountCeiling(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.LoginLimit, d.LoginAccountLimit = 3, 10 }})
	w := loginFrom(t, e.h, "192.0.2.200", testPassword, "")
	var device string
	for _, c := range w.Result().Cookies() {
		if c.Name == "mailroom_device" {
			device = c.Name + "=" + c.Value
		}
	}
	if w.Code != http.StatusSeeOther || device == "" {
		t.Fatalf("first sign-in: %d, device cookie %q", w.Code, device)
	}
	for i := range 10 { // ten addresses, one guess each: none reaches its own limit
		if w := loginFrom(t, e.h, fmt.Sprintf("10.0.0.%d", i+1), "guess", ""); w.Code != 401 {
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	if w := loginFrom(t, e.h, "10.0.1.1", "guess", ""); w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Errorf("a guess past the ceiling from a new address: %d", w.Code)
	}
	if w := loginFrom(t, e.h, "10.0.1.2", testPassword, ""); w.Code != 429 {
		t.Errorf("right password from an unknown browser past the ceiling: %d, want 429", w.Code)
	}
	if w := loginFrom(t, e.h, "10.0.1.3", testPassword, device); w.Code != http.StatusSeeOther {
		t.Errorf("right password from a known browser past the ceiling: %d, want 303", w.Code)
	}
	forged := "mailroom_device=abc." + base64.RawURLEncoding.EncodeToString(hmac.New(sha256.New, []byte("guess")).Sum(nil))
	if w := loginFrom(t, e.h, "10.0.1.4", testPassword, forged); w.Code != 429 {
		t.Errorf("a forged device cookie: %d, want 429", w.Code)
	}
}

// TestEndSessionsForgetsKnownBrowsers: "End all sessions" also ends the
// known-browser marks: a browser that signed in before no longer passes
// the account-wide sign-in ceiling (a copied mark shut out with the
// sessions stays out).
func TestEndSessionsForgetsKnownBrowsers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.LoginLimit, d.LoginAccountLimit = 3, 4 }})
	w := loginFrom(t, e.h, "192.0.2.210", testPassword, "")
	var device, sessionValue string
	for _, c := range w.Result().Cookies() {
		switch c.Name {
		case "mailroom_device":
			device = c.Name + "=" + c.Value
		case sessionCookie:
			sessionValue = c.Value
		}
	}
	if w.Code != http.StatusSeeOther || device == "" || sessionValue == "" {
		t.Fatalf("sign-in: %d, device %q", w.Code, device)
	}
	s := session{cookie: sessionValue}
	m := csrfInput.FindStringSubmatch(request(t, e.h, http.MethodGet, "/admin/tokens", nil, s.headers()).Body.String())
	if m == nil {
		t.Fatal("no CSRF token on the tokens page")
	}
	s.csrf = m[1]
	w = request(t, e.h, "POST", "/admin/sessions/end", url.Values{"csrf": {s.csrf}}, s.headers())
	if w.Code != http.StatusSeeOther {
		t.Fatalf("end all sessions: %d %s", w.Code, w.Body)
	}
	cleared := false
	for _, c := range w.Result().Cookies() {
		cleared = cleared || c.Name == "mailroom_device" && c.MaxAge < 0
	}
	if !cleared {
		t.Errorf("end all sessions left this browser's device cookie")
	}
	for i := range 4 {
		if w := loginFrom(t, e.h, fmt.Sprintf("10.0.2.%d", i+1), "guess", ""); w.Code != 401 {
			t.Fatalf("guess %d: %d", i, w.Code)
		}
	}
	if w := loginFrom(t, e.h, "10.0.2.9", testPassword, device); w.Code != 429 {
		t.Errorf("the old known-browser mark past the ceiling: %d, want 429 (the mark ended with the sessions)", w.Code)
	}
}

// TestHSTSOnlyOverHTTPS: Strict-Transport-Security when the public URL is
// https, not when it is http (it would pin a plain-http install).
func TestHSTSOnlyOverHTTPS(t *testing.T) {
	t.Parallel()
	secure := newEnv(t, envOptions{deps: func(d *Deps) { d.PublicURL = "https://mail.example.com" }})
	for _, path := range []string{"/healthz", "/admin/login", "/api/v1/users"} {
		if got := request(t, secure.h, "GET", path, nil, nil).Header().Get("Strict-Transport-Security"); !strings.HasPrefix(got, "max-age=") {
			t.Errorf("https public URL, %s: Strict-Transport-Security %q", path, got)
		}
	}
	plain := newEnv(t, envOptions{})
	if got := request(t, plain.h, "GET", "/healthz", nil, nil).Header().Get("Strict-Transport-Security"); got != "" {
		t.Errorf("http public URL: Strict-Transport-Security %q, want none", got)
	}
}

// TestLoginCSRF: the login form needs its pre-session cookie and the token
// signed over it.
func TestLoginCSRF(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cookie, csrf := loginForm(t, e.h, nil)
	otherCookie, _ := loginForm(t, e.h, nil)
	for name, c := range map[string]struct {
		cookie string
		form   url.Values
	}{
		"no cookie, no token":    {"", url.Values{"password": {testPassword}}},
		"no token":               {cookie, url.Values{"password": {testPassword}}},
		"no cookie":              {"", url.Values{"password": {testPassword}, "csrf": {csrf}}},
		"another form's cookie":  {otherCookie, url.Values{"password": {testPassword}, "csrf": {csrf}}},
		"the cookie as a token":  {cookie, url.Values{"password": {testPassword}, "csrf": {strings.TrimPrefix(cookie, "mailroom_login=")}}},
		"a made-up token":        {cookie, url.Values{"password": {testPassword}, "csrf": {"AAAA"}}},
		"a session cookie alone": {sessionCookie + "=x", url.Values{"password": {testPassword}}},
	} {
		hdr := map[string]string{}
		if c.cookie != "" {
			hdr["Cookie"] = c.cookie
		}
		w := request(t, e.h, "POST", "/admin/login", c.form, hdr)
		if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "out of date") {
			t.Errorf("%s: %d", name, w.Code)
		}
		for _, ck := range w.Result().Cookies() {
			if ck.Name == sessionCookie && ck.Value != "" {
				t.Errorf("%s: a session was made", name)
			}
		}
	}
	if w := request(t, e.h, "POST", "/admin/login", url.Values{"password": {testPassword}, "csrf": {csrf}}, map[string]string{"Cookie": cookie}); w.Code != http.StatusSeeOther {
		t.Errorf("the right form: %d", w.Code)
	}
}

// TestSessionsEnd: a new sign-in ends no other session, a password change
// ends them all, and so does the admin page's button; the sessions list
// shows each with its device and ends any one of them.
func TestSessionsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.AdminPassword = "" }})
	if _, err := EnsureAdminPassword(e.db, testPassword); err != nil {
		t.Fatal(err)
	}
	live := func(s session) bool {
		return request(t, e.h, "GET", "/admin", nil, s.headers()).Code == 200
	}
	first := login(t, e.h)
	second := login(t, e.h)
	if !live(first) || !live(second) {
		t.Errorf("after a second sign-in: first live %v, second live %v; want both", live(first), live(second))
	}
	// The list shows both; the second ends the first by its id.
	page := request(t, e.h, "GET", "/admin/tokens", nil, second.headers()).Body.String()
	ids := sessionIDs.FindAllStringSubmatch(page, -1)
	if len(ids) != 2 || !strings.Contains(page, "this browser") {
		t.Fatalf("the sessions list shows %d sessions, want 2 with this browser marked", len(ids))
	}
	var firstID string
	for _, m := range ids {
		if !strings.Contains(m[0], "this browser") {
			firstID = m[1]
		}
	}
	if w := request(t, e.h, "POST", "/admin/sessions/"+firstID+"/end", url.Values{"csrf": {second.csrf}}, second.headers()); w.Code != http.StatusSeeOther {
		t.Errorf("end the first session: %d", w.Code)
	}
	if live(first) || !live(second) {
		t.Errorf("after ending the first: first live %v, second live %v; want only the second", live(first), live(second))
	}
	if w := request(t, e.h, "POST", "/admin/sessions/"+firstID+"/end", url.Values{"csrf": {second.csrf}}, second.headers()); w.Code != http.StatusSeeOther {
		t.Errorf("end an ended session: %d", w.Code)
	}
	first = login(t, e.h)
	if _, err := EnsureAdminPassword(e.db, "a brand new password"); err != nil {
		t.Fatal(err)
	}
	if live(first) || live(second) {
		t.Error("a password change left a session live")
	}
	w := postLogin(t, e.h, url.Values{"password": {"a brand new password"}}, nil)
	if w.Code != http.StatusSeeOther {
		t.Fatalf("sign in with the new password: %d", w.Code)
	}
	third := login2(t, e.h, "a brand new password")
	if w := request(t, e.h, "POST", "/admin/sessions/end", url.Values{}, third.headers()); w.Code != http.StatusForbidden {
		t.Errorf("end sessions without CSRF: %d", w.Code)
	}
	if w := request(t, e.h, "POST", "/admin/sessions/end", url.Values{"csrf": {third.csrf}}, third.headers()); w.Code != http.StatusSeeOther {
		t.Errorf("end sessions: %d", w.Code)
	}
	if live(third) {
		t.Error("End all sessions left this one live")
	}
}

// sessionIDs finds the sessions list's rows: the session's id and the
// row up to its device cell's end.
var sessionIDs = regexp.MustCompile(`<tr data-session="([^"]+)">\s*<td>[^\n]*</td>`)

// login2 is login with another password.
func login2(t testing.TB, h http.Handler, password string) session {
	t.Helper()
	w := postLogin(t, h, url.Values{"password": {password}}, nil)
	var s session
	for _, c := range w.Result().Cookies() {
		if c.Name == sessionCookie {
			s.cookie = c.Value
		}
	}
	if w.Code != http.StatusSeeOther || s.cookie == "" {
		t.Fatalf("login: %d", w.Code)
	}
	m := csrfInput.FindStringSubmatch(request(t, h, "GET", "/admin/tokens", nil, s.headers()).Body.String())
	if m == nil {
		t.Fatal("no CSRF token")
	}
	s.csrf = m[1]
	return s
}

// TestHostCookies: over https every cookie has the __Host- prefix (Secure,
// Path=/, no Domain); over http none does.
func TestHostCookies(t *testing.T) {
	t.Parallel()
	for _, pub := range []string{"https://mail.example.com", "http://127.0.0.1:8080"} {
		e := newEnv(t, envOptions{deps: func(d *Deps) { d.PublicURL = pub }})
		w := postLogin(t, e.h, url.Values{"password": {testPassword}}, nil)
		if w.Code != http.StatusSeeOther {
			t.Fatalf("%s: login %d", pub, w.Code)
		}
		https := strings.HasPrefix(pub, "https")
		names := 0
		for _, c := range w.Result().Cookies() {
			names++
			if got := strings.HasPrefix(c.Name, "__Host-"); got != https || (https && (!c.Secure || c.Path != "/" || c.Domain != "")) {
				t.Errorf("%s: cookie %s secure=%v path=%q domain=%q", pub, c.Name, c.Secure, c.Path, c.Domain)
			}
		}
		if names < 2 {
			t.Errorf("%s: only %d cookies set at login", pub, names)
		}
	}
}

// TestFlashIsSigned: a flash cookie the server did not sign never shows,
// and the OAuth callback never repeats an ?error= it was sent.
func TestFlashIsSigned(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	s := login(t, se.h)
	forged := url.QueryEscape(`{"Kind":"error","Text":"Your account is locked: call +1 555 0100"}`)
	raw := base64.RawURLEncoding.EncodeToString([]byte(`{"Kind":"error","Text":"Your account is locked: call +1 555 0100"}`))
	for _, v := range []string{forged, raw, raw + ".bad-mac", raw + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 32))} {
		hdr := s.headers()
		hdr["Cookie"] += "; " + flashCookie + "=" + v
		if page := request(t, se.h, "GET", "/admin", nil, hdr).Body.String(); strings.Contains(page, "555 0100") {
			t.Errorf("a forged flash %q is shown", v)
		}
	}
	w := request(t, se.h, "GET", "/oauth/google/callback?error="+url.QueryEscape("Your account is locked: call +1 555 0100"), nil, s.headers())
	if w.Code != http.StatusSeeOther {
		t.Fatalf("callback with error: %d", w.Code)
	}
	page := request(t, se.h, "GET", "/admin/accounts", nil, s.withFlash(w)).Body.String()
	if strings.Contains(page, "555 0100") || !strings.Contains(page, "Google did not connect the account") {
		t.Errorf("the callback's flash repeats the attacker's text, or is missing")
	}
}

// TestBearerFailuresRateLimited: past the limit of missing or bad tokens
// (20 a minute by default), an address is answered 429 with Retry-After
// for each further one, while a valid token from that address (the
// static admin token, a made admin token, a user token) still passes: a
// stranger behind the same NAT or proxy locks no client out, and valid
// requests do not count. Other addresses are not limited, and the limit
// ends with its window.
func TestBearerFailuresRateLimited(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	se := newSecEnv(t, func(d *Deps) { d.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now } })
	const ip = "198.51.100.9"
	for i := range 20 {
		hdr := bearer("guess")
		if i%2 == 1 {
			hdr = nil // no token at all counts the same
		}
		if w := requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, hdr); w.Code != 401 {
			t.Fatalf("bad token %d: %d", i, w.Code)
		}
	}
	w := requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, bearer("guess"))
	if w.Code != 429 || w.Header().Get("Retry-After") != "60" || apiError(t, w).Code != "rate_limited" {
		t.Errorf("21st bad token: %d Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	for _, c := range []struct{ name, token, path string }{
		{"MAILROOM_API_TOKEN", testAPIToken, "/api/v1/users"},
		{"a made admin token", se.adminToken, "/api/v1/tokens"},
		{"a user token", se.alice.token, "/api/v1/users/" + se.alice.user + "/rules"},
	} {
		for range 3 {
			if w := requestFrom(t, se.h, ip, "GET", c.path, nil, bearer(c.token)); w.Code != 200 {
				t.Errorf("%s from the limited address: %d %s, want 200", c.name, w.Code, w.Body)
			}
		}
	}
	if w := requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, nil); w.Code != 429 {
		t.Errorf("no token from the limited address after the good ones: %d, want 429", w.Code)
	}
	if w := requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, bearer("guess")); w.Code != 429 {
		t.Errorf("a bad token from the limited address after the good ones: %d, want 429", w.Code)
	}
	if w := requestFrom(t, se.h, "198.51.100.10", "GET", "/api/v1/users", nil, bearer("guess")); w.Code != 401 {
		t.Errorf("a bad token from another address: %d, want 401", w.Code)
	}
	mu.Lock()
	now = now.Add(61 * time.Second)
	mu.Unlock()
	if w := requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, bearer("guess")); w.Code != 401 {
		t.Errorf("a bad token after the window: %d, want 401", w.Code)
	}
}

// TestPushFailuresRateLimited: the same for push tokens.
func TestPushFailuresRateLimited(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, func(d *Deps) { d.TokenFailLimit = 3 })
	body := string(se.fake.PushEnvelope("nobody@example.com", 5))
	for i := range 3 {
		if w := requestFrom(t, se.h, "198.51.100.20", "POST", "/push/gmail?token=wrong", body, nil); w.Code != 401 {
			t.Fatalf("bad push %d: %d", i, w.Code)
		}
	}
	w := requestFrom(t, se.h, "198.51.100.20", "POST", "/push/gmail?token="+pushSecret, body, nil)
	if w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Errorf("push after 3 bad tokens: %d", w.Code)
	}
	if w := requestFrom(t, se.h, "198.51.100.21", "POST", "/push/gmail?token="+pushSecret, body, nil); w.Code != 204 {
		t.Errorf("push from another client: %d %s", w.Code, w.Body)
	}
	// Good pushes do not count.
	for range 5 {
		if w := requestFrom(t, se.h, "198.51.100.21", "POST", "/push/gmail?token="+pushSecret, body, nil); w.Code != 204 {
			t.Fatalf("good push: %d", w.Code)
		}
	}
}

// TestFailureLimitersSeparate: API bearer tokens, /metrics and pushes
// each have their own failure counter, and pushes count per client IP and
// subscription. Pub/Sub's egress addresses are shared between Google's
// customers: one customer's bad pushes neither block another
// subscription's pushes from that address nor a Google-signed push on the
// limited subscription itself, while the shared ?token= stays unguessable.
func TestFailureLimitersSeparate(t *testing.T) {
	t.Parallel()
	const ip, metricsToken = "198.51.100.30", "metrics-secret-0123456789abcdef01"
	se := newSecEnv(t, func(d *Deps) { d.TokenFailLimit = 3; d.MetricsToken = metricsToken })
	good := string(se.fake.PushEnvelope("nobody@example.com", 5))
	var env map[string]any
	if err := json.Unmarshal([]byte(good), &env); err != nil {
		t.Fatal(err)
	}
	env["subscription"] = "projects/other-customer/subscriptions/noisy"
	raw, _ := json.Marshal(env)
	noisy := string(raw)

	// Bad API tokens: the API is limited, /metrics and push are not.
	for range 3 {
		requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, bearer("guess"))
	}
	if w := requestFrom(t, se.h, ip, "GET", "/api/v1/users", nil, bearer("guess")); w.Code != 429 {
		t.Fatalf("API after 3 bad tokens: %d", w.Code)
	}
	if w := requestFrom(t, se.h, ip, "GET", "/metrics", nil, bearer(metricsToken)); w.Code != 200 {
		t.Errorf("metrics after bad API tokens: %d", w.Code)
	}
	if w := requestFrom(t, se.h, ip, "POST", "/push/gmail?token="+pushSecret, good, nil); w.Code != 204 {
		t.Errorf("push after bad API tokens: %d %s", w.Code, w.Body)
	}

	// Bad metrics tokens from another address: metrics limited, API not.
	const ip2 = "198.51.100.31"
	for range 3 {
		requestFrom(t, se.h, ip2, "GET", "/metrics", nil, bearer("guess"))
	}
	if w := requestFrom(t, se.h, ip2, "GET", "/metrics", nil, bearer(metricsToken)); w.Code != 429 {
		t.Errorf("metrics after 3 bad tokens: %d", w.Code)
	}
	if w := requestFrom(t, se.h, ip2, "GET", "/api/v1/users", nil, bearer(testAPIToken)); w.Code != 200 {
		t.Errorf("API after bad metrics tokens: %d", w.Code)
	}

	// Bad pushes on one subscription from a shared address.
	const shared = "198.51.100.32"
	for range 3 {
		if w := requestFrom(t, se.h, shared, "POST", "/push/gmail?token=wrong", noisy, nil); w.Code != 401 {
			t.Fatalf("bad push: %d", w.Code)
		}
	}
	if w := requestFrom(t, se.h, shared, "POST", "/push/gmail?token="+pushSecret, noisy, nil); w.Code != 429 || w.Header().Get("Retry-After") == "" {
		t.Errorf("shared-token push on the limited subscription: %d, want 429 with Retry-After", w.Code)
	}
	if w := requestFrom(t, se.h, shared, "POST", "/push/gmail", noisy, nil); w.Code != 429 {
		t.Errorf("tokenless push on the limited subscription: %d, want 429", w.Code)
	}
	if w := requestFrom(t, se.h, shared, "POST", "/push/gmail?token="+pushSecret, good, nil); w.Code != 204 {
		t.Errorf("push on another subscription from the same address: %d %s", w.Code, w.Body)
	}
	signed := map[string]string{"Authorization": "Bearer " + se.fake.SignPushToken(googlefake.IDTokenClaims{})}
	if w := requestFrom(t, se.h, shared, "POST", "/push/gmail", noisy, signed); w.Code != 204 {
		t.Errorf("Google-signed push on the limited subscription: %d %s", w.Code, w.Body)
	}
	forged := map[string]string{"Authorization": "Bearer " + se.fake.SignPushToken(googlefake.IDTokenClaims{}, googlefake.FlawBadSignature)}
	if w := requestFrom(t, se.h, shared, "POST", "/push/gmail", noisy, forged); w.Code != 401 {
		t.Errorf("forged push on the limited subscription: %d, want 401", w.Code)
	}
	if w := requestFrom(t, se.h, shared, "GET", "/api/v1/users", nil, bearer(testAPIToken)); w.Code != 200 {
		t.Errorf("API after bad pushes: %d", w.Code)
	}
	if w := requestFrom(t, se.h, shared, "GET", "/metrics", nil, bearer(metricsToken)); w.Code != 200 {
		t.Errorf("metrics after bad pushes: %d", w.Code)
	}
}

// TestMetricsToken: /metrics wants the token when it is set.
func TestMetricsToken(t *testing.T) {
	t.Parallel()
	open := newEnv(t, envOptions{})
	if w := request(t, open.h, "GET", "/metrics", nil, nil); w.Code != 200 {
		t.Errorf("metrics without a token set: %d", w.Code)
	}
	e := newEnv(t, envOptions{deps: func(d *Deps) { d.MetricsToken = "metrics-secret-0123456789abcdef01" }})
	for name, hdr := range map[string]map[string]string{
		"none": nil, "wrong": bearer("nope"), "api token": bearer(testAPIToken), "basic": {"Authorization": "Basic bWV0cmljcy1zZWNyZXQ="},
	} {
		w := request(t, e.h, "GET", "/metrics", nil, hdr)
		if w.Code != 401 || apiError(t, w).Code != "unauthorized" || w.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %d", name, w.Code)
		}
	}
	if w := request(t, e.h, "GET", "/metrics", nil, bearer("metrics-secret-0123456789abcdef01")); w.Code != 200 {
		t.Errorf("with the token: %d", w.Code)
	}
}

// TestEveryAPIRouteIsScoped walks the routes table itself: every /api/v1
// route, called with Bob's user token about Alice's things (her ids in the
// path, her user in the query and the body), answers 403 or 404. A route
// added without its scope fails here.
func TestEveryAPIRouteIsScoped(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, func(d *Deps) { d.DebugTasks = panickingDebug{} })
	a := se.alice
	var aliceTokenID string
	_ = se.db.View(func(tx *store.Tx) error {
		tk, err := tx.APITokenLookup(a.token)
		aliceTokenID = tk.ID
		return err
	})
	body := `{"userId":"` + a.user + `","accountId":"` + a.account + `","email":"x@gmail.example","refreshToken":"r","spreadsheetId":"s","columns":["a"],"name":"n","answers":{"name":"x"},"label":"L","match":"all","conditions":[{"field":"from","op":"contains","value":"x"}],"ids":["x"],"count":1}`
	engine, ok := se.h.(interface{ Routes() gin.RoutesInfo })
	if !ok {
		t.Fatalf("the handler is a %T, not a gin engine", se.h)
	}
	n := 0
	for _, r := range engine.Routes() {
		if !strings.HasPrefix(r.Path, "/api/v1/") || r.Path == "/api/v1/openapi.json" {
			continue // the API description is public
		}
		n++
		path := r.Path
		for param, id := range map[string]string{":uid": a.user, ":messageId": "m1"} {
			path = strings.ReplaceAll(path, param, id)
		}
		switch {
		case strings.HasPrefix(path, "/api/v1/accounts/"):
			path = strings.Replace(path, ":id", a.account, 1)
		case strings.HasPrefix(path, "/api/v1/rules/"):
			path = strings.Replace(path, ":id", a.rule, 1)
		case strings.HasPrefix(path, "/api/v1/forms/"):
			path = strings.Replace(path, ":id", a.form, 1)
		case strings.HasPrefix(path, "/api/v1/tokens/"):
			path = strings.Replace(path, ":id", aliceTokenID, 1)
		default:
			path = strings.ReplaceAll(path, ":id", "0000000000000001")
		}
		if strings.Contains(path, ":") || strings.Contains(path, "*") {
			t.Errorf("route %s: a parameter this test does not know; teach it", r.Path)
			continue
		}
		var b any
		if r.Method == "POST" || r.Method == "PUT" {
			b = body
		}
		w := request(t, se.h, r.Method, path+"?userId="+a.user, b, bearer(se.bob.token))
		if w.Code != 403 && w.Code != 404 {
			t.Errorf("%s %s with Bob's token about Alice: %d, want 403 or 404; %.200s", r.Method, path, w.Code, w.Body.String())
		}
	}
	if n < 25 {
		t.Errorf("only %d API routes found", n)
	}
	// And she still has everything.
	if w := request(t, se.h, "GET", "/api/v1/forms/"+a.form, nil, bearer(a.token)); w.Code != 200 {
		t.Errorf("alice's form after Bob's tries: %d", w.Code)
	}
}
