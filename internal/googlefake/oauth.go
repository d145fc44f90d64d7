package googlefake

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// authCodeTTL is how long a consent code may be exchanged.
const authCodeTTL = 10 * time.Minute

// defaultScope is reported when the client asked for none.
const defaultScope = "https://www.googleapis.com/auth/gmail.modify https://www.googleapis.com/auth/spreadsheets"

// authority holds the accounts, their refresh and access tokens and the
// pending consent codes.
type authority struct {
	s *Server

	mu       sync.Mutex
	accounts map[string]*account // by lower-case email
	refresh  map[string]string   // refresh token → email
	access   map[string]accessToken
	codes    map[string]authCode
	consent  string // auto-approved email
	// consentAs, when set, is the account that consents whatever the
	// login_hint (a person signing in with another address); deny makes
	// every consent end in access_denied; last is the latest consent
	// request's parameters.
	consentAs string
	deny      bool
	last      url.Values
	sweepAt   int // sweep expired access tokens when the map reaches this size
	// revoked lists the revocation endpoint's successful calls.
	revoked []Revocation
}

// Revocation is a token the revocation endpoint revoked.
type Revocation struct {
	// Email is the account the token was issued for; Token the token
	// revoked; Refresh whether it was a refresh token (else an access
	// token, whose refresh token went with it).
	Email, Token string
	Refresh      bool
}

// Revocations returns the tokens revoked through the revocation endpoint,
// oldest first (RevokeRefreshToken, the user's own removal, is not one).
func (s *Server) Revocations() []Revocation {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	return slices.Clone(s.auth.revoked)
}

type account struct {
	email   string
	refresh map[string]bool // live refresh tokens
}

type accessToken struct {
	email   string
	refresh string // the refresh token it came from, "" when issued directly
	expires time.Time
}

type authCode struct {
	email, clientID, redirectURI, scope string
	expires                             time.Time
	// offline: access_type=offline was asked for, so the exchange gives a
	// refresh token.
	offline bool
	// challenge is the PKCE code_challenge given at consent, as S256
	// (a plain one is hashed when the code is issued); empty: none.
	challenge string
}

func newAuthority(s *Server) *authority {
	return &authority{
		s:        s,
		accounts: make(map[string]*account),
		refresh:  make(map[string]string),
		access:   make(map[string]accessToken),
		codes:    make(map[string]authCode),
		consent:  normEmail(s.opts.ConsentAccount),
		sweepAt:  1024,
	}
}

func normEmail(e string) string { return strings.ToLower(strings.TrimSpace(e)) }

func sameEmail(a, b string) bool { return normEmail(a) == normEmail(b) }

// randomToken returns prefix followed by 26 random base32 characters.
func randomToken(prefix string) string { return prefix + rand.Text() }

// AddAccount registers a Google account (creating its empty mailbox) and
// returns a new refresh token for it. Calling it again for the same email
// returns another valid refresh token.
func (s *Server) AddAccount(email string) (refreshToken string) {
	s.Gmail.ensureMailbox(email)
	a := s.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.newRefreshLocked(normEmail(email))
}

// HasAccount reports whether email is a registered account.
func (s *Server) HasAccount(email string) bool {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	_, ok := s.auth.accounts[normEmail(email)]
	return ok
}

// Accounts returns the registered emails, sorted.
func (s *Server) Accounts() []string { return s.Gmail.accounts() }

func (a *authority) accountLocked(email string) *account {
	acc := a.accounts[email]
	if acc == nil {
		acc = &account{email: email, refresh: make(map[string]bool)}
		a.accounts[email] = acc
	}
	return acc
}

func (a *authority) newRefreshLocked(email string) string {
	acc := a.accountLocked(email)
	tok := randomToken("1//fake-")
	acc.refresh[tok] = true
	a.refresh[tok] = email
	return tok
}

func (a *authority) newAccessLocked(email, refresh string) (string, time.Duration) {
	now := a.s.now()
	if len(a.access) >= a.sweepAt {
		for k, t := range a.access {
			if !now.Before(t.expires) {
				delete(a.access, k)
			}
		}
		a.sweepAt = max(1024, 2*len(a.access))
	}
	ttl := a.s.opts.AccessTokenTTL
	tok := randomToken("ya29.fake-")
	a.access[tok] = accessToken{email: email, refresh: refresh, expires: now.Add(ttl)}
	return tok, ttl
}

// AccessToken issues an access token for a registered account directly, for
// clients built with oauth2.StaticTokenSource.
func (s *Server) AccessToken(email string) (string, error) {
	a := s.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	e := normEmail(email)
	if _, ok := a.accounts[e]; !ok {
		return "", fmt.Errorf("googlefake: access token: %w: %s", ErrUnknownAccount, email)
	}
	tok, _ := a.newAccessLocked(e, "")
	return tok, nil
}

// RevokeRefreshToken revokes every refresh token of the account and the
// access tokens issued from them, as Google does when a user removes the
// app's access: the token endpoint then answers 400 invalid_grant and API
// calls with those access tokens 401.
func (s *Server) RevokeRefreshToken(email string) {
	a := s.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	e := normEmail(email)
	acc := a.accounts[e]
	if acc == nil {
		return
	}
	for tok := range acc.refresh {
		delete(a.refresh, tok)
	}
	clear(acc.refresh)
	for k, t := range a.access {
		if t.email == e && t.refresh != "" {
			delete(a.access, k)
		}
	}
}

// ExpireAccessTokens makes every access token of the account invalid (API
// calls with them get 401) while its refresh tokens keep working.
func (s *Server) ExpireAccessTokens(email string) {
	a := s.auth
	a.mu.Lock()
	defer a.mu.Unlock()
	e := normEmail(email)
	for k, t := range a.access {
		if t.email == e {
			delete(a.access, k)
		}
	}
}

// SetConsentAccount sets the email the consent endpoint approves ("" to
// approve only a known login_hint).
func (s *Server) SetConsentAccount(email string) {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	s.auth.consent = normEmail(email)
}

// SetConsentAs makes email the account that consents, whatever the
// login_hint asks for (a person who signs in with another address); ""
// goes back to the hint or the consent account.
func (s *Server) SetConsentAs(email string) {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	s.auth.consentAs = normEmail(email)
}

// DenyConsent makes every consent end as if the person clicked "Cancel":
// a redirect with error=access_denied (false: consent again).
func (s *Server) DenyConsent(deny bool) {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	s.auth.deny = deny
}

// LastConsent returns the parameters of the latest request to the
// authorization endpoint (nil before any).
func (s *Server) LastConsent() url.Values {
	s.auth.mu.Lock()
	defer s.auth.mu.Unlock()
	out := url.Values{}
	for k, v := range s.auth.last {
		out[k] = append([]string(nil), v...)
	}
	if s.auth.last == nil {
		return nil
	}
	return out
}

// authenticate returns the account of the request's bearer token.
func (a *authority) authenticate(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		if a.s.opts.AnonymousAccount != "" {
			return normEmail(a.s.opts.AnonymousAccount), nil
		}
		return "", errUnauthenticated("Request is missing required authentication credential. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return "", errUnauthenticated("Request had invalid authentication credentials.")
	}
	a.mu.Lock()
	t, ok := a.access[strings.TrimSpace(tok)]
	a.mu.Unlock()
	if !ok || !a.s.now().Before(t.expires) {
		return "", errUnauthenticated("Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential.")
	}
	return t.email, nil
}

func errUnauthenticated(msg string) *apiError {
	return &apiError{
		Code: 401, Status: "UNAUTHENTICATED", Reason: "authError", Message: msg,
		Header: http.Header{"Www-Authenticate": {`Bearer realm="https://accounts.google.com/", error="invalid_token"`}},
	}
}

func errOAuth(code int, oauthCode, desc string) *apiError {
	return &apiError{Code: code, Status: strings.ToUpper(oauthCode), Reason: oauthCode, Message: desc, OAuthCode: oauthCode}
}

// ---- token endpoint ----

func (a *authority) routeToken(r *http.Request) (*endpoint, map[string]string, error) {
	if r.Method != http.MethodPost {
		return nil, nil, errMethod()
	}
	return &endpoint{method: MethodToken, oauth: true, handle: a.token}, nil, nil
}

type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope,omitempty"`
	TokenType    string `json:"token_type"`
	IDToken      string `json:"id_token,omitempty"`
}

func (a *authority) token(c *call) (any, error) {
	form, err := url.ParseQuery(string(c.body))
	if err != nil {
		return nil, errOAuth(400, "invalid_request", "Malformed form body.")
	}
	if err := a.checkClient(c.r, form); err != nil {
		return nil, err
	}
	switch gt := form.Get("grant_type"); gt {
	case "refresh_token":
		return a.refreshGrant(form.Get("refresh_token"))
	case "authorization_code":
		return a.codeGrant(form)
	case "":
		return nil, errOAuth(400, "invalid_request", "Missing required parameter: grant_type")
	default:
		return nil, errOAuth(400, "unsupported_grant_type", "Invalid grant_type: "+gt)
	}
}

// checkClient verifies the client credentials (Basic auth or form) when the
// server was configured with them.
func (a *authority) checkClient(r *http.Request, form url.Values) error {
	want := a.s.opts
	if want.ClientID == "" {
		return nil
	}
	id, secret, ok := r.BasicAuth()
	if ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = form.Get("client_id"), form.Get("client_secret")
	}
	if id != want.ClientID || subtle.ConstantTimeCompare([]byte(secret), []byte(want.ClientSecret)) != 1 {
		return errOAuth(401, "invalid_client", "The OAuth client was not found.")
	}
	return nil
}

func ttlSeconds(d time.Duration) int64 { return max(1, int64((d+time.Second-1)/time.Second)) }

func (a *authority) refreshGrant(refresh string) (any, error) {
	if refresh == "" {
		return nil, errOAuth(400, "invalid_request", "Missing required parameter: refresh_token")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	email, ok := a.refresh[refresh]
	if !ok {
		return nil, errOAuth(400, "invalid_grant", "Token has been expired or revoked.")
	}
	tok, ttl := a.newAccessLocked(email, refresh)
	return tokenResponse{AccessToken: tok, ExpiresIn: ttlSeconds(ttl), Scope: defaultScope, TokenType: "Bearer"}, nil
}

func (a *authority) codeGrant(form url.Values) (any, error) {
	code := form.Get("code")
	a.mu.Lock()
	ac, ok := a.codes[code]
	delete(a.codes, code) // one use only, even when it fails
	a.mu.Unlock()
	if !ok || !a.s.now().Before(ac.expires) {
		return nil, errOAuth(400, "invalid_grant", "Malformed auth code.")
	}
	if form.Get("redirect_uri") != ac.redirectURI {
		return nil, errOAuth(400, "redirect_uri_mismatch", "Bad Request")
	}
	if ac.challenge != "" {
		verifier := form.Get("code_verifier")
		switch {
		case verifier == "":
			return nil, errOAuth(400, "invalid_grant", "Missing code verifier.")
		case subtle.ConstantTimeCompare([]byte(pkceS256(verifier)), []byte(ac.challenge)) != 1:
			return nil, errOAuth(400, "invalid_grant", "Invalid code verifier.")
		}
	}
	a.mu.Lock()
	refresh := ""
	if ac.offline {
		// Only access_type=offline gets a refresh token.
		refresh = a.newRefreshLocked(ac.email)
	}
	tok, ttl := a.newAccessLocked(ac.email, refresh)
	a.mu.Unlock()
	idToken, err := a.s.keys.sign(a.s.now(), IDTokenClaims{
		Audience: ac.clientID, Email: ac.email, Subject: subjectOf(ac.email),
	}, nil)
	if err != nil {
		return nil, err
	}
	scope := ac.scope
	if scope == "" {
		scope = defaultScope
	}
	return tokenResponse{
		AccessToken: tok, ExpiresIn: ttlSeconds(ttl), RefreshToken: refresh,
		Scope: scope, TokenType: "Bearer", IDToken: idToken,
	}, nil
}

// pkceS256 is the S256 code challenge of a verifier: base64url of its
// SHA-256, without padding.
func pkceS256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// subjectOf returns a stable Google-style numeric user id for an email.
func subjectOf(email string) string {
	sum := sha256.Sum256([]byte(normEmail(email)))
	return "1" + strconv.FormatUint(binary.BigEndian.Uint64(sum[:8])%1e18, 10)
}

// ---- consent endpoint ----

func (a *authority) routeConsent(r *http.Request) (*endpoint, map[string]string, error) {
	if r.Method != http.MethodGet {
		return nil, nil, errMethod()
	}
	return &endpoint{method: MethodConsent, oauth: true, handle: a.consentHandler}, nil, nil
}

// knownScopes are the scopes the authorization endpoint grants; another
// is invalid_scope.
var knownScopes = map[string]bool{
	"https://www.googleapis.com/auth/gmail.modify":   true,
	"https://www.googleapis.com/auth/gmail.readonly": true,
	"https://www.googleapis.com/auth/gmail.metadata": true,
	"https://www.googleapis.com/auth/gmail.labels":   true,
	"https://mail.google.com/":                       true,
	"https://www.googleapis.com/auth/spreadsheets":   true,
	"https://www.googleapis.com/auth/userinfo.email": true,
	"openid": true, "email": true, "profile": true,
}

// pkceChars reports whether a code_challenge is 43 to 128 characters of
// RFC 7636's unreserved set.
func pkceChars(s string) bool {
	if len(s) < 43 || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || strings.ContainsRune("-._~", r)) {
			return false
		}
	}
	return true
}

// consentHandler is Google's authorization endpoint ("Using OAuth 2.0 for
// Web Server Applications", developers.google.com/identity/protocols/
// oauth2/web-server, step 2): it checks the request as Google does, then
// approves at once and redirects back with a code, as if the consenting
// account had clicked "Allow" (or "Cancel" after DenyConsent).
func (a *authority) consentHandler(c *call) (any, error) {
	q := c.query
	a.mu.Lock()
	a.last = url.Values{}
	for k, v := range q {
		a.last[k] = append([]string(nil), v...)
	}
	a.mu.Unlock()
	// Errors in the client or the redirect URI are shown to the person, not
	// redirected (there is no trusted place to redirect to).
	clientID := q.Get("client_id")
	if clientID == "" {
		return nil, errOAuth(400, "invalid_request", "Missing required parameter: client_id")
	}
	if a.s.opts.ClientID != "" && clientID != a.s.opts.ClientID {
		return nil, errOAuth(401, "invalid_client", "The OAuth client was not found.")
	}
	redirectURI := q.Get("redirect_uri")
	u, err := url.Parse(redirectURI)
	if redirectURI == "" || err != nil || !u.IsAbs() {
		return nil, errOAuth(400, "invalid_request", "Missing or invalid redirect_uri.")
	}
	if len(a.s.opts.RedirectURIs) > 0 && !slices.Contains(a.s.opts.RedirectURIs, redirectURI) {
		return nil, errOAuth(400, "redirect_uri_mismatch", "The redirect URI in the request, "+redirectURI+", does not match the ones authorized for the OAuth client.")
	}
	switch rt := q.Get("response_type"); rt {
	case "code":
	case "":
		return nil, errOAuth(400, "invalid_request", "Missing required parameter: response_type")
	default:
		return nil, errOAuth(400, "unsupported_response_type", "Only response_type=code is supported.")
	}
	scopes := strings.Fields(q.Get("scope"))
	if len(scopes) == 0 {
		return nil, errOAuth(400, "invalid_request", "Missing required parameter: scope")
	}
	for _, sc := range scopes {
		if !knownScopes[sc] {
			return nil, errOAuth(400, "invalid_scope", "Some requested scopes were invalid: "+sc)
		}
	}
	offline := false
	switch at := q.Get("access_type"); at {
	case "offline":
		offline = true
	case "", "online":
	default:
		return nil, errOAuth(400, "invalid_request", "Invalid access_type: "+at)
	}
	// PKCE (RFC 7636), as Google: S256, or plain (the default).
	challenge := q.Get("code_challenge")
	switch method := q.Get("code_challenge_method"); {
	case challenge == "" && method != "":
		return nil, errOAuth(400, "invalid_request", "code_challenge_method without code_challenge.")
	case challenge == "":
	case !pkceChars(challenge):
		return nil, errOAuth(400, "invalid_request", "Invalid code_challenge: 43 to 128 characters of A-Z, a-z, 0-9, -, ., _ and ~.")
	case method == "S256":
	case method == "" || method == "plain":
		challenge = pkceS256(challenge)
	default:
		return nil, errOAuth(400, "invalid_request", "Invalid code_challenge_method.")
	}
	back := u.Query()
	if st := q.Get("state"); st != "" {
		back.Set("state", st)
	}

	a.mu.Lock()
	email, deny := a.consent, a.deny
	if hint := normEmail(q.Get("login_hint")); hint != "" {
		if _, known := a.accounts[hint]; known {
			email = hint
		}
	}
	if a.consentAs != "" {
		email = a.consentAs
	}
	a.mu.Unlock()
	if email == "" || deny {
		back.Set("error", "access_denied")
		u.RawQuery = back.Encode()
		return redirect(u.String()), nil
	}
	if !a.s.HasAccount(email) {
		a.s.Gmail.ensureMailbox(email)
		a.mu.Lock()
		a.accountLocked(email)
		a.mu.Unlock()
	}
	code := randomToken("4/fake-")
	a.mu.Lock()
	a.codes[code] = authCode{
		email: email, clientID: clientID, redirectURI: redirectURI, offline: offline,
		scope: strings.Join(scopes, " "), expires: a.s.now().Add(authCodeTTL), challenge: challenge,
	}
	a.mu.Unlock()
	back.Set("code", code)
	back.Set("scope", strings.Join(scopes, " "))
	u.RawQuery = back.Encode()
	return redirect(u.String()), nil
}

// ---- revoke endpoint ----

func (a *authority) routeRevoke(r *http.Request) (*endpoint, map[string]string, error) {
	if r.Method != http.MethodPost && r.Method != http.MethodGet {
		return nil, nil, errMethod()
	}
	return &endpoint{method: MethodRevoke, oauth: true, handle: a.revoke}, nil, nil
}

// revoke implements Google's revocation endpoint: the token (refresh or
// access) and its family are revoked.
func (a *authority) revoke(c *call) (any, error) {
	tok := c.query.Get("token")
	if tok == "" {
		form, _ := url.ParseQuery(string(c.body))
		tok = form.Get("token")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	refresh := ""
	if email, ok := a.refresh[tok]; ok {
		refresh = tok
		a.revoked = append(a.revoked, Revocation{Email: email, Token: tok, Refresh: true})
	} else if t, ok := a.access[tok]; ok {
		delete(a.access, tok)
		refresh = t.refresh
		a.revoked = append(a.revoked, Revocation{Email: t.email, Token: tok})
	} else {
		return nil, errOAuth(400, "invalid_token", "Token expired or revoked")
	}
	if refresh != "" {
		if email, ok := a.refresh[refresh]; ok {
			delete(a.refresh, refresh)
			if acc := a.accounts[email]; acc != nil {
				delete(acc.refresh, refresh)
			}
		}
		for k, t := range a.access {
			if t.refresh == refresh {
				delete(a.access, k)
			}
		}
	}
	return struct{}{}, nil
}
