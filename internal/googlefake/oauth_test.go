package googlefake_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/gmail/v1"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

func TestTokenRefresh(t *testing.T) {
	t.Parallel()
	// Tokens shorter than the clients' early-expiry margin are refreshed
	// again and again (how often is the client libraries' business). The
	// generated clients use cloud.google.com/go/auth, whose cache hands out
	// a token that is about to expire and refreshes it in the background,
	// so the second token call may come after the calls that started it.
	e := newEnv(t, googlefake.Options{AccessTokenTTL: time.Second})
	for range 3 {
		_, err := e.gmail.Users.GetProfile("me").Do()
		check(t, err)
	}
	testkit.Eventually(t, 5*time.Second, "a second token call", func() bool {
		return e.srv.Calls(googlefake.MethodToken) >= 2
	})

	long := newEnv(t, googlefake.Options{})
	for range 3 {
		_, err := long.gmail.Users.GetProfile("me").Do()
		check(t, err)
	}
	if got := long.srv.Calls(googlefake.MethodToken); got != 1 {
		t.Errorf("token calls with 1 h tokens = %d, want 1", got)
	}
}

func TestRevokedRefreshToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	_, err := e.gmail.Users.GetProfile("me").Do()
	check(t, err)
	e.srv.RevokeRefreshToken(ann)

	// The cached access token died with its refresh token: 401.
	_, err = e.gmail.Users.GetProfile("me").Do()
	if code, reason := apiCode(t, err); code != 401 || reason != "authError" {
		t.Errorf("after revoke, cached token: %d %s, want 401 authError", code, reason)
	}
	// A fresh token source cannot refresh: invalid_grant, through the Gmail call.
	g, _ := e.clients(t, e.refresh)
	_, err = g.Users.GetProfile("me").Do()
	var rerr *oauth2.RetrieveError
	if !errors.As(err, &rerr) || rerr.ErrorCode != "invalid_grant" || rerr.Response.StatusCode != 400 {
		t.Fatalf("after revoke, refresh: %v, want invalid_grant 400", err)
	}
	// A new grant works again.
	g, _ = e.clients(t, e.srv.AddAccount(ann))
	_, err = g.Users.GetProfile("me").Do()
	check(t, err)
}

func TestBadAccessToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	ctx := context.Background()
	g, err := gmail.NewService(ctx, option.WithEndpoint(e.base),
		option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "ya29.nope"})))
	check(t, err)
	_, err = g.Users.GetProfile("me").Do()
	if code, _ := apiCode(t, err); code != 401 {
		t.Errorf("unknown token: %d, want 401", code)
	}

	tok := must[string](t)(e.srv.AccessToken(ann))
	g, err = gmail.NewService(ctx, option.WithEndpoint(e.base),
		option.WithTokenSource(oauth2.StaticTokenSource(&oauth2.Token{AccessToken: tok})))
	check(t, err)
	_, err = g.Users.GetProfile("me").Do()
	check(t, err)
	e.srv.ExpireAccessTokens(ann)
	_, err = g.Users.GetProfile("me").Do()
	if code, _ := apiCode(t, err); code != 401 {
		t.Errorf("expired token: %d, want 401", code)
	}

	// No credentials at all.
	g, err = gmail.NewService(ctx, option.WithEndpoint(e.base), option.WithoutAuthentication())
	check(t, err)
	_, err = g.Users.GetProfile("me").Do()
	if code, _ := apiCode(t, err); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	if _, err := e.srv.AccessToken("nobody@example.com"); !errors.Is(err, googlefake.ErrUnknownAccount) {
		t.Errorf("access token for unknown account: %v", err)
	}
}

func TestAnonymousAccount(t *testing.T) {
	t.Parallel()
	srv := googlefake.StartForTest(t, googlefake.Options{AnonymousAccount: ann})
	srv.AddAccount(ann)
	g, err := gmail.NewService(context.Background(), option.WithEndpoint(srv.URL()), option.WithoutAuthentication())
	check(t, err)
	p, err := g.Users.GetProfile("me").Do()
	check(t, err)
	if p.EmailAddress != ann {
		t.Errorf("profile = %s, want %s", p.EmailAddress, ann)
	}
}

func TestClientCredentials(t *testing.T) {
	t.Parallel()
	srv := googlefake.StartForTest(t, googlefake.Options{ClientID: "id", ClientSecret: "secret"})
	refresh := srv.AddAccount(ann)
	for _, tc := range []struct {
		secret string
		ok     bool
	}{{"secret", true}, {"wrong", false}} {
		conf := &oauth2.Config{ClientID: "id", ClientSecret: tc.secret, Endpoint: oauth2.Endpoint{TokenURL: srv.TokenURL()}}
		_, err := conf.TokenSource(context.Background(), &oauth2.Token{RefreshToken: refresh}).Token()
		var rerr *oauth2.RetrieveError
		switch {
		case tc.ok && err != nil:
			t.Errorf("secret %q: %v", tc.secret, err)
		case !tc.ok && (!errors.As(err, &rerr) || rerr.ErrorCode != "invalid_client"):
			t.Errorf("secret %q: %v, want invalid_client", tc.secret, err)
		}
	}
}

func TestConsentFlow(t *testing.T) {
	t.Parallel()
	const consented = "carol@example.com"
	e := newEnv(t, googlefake.Options{ClientID: "client-id", ClientSecret: "client-secret"})
	conf := &oauth2.Config{
		ClientID: "client-id", ClientSecret: "client-secret",
		Endpoint:    oauth2.Endpoint{AuthURL: e.srv.AuthURL(), TokenURL: e.srv.TokenURL()},
		RedirectURL: "http://app.example/oauth/google/callback",
		Scopes:      []string{"openid", "email", gmail.GmailModifyScope},
	}
	noFollow := &http.Client{
		Transport:     e.hc.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	consent := func() url.Values {
		t.Helper()
		resp, err := noFollow.Get(conf.AuthCodeURL("st4te", oauth2.AccessTypeOffline))
		check(t, err)
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound {
			t.Fatalf("consent status %d", resp.StatusCode)
		}
		loc, err := url.Parse(resp.Header.Get("Location"))
		check(t, err)
		if !strings.HasPrefix(loc.String(), conf.RedirectURL+"?") {
			t.Fatalf("redirected to %s", loc)
		}
		return loc.Query()
	}

	// Nobody configured to approve: access_denied.
	if q := consent(); q.Get("error") != "access_denied" || q.Get("state") != "st4te" {
		t.Fatalf("without consent account: %v", q)
	}

	e.srv.SetConsentAccount(consented)
	q := consent()
	if q.Get("state") != "st4te" || q.Get("code") == "" {
		t.Fatalf("consent redirect query = %v", q)
	}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, e.hc)
	tok, err := conf.Exchange(ctx, q.Get("code"))
	check(t, err)
	if tok.RefreshToken == "" || tok.AccessToken == "" || tok.Expiry.IsZero() {
		t.Fatalf("token = %+v", tok)
	}
	// The id_token names the account and verifies with the emulator's keys.
	idTok, _ := tok.Extra("id_token").(string)
	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(e.srv.CertsHTTPClient()))
	check(t, err)
	payload, err := v.Validate(ctx, idTok, "client-id")
	check(t, err)
	if payload.Claims["email"] != consented {
		t.Errorf("id_token email = %v", payload.Claims["email"])
	}
	// A code works once.
	_, err = conf.Exchange(ctx, q.Get("code"))
	var rerr *oauth2.RetrieveError
	if !errors.As(err, &rerr) || rerr.ErrorCode != "invalid_grant" {
		t.Errorf("second exchange: %v, want invalid_grant", err)
	}
	// The refresh token reaches the consented mailbox.
	g, _ := e.clients(t, tok.RefreshToken)
	p, err := g.Users.GetProfile("me").Do()
	check(t, err)
	if p.EmailAddress != consented || !e.srv.HasAccount(consented) {
		t.Errorf("profile = %s, want %s", p.EmailAddress, consented)
	}
	// login_hint naming a known account wins.
	resp, err := noFollow.Get(conf.AuthCodeURL("s", oauth2.AccessTypeOffline, oauth2.SetAuthURLParam("login_hint", ann)))
	check(t, err)
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	tok, err = conf.Exchange(ctx, loc.Query().Get("code"))
	check(t, err)
	g, _ = e.clients(t, tok.RefreshToken)
	p, err = g.Users.GetProfile("me").Do()
	check(t, err)
	if p.EmailAddress != ann {
		t.Errorf("login_hint profile = %s, want %s", p.EmailAddress, ann)
	}
}

func TestRevokeEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	resp, err := e.hc.PostForm(e.base+"revoke", url.Values{"token": {e.refresh}})
	check(t, err)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("revoke: %d", resp.StatusCode)
	}
	_, err = e.gmail.Users.GetProfile("me").Do()
	var rerr *oauth2.RetrieveError
	if !errors.As(err, &rerr) || rerr.ErrorCode != "invalid_grant" {
		t.Errorf("after revoke: %v, want invalid_grant", err)
	}
	want := []googlefake.Revocation{{Email: ann, Token: e.refresh, Refresh: true}}
	if got := e.srv.Revocations(); !slices.Equal(got, want) {
		t.Errorf("revocations %+v, want %+v", got, want)
	}
	// Revoked already: 400 invalid_token, and not recorded again.
	resp, err = e.hc.PostForm(e.base+"revoke", url.Values{"token": {e.refresh}})
	check(t, err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(e.srv.Revocations()) != 1 {
		t.Errorf("revoking again: %d, %d revocations", resp.StatusCode, len(e.srv.Revocations()))
	}
}

// TestConsentPKCE: a code issued for a code_challenge is exchanged only
// with its code_verifier (S256 or plain), as Google does.
func TestConsentPKCE(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{ClientID: "client-id", ClientSecret: "client-secret", ConsentAccount: "dan@example.com"})
	conf := &oauth2.Config{
		ClientID: "client-id", ClientSecret: "client-secret",
		Endpoint:    oauth2.Endpoint{AuthURL: e.srv.AuthURL(), TokenURL: e.srv.TokenURL()},
		RedirectURL: "http://app.example/oauth/google/callback",
		Scopes:      []string{"https://www.googleapis.com/auth/gmail.modify"},
	}
	noFollow := &http.Client{
		Transport:     e.hc.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	consent := func(opts ...oauth2.AuthCodeOption) (code string, status int) {
		t.Helper()
		resp, err := noFollow.Get(conf.AuthCodeURL("st", append(opts, oauth2.AccessTypeOffline)...))
		check(t, err)
		resp.Body.Close()
		loc, _ := url.Parse(resp.Header.Get("Location"))
		return loc.Query().Get("code"), resp.StatusCode
	}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, e.hc)
	grantErr := func(err error) string {
		var rerr *oauth2.RetrieveError
		if errors.As(err, &rerr) {
			return rerr.ErrorCode
		}
		return ""
	}
	verifier := oauth2.GenerateVerifier()

	code, _ := consent(oauth2.S256ChallengeOption(verifier))
	if _, err := conf.Exchange(ctx, code); grantErr(err) != "invalid_grant" {
		t.Errorf("S256 code without a verifier: %v, want invalid_grant", err)
	}
	code, _ = consent(oauth2.S256ChallengeOption(verifier))
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(oauth2.GenerateVerifier())); grantErr(err) != "invalid_grant" {
		t.Errorf("S256 code with another verifier: %v, want invalid_grant", err)
	}
	code, _ = consent(oauth2.S256ChallengeOption(verifier))
	if tok, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err != nil || tok.RefreshToken == "" {
		t.Errorf("S256 code with its verifier: %v", err)
	}
	// plain: the verifier is the challenge.
	code, _ = consent(oauth2.SetAuthURLParam("code_challenge", verifier))
	if _, err := conf.Exchange(ctx, code, oauth2.VerifierOption(verifier)); err != nil {
		t.Errorf("plain code with its verifier: %v", err)
	}
	// An unknown method is refused at consent.
	if _, status := consent(oauth2.SetAuthURLParam("code_challenge", verifier), oauth2.SetAuthURLParam("code_challenge_method", "S512")); status != http.StatusBadRequest {
		t.Errorf("code_challenge_method S512: status %d, want 400", status)
	}
	// Without a challenge, no verifier is needed (as before).
	code, _ = consent()
	if _, err := conf.Exchange(ctx, code); err != nil {
		t.Errorf("code without PKCE: %v", err)
	}
}

// TestAuthorizationEndpointChecks: the authorization endpoint checks the
// request as Google's "Using OAuth 2.0 for Web Server Applications" says
// (client_id, an authorized redirect_uri, response_type=code, known scopes,
// access_type, the PKCE challenge); only access_type=offline gets a refresh
// token; a test chooses who consents (SetConsentAs) or that consent is
// refused (DenyConsent), and LastConsent shows what was asked.
func TestAuthorizationEndpointChecks(t *testing.T) {
	t.Parallel()
	const cb = "http://app.example/oauth/google/callback"
	e := newEnv(t, googlefake.Options{ClientID: "client-id", ClientSecret: "client-secret", ConsentAccount: "dan@example.com", RedirectURIs: []string{cb}})
	noFollow := &http.Client{
		Transport:     e.hc.Transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	verifier := oauth2.GenerateVerifier()
	good := url.Values{
		"client_id": {"client-id"}, "redirect_uri": {cb}, "response_type": {"code"},
		"scope": {"https://www.googleapis.com/auth/gmail.modify"}, "access_type": {"offline"}, "state": {"st"},
		"code_challenge": {oauth2.S256ChallengeFromVerifier(verifier)}, "code_challenge_method": {"S256"},
	}
	ask := func(change func(url.Values)) (status int, back url.Values, errCode string) {
		t.Helper()
		q := url.Values{}
		for k, v := range good {
			q[k] = v
		}
		if change != nil {
			change(q)
		}
		resp, err := noFollow.Get(e.srv.AuthURL() + "?" + q.Encode())
		check(t, err)
		defer resp.Body.Close()
		var body struct {
			Error string `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		if loc := resp.Header.Get("Location"); loc != "" {
			u, _ := url.Parse(loc)
			return resp.StatusCode, u.Query(), body.Error
		}
		return resp.StatusCode, nil, body.Error
	}
	for _, tc := range []struct {
		name   string
		change func(url.Values)
		status int
		code   string
	}{
		{"no client_id", func(q url.Values) { q.Del("client_id") }, 400, "invalid_request"},
		{"another client", func(q url.Values) { q.Set("client_id", "other") }, 401, "invalid_client"},
		{"unauthorized redirect_uri", func(q url.Values) { q.Set("redirect_uri", cb+"/") }, 400, "redirect_uri_mismatch"},
		{"no response_type", func(q url.Values) { q.Del("response_type") }, 400, "invalid_request"},
		{"response_type token", func(q url.Values) { q.Set("response_type", "token") }, 400, "unsupported_response_type"},
		{"no scope", func(q url.Values) { q.Del("scope") }, 400, "invalid_request"},
		{"unknown scope", func(q url.Values) { q.Set("scope", "https://www.googleapis.com/auth/nope") }, 400, "invalid_scope"},
		{"bad access_type", func(q url.Values) { q.Set("access_type", "forever") }, 400, "invalid_request"},
		{"short challenge", func(q url.Values) { q.Set("code_challenge", "abc") }, 400, "invalid_request"},
		{"S512", func(q url.Values) { q.Set("code_challenge_method", "S512") }, 400, "invalid_request"},
	} {
		if status, back, code := ask(tc.change); status != tc.status || code != tc.code || back != nil {
			t.Errorf("%s: %d %q (redirect %v), want %d %q and no redirect", tc.name, status, code, back, tc.status, tc.code)
		}
	}
	conf := &oauth2.Config{ClientID: "client-id", ClientSecret: "client-secret", RedirectURL: cb,
		Endpoint: oauth2.Endpoint{AuthURL: e.srv.AuthURL(), TokenURL: e.srv.TokenURL()}}
	ctx := context.WithValue(context.Background(), oauth2.HTTPClient, e.hc)

	status, back, _ := ask(nil)
	if status != http.StatusFound || back.Get("code") == "" || back.Get("state") != "st" {
		t.Fatalf("good request: %d %v", status, back)
	}
	if lc := e.srv.LastConsent(); lc.Get("code_challenge_method") != "S256" || lc.Get("access_type") != "offline" {
		t.Errorf("LastConsent = %v", lc)
	}
	tok, err := conf.Exchange(ctx, back.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil || tok.RefreshToken == "" {
		t.Fatalf("offline exchange: %v, refresh %q", err, tok.RefreshToken)
	}
	// Online access: no refresh token.
	_, back, _ = ask(func(q url.Values) { q.Del("access_type") })
	if tok, err := conf.Exchange(ctx, back.Get("code"), oauth2.VerifierOption(verifier)); err != nil || tok.RefreshToken != "" {
		t.Errorf("online exchange: %v, refresh %q (want none)", err, tok.RefreshToken)
	}
	// Who consents: the login_hint when known, unless SetConsentAs says
	// the person signed in as someone else.
	e.srv.AddAccount(ann)
	e.srv.SetConsentAs("eve@example.com")
	_, back, _ = ask(func(q url.Values) { q.Set("login_hint", ann) })
	tok, err = conf.Exchange(ctx, back.Get("code"), oauth2.VerifierOption(verifier))
	check(t, err)
	g, _ := e.clients(t, tok.RefreshToken)
	p, err := g.Users.GetProfile("me").Do()
	check(t, err)
	if p.EmailAddress != "eve@example.com" {
		t.Errorf("consented as %s, want eve@example.com", p.EmailAddress)
	}
	e.srv.SetConsentAs("")
	e.srv.DenyConsent(true)
	if _, back, _ = ask(nil); back.Get("error") != "access_denied" || back.Get("code") != "" || back.Get("state") != "st" {
		t.Errorf("denied consent redirect: %v", back)
	}
}
