package web

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/gmail"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/store"
)

// caller is who an API request comes from: an admin token, or a user
// token of one user.
type caller struct {
	admin   bool
	userID  string // the user of a user token
	tokenID string // empty for MAILROOM_API_TOKEN
}

const callerKey = "mailroom.web.caller"

func callerOf(c *gin.Context) caller {
	if v, ok := c.Get(callerKey); ok {
		if who, ok := v.(caller); ok {
			return who
		}
	}
	return caller{} // neither admin nor a user: reaches nothing
}

// touchEvery is how stale a token's "last used" may get before a request
// writes it again (one write per token per interval, not per request).
const touchEvery = time.Minute

var errTokenInvalid = &httpError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "The API token is not valid (unknown, expired or revoked)."}

// apiAuth requires "Authorization: Bearer <token>": MAILROOM_API_TOKEN
// (constant-time compare, an admin token) or a token made in the admin page
// or the API (looked up by its hash; an admin or a user token, refused once
// expired or revoked). The token is checked first and only failures are
// counted per client address: a client that keeps sending missing or bad
// tokens is answered 429, while a valid token from the same address (the
// same NAT, or a proxy without MAILROOM_TRUSTED_PROXIES) always passes.
// This keeps no token guessable: MAILROOM_API_TOKEN has at least 32
// characters and a made token 32 random bytes, so the limit is there to
// slow a noisy client, not to hide which secret is right.
func (s *server) apiAuth(c *gin.Context) {
	ip, now := c.ClientIP(), s.now()
	who, authErr, err := s.tokenCaller(c.GetHeader("Authorization"), now)
	if err != nil {
		s.fail(c, err)
		return
	}
	if authErr != nil {
		if wait := s.tokenFails.wait(ip, now); wait > 0 {
			s.fail(c, tooManyTokenFailures(wait))
			return
		}
		s.tokenFails.fail(ip, now)
		c.Header("WWW-Authenticate", authErr.challenge)
		s.fail(c, authErr.err)
		return
	}
	c.Set(callerKey, who)
	c.Next()
}

// tokenRefusal is why a request's token was not taken: its answer and the
// WWW-Authenticate challenge that goes with it.
type tokenRefusal struct {
	err       *httpError
	challenge string
}

var errTokenMissing = &httpError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "Send an API token as \"Authorization: Bearer <token>\"."}

// tokenCaller finds the caller an Authorization header names. A missing,
// unknown, expired or revoked token is a refusal; err is a store failure.
func (s *server) tokenCaller(header string, now time.Time) (caller, *tokenRefusal, error) {
	token, ok := bearerToken(header)
	if !ok {
		return caller{}, &tokenRefusal{errTokenMissing, `Bearer realm="mailroom"`}, nil
	}
	if s.deps.APIToken != "" {
		want, got := sha256.Sum256([]byte(s.deps.APIToken)), sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(want[:], got[:]) == 1 {
			return caller{admin: true}, nil, nil
		}
	}
	var t store.APIToken
	err := s.deps.DB.View(func(tx *store.Tx) error {
		var err error
		t, err = tx.APITokenLookup(token)
		return err
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return caller{}, nil, fmt.Errorf("web: look up an API token: %w", err)
	}
	if err != nil || t.Expired(now) || (!t.Admin && t.UserID == "") {
		return caller{}, &tokenRefusal{errTokenInvalid, `Bearer realm="mailroom", error="invalid_token"`}, nil
	}
	if now.Sub(t.LastUsed) >= touchEvery {
		if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.APITokenTouch(token, now) }); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("record API token use", "token_prefix", t.Prefix, "err", err)
		}
	}
	return caller{admin: t.Admin, userID: t.UserID, tokenID: t.ID}, nil, nil
}

func tooManyTokenFailures(wait time.Duration) *httpError {
	return &httpError{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: wait,
		Message: fmt.Sprintf("Too many requests with a missing or wrong token from your address; try again in %d seconds.", int(math.Ceil(wait.Seconds())))}
}

// bearerToken takes the token out of an Authorization header.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != "" && len(token) <= 512
}

// adminOnly lets admin tokens through and answers user tokens 403.
func (s *server) adminOnly(c *gin.Context) {
	if !callerOf(c).admin {
		s.fail(c, &httpError{Status: http.StatusForbidden, Code: "forbidden", Message: "This endpoint needs an admin token; a user token reaches only its own user's resources."})
		return
	}
	c.Next()
}

// scopeRule decides whether a user token's request reaches a resource: it
// finds what the request names (or fails to look).
type scopeRule func(s *server, c *gin.Context) (scopeCheck, error)

// scopeCheck is what a request names: the user that owns it (empty when
// there is no such thing), and the error to answer when it is not the
// caller's, which is the answer to an unknown id, so that another user's
// resource is not revealed.
type scopeCheck struct {
	owner    string
	notFound error
}

// scope lets admin tokens through, and a user token only when rule finds
// that the request is about its own user.
func (s *server) scope(rule scopeRule) gin.HandlerFunc {
	return func(c *gin.Context) {
		who := callerOf(c)
		if who.admin {
			c.Next()
			return
		}
		got, err := rule(s, c)
		if err != nil {
			s.fail(c, err)
			return
		}
		if who.userID == "" || got.owner != who.userID {
			s.fail(c, got.notFound)
			return
		}
		c.Next()
	}
}

// userIn: the user id is the path parameter param.
func userIn(param string) scopeRule {
	return func(_ *server, c *gin.Context) (scopeCheck, error) {
		return scopeCheck{c.Param(param), fmt.Errorf("web: user %s: %w", c.Param(param), rules.ErrNotFound)}, nil
	}
}

// ownerOf looks up the owner of one stored resource.
func ownerOf(s *server, get func(tx *store.Tx) (string, error)) (string, error) {
	var owner string
	err := s.deps.DB.View(func(tx *store.Tx) (err error) { owner, err = get(tx); return err })
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("web: find the owner: %w", err)
	}
	return owner, nil
}

// accountIn: the Gmail account whose id is the path parameter param.
func accountIn(param string) scopeRule {
	return func(s *server, c *gin.Context) (scopeCheck, error) {
		id := c.Param(param)
		owner, err := ownerOf(s, func(tx *store.Tx) (string, error) { a, err := tx.AccountGet(id); return a.UserID, err })
		return scopeCheck{owner, fmt.Errorf("web: account %s: %w", id, store.ErrNotFound)}, err
	}
}

// ruleIn: the rule whose id is the path parameter param.
func ruleIn(param string) scopeRule {
	return func(s *server, c *gin.Context) (scopeCheck, error) {
		id := c.Param(param)
		owner, err := ownerOf(s, func(tx *store.Tx) (string, error) {
			r, err := tx.RuleGet(id)
			if err == nil && r.Deleted {
				return "", store.ErrNotFound
			}
			return r.UserID, err
		})
		return scopeCheck{owner, fmt.Errorf("web: rule %s: %w", id, rules.ErrNotFound)}, err
	}
}

// formIn: the form whose id is the path parameter param.
func formIn(param string) scopeRule {
	return func(s *server, c *gin.Context) (scopeCheck, error) {
		id := c.Param(param)
		owner, err := ownerOf(s, func(tx *store.Tx) (string, error) { f, err := tx.FormGet(id); return f.UserID, err })
		return scopeCheck{owner, fmt.Errorf("web: form %s: %w", id, sheets.ErrFormNotFound)}, err
	}
}

// inQuery: a list filtered by the query parameter param. A user token's
// list is always filtered to its user (the parameter is set when absent);
// asking for another user's answers 404.
func inQuery(param string) scopeRule {
	return func(_ *server, c *gin.Context) (scopeCheck, error) {
		who := callerOf(c)
		q := c.Request.URL.Query()
		if q.Get(param) == "" && who.userID != "" {
			q.Set(param, who.userID)
			c.Request.URL.RawQuery = q.Encode()
		}
		return scopeCheck{q.Get(param), fmt.Errorf("web: user %s: %w", q.Get(param), rules.ErrNotFound)}, nil
	}
}

// inBody: a JSON body naming "userId" and maybe "accountId" (connecting
// an account, creating a form). A user token may name only its own user
// and its own accounts (any other, known or not: 404 naming the field); a
// body it cannot read is answered 400 (or 413) here.
func inBody(s *server, c *gin.Context) (scopeCheck, error) {
	who := callerOf(c)
	if c.Request.Body == nil || c.Request.ContentLength > maxBodyBytes {
		return scopeCheck{owner: who.userID}, nil
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes))
	if err != nil {
		return scopeCheck{}, jsonError(err, maxBodyBytes)
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(raw))
	var named struct {
		UserID    string `json:"userId"`
		AccountID string `json:"accountId"`
	}
	if err := json.Unmarshal(raw, &named); err != nil {
		return scopeCheck{}, jsonError(err, maxBodyBytes) // closed: a body it cannot read is not let through
	}
	if named.UserID != "" && named.UserID != who.userID {
		return scopeCheck{named.UserID, &httpError{Status: http.StatusNotFound, Code: "not_found", Field: "userId", Message: "There is no such user."}}, nil
	}
	if named.AccountID != "" {
		owner, err := ownerOf(s, func(tx *store.Tx) (string, error) { a, err := tx.AccountGet(named.AccountID); return a.UserID, err })
		if err != nil {
			return scopeCheck{}, err
		}
		if owner != who.userID {
			return scopeCheck{owner, &httpError{Status: http.StatusNotFound, Code: "not_found", Field: "accountId", Message: "There is no such Google account."}}, nil
		}
	}
	return scopeCheck{owner: who.userID}, nil
}

// metricsAuth wants "Authorization: Bearer $MAILROOM_METRICS_TOKEN" when
// that setting is set; failures are rate limited like API tokens.
func (s *server) metricsAuth(c *gin.Context) {
	if s.deps.MetricsToken == "" {
		c.Next()
		return
	}
	ip, now := c.ClientIP(), s.now()
	if wait := s.metricsFails.wait(ip, now); wait > 0 {
		s.fail(c, tooManyTokenFailures(wait))
		return
	}
	token, _ := bearerToken(c.GetHeader("Authorization"))
	want, got := sha256.Sum256([]byte(s.deps.MetricsToken)), sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(want[:], got[:]) != 1 {
		s.metricsFails.fail(ip, now)
		c.Header("WWW-Authenticate", `Bearer realm="mailroom metrics"`)
		s.fail(c, &httpError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "Scrape /metrics with \"Authorization: Bearer\" and the value of MAILROOM_METRICS_TOKEN."})
		return
	}
	c.Next()
}

// pushLimit answers 429 to a push source whose recent pushes carried too
// many missing or wrong tokens, and counts each push answered 401. A source
// is the client IP and the envelope's subscription: Pub/Sub's egress
// addresses are shared between Google's customers, so one customer's bad
// pushes must not block another's. A push with a bearer token is verified
// even from a limited source (a Google signature cannot be guessed, and a
// real push must pass); a limited source's ?token= or tokenless push is
// refused before any check, so the shared secret cannot be guessed.
func (s *server) pushLimit(c *gin.Context) {
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, gmail.MaxPushBody+1))
	if err != nil {
		s.fail(c, &httpError{Status: http.StatusBadRequest, Code: "malformed_push", Message: "The push body could not be read.", Err: err})
		return
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	source, now := c.ClientIP()+" "+pushSubscription(body), s.now()
	if wait := s.pushFails.wait(source, now); wait > 0 {
		scheme, token, _ := strings.Cut(strings.TrimSpace(c.GetHeader("Authorization")), " ")
		if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" || c.Query("token") != "" {
			s.fail(c, tooManyTokenFailures(wait))
			return
		}
	}
	c.Next()
	if c.Writer.Status() == http.StatusUnauthorized {
		s.pushFails.fail(source, now)
	}
}

// maxSubscriptionKey bounds the subscription name kept per push source
// (Pub/Sub's are at most 255 characters after "projects/P/subscriptions/").
const maxSubscriptionKey = 512

// pushSubscription is the envelope's subscription name, or "" when the
// body is not an envelope that names one.
func pushSubscription(body []byte) string {
	var env struct {
		Subscription string `json:"subscription"`
	}
	if json.Unmarshal(body, &env) != nil {
		return ""
	}
	if len(env.Subscription) > maxSubscriptionKey {
		return env.Subscription[:maxSubscriptionKey] // a key, never shown
	}
	return env.Subscription
}

// failLimiter counts failures per client IP in a sliding window.
type failLimiter struct {
	limit  int
	window time.Duration

	mu    sync.Mutex
	fails map[string][]time.Time
}

// maxTrackedIPs bounds a limiter's memory; past it, idle entries go.
const maxTrackedIPs = 10000

func newFailLimiter(limit int, window time.Duration) *failLimiter {
	return &failLimiter{limit: limit, window: window, fails: map[string][]time.Time{}}
}

// wait is how long ip must wait before its next try; zero: it may try now.
func (l *failLimiter) wait(ip string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waitLocked(ip, now)
}

func (l *failLimiter) waitLocked(ip string, now time.Time) time.Duration {
	recent := l.recent(ip, now)
	if len(recent) < l.limit {
		return 0
	}
	return max(recent[len(recent)-l.limit].Add(l.window).Sub(now), time.Second)
}

// fail records a failure of ip at now.
func (l *failLimiter) fail(ip string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(ip, now)
}

func (l *failLimiter) failLocked(ip string, now time.Time) {
	if _, known := l.fails[ip]; !known && len(l.fails) >= maxTrackedIPs {
		for k := range l.fails {
			if len(l.recent(k, now)) == 0 {
				delete(l.fails, k)
			}
		}
		for k := range l.fails { // still full: forget arbitrary ones
			if len(l.fails) < maxTrackedIPs {
				break
			}
			delete(l.fails, k)
		}
	}
	recent := append(l.recent(ip, now), now)
	if len(recent) > l.limit {
		recent = recent[len(recent)-l.limit:]
	}
	l.fails[ip] = recent
}

// recent returns ip's failures inside the window, dropping older ones.
func (l *failLimiter) recent(ip string, now time.Time) []time.Time {
	all := l.fails[ip]
	i := 0
	for i < len(all) && now.Sub(all[i]) >= l.window {
		i++
	}
	if i == len(all) {
		delete(l.fails, ip)
		return nil
	}
	l.fails[ip] = all[i:]
	return all[i:]
}

// retryAfterSeconds is d in whole seconds, rounded up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
