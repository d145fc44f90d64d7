package web

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"mailroom/store"
)

const (
	sessionCookie = "mailroom_session"
	sessionKey    = "mailroom.web.session"
	csrfField     = "csrf"
	csrfHeader    = "X-CSRF-Token"
)

// loginView is the login page's data.
type loginView struct {
	Next       string
	Error      string
	NoPassword bool
}

func (s *server) loginPage(c *gin.Context) {
	if _, _, ok := s.loadSession(c); ok {
		Redirect(c, safeNext(c.Query("next")))
		return
	}
	Render(c, "login", loginView{Next: safeNext(c.Query("next")), NoPassword: !s.passwordSet()})
}

func (s *server) login(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 64<<10)
	if err := c.Request.ParseForm(); err != nil {
		Fail(c, formError(err))
		return
	}
	next := safeNext(c.Request.PostForm.Get("next"))
	ip, now := c.ClientIP(), s.now()
	if wait := s.limiter.wait(ip, now); wait > 0 {
		secs := int(wait.Round(time.Second).Seconds()) + 1
		c.Header("Retry-After", fmt.Sprint(secs))
		RenderStatus(c, http.StatusTooManyRequests, "login", loginView{Next: next,
			Error: fmt.Sprintf("Too many failed sign-ins from your address. Wait %s and try again.", plural(secs, "second", "seconds"))})
		return
	}
	ok, err := s.checkPassword(c.Request.PostForm.Get("password"))
	if errors.Is(err, errNoPassword) {
		RenderStatus(c, http.StatusServiceUnavailable, "login", loginView{Next: next, NoPassword: true})
		return
	}
	if err != nil {
		Fail(c, err)
		return
	}
	if !ok {
		s.limiter.fail(ip, now)
		RenderStatus(c, http.StatusUnauthorized, "login", loginView{Next: next, Error: "That password is not right."})
		return
	}
	s.limiter.reset(ip)
	cookie, err := s.newSession(now)
	if err != nil {
		Fail(c, err)
		return
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: cookie, Path: "/", MaxAge: int(s.sessionTTL.Seconds()),
		HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode,
	})
	s.log.Info("admin signed in", "client_ip", ip)
	Redirect(c, next)
}

func (s *server) logoutPage(c *gin.Context) { Render(c, "logout", nil) }

func (s *server) logout(c *gin.Context) {
	if ck, err := c.Request.Cookie(sessionCookie); err == nil {
		if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.SessionDelete(ck.Value) }); err != nil {
			Fail(c, fmt.Errorf("web: end session: %w", err))
			return
		}
	}
	http.SetCookie(c.Writer, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode})
	SetFlash(c, "ok", "You are signed out.")
	Redirect(c, "/admin/login")
}

// newSession stores a session and returns its cookie value. Expired
// sessions are swept in the same transaction.
func (s *server) newSession(now time.Time) (string, error) {
	cookie, csrf := randomToken(32), randomToken(32)
	err := s.deps.DB.Update(func(tx *store.Tx) error {
		if err := tx.SessionsExpire(now); err != nil {
			return err
		}
		return tx.SessionPut(cookie, store.Session{CSRF: csrf, CreatedAt: now.UTC(), ExpiresAt: now.Add(s.sessionTTL).UTC()})
	})
	if err != nil {
		return "", fmt.Errorf("web: store session: %w", err)
	}
	return cookie, nil
}

func (s *server) loadSession(c *gin.Context) (store.Session, string, bool) {
	ck, err := c.Request.Cookie(sessionCookie)
	if err != nil || ck.Value == "" || len(ck.Value) > 128 {
		return store.Session{}, "", false
	}
	var sess store.Session
	err = s.deps.DB.View(func(tx *store.Tx) error {
		sess, err = tx.SessionGet(ck.Value, s.now())
		return err
	})
	if err != nil {
		return store.Session{}, "", false
	}
	return sess, ck.Value, true
}

// requireAdmin lets a request through with a live session, and checks the
// CSRF token on every state-changing method.
func (s *server) requireAdmin(c *gin.Context) {
	sess, _, ok := s.loadSession(c)
	if !ok {
		isGet := c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead
		if !wantsHTML(c) && (!isGet || strings.HasSuffix(c.Request.URL.Path, ".json")) {
			Fail(c, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "Sign in to the admin page first."})
			return
		}
		Redirect(c, "/admin/login?next="+url.QueryEscape(c.Request.URL.RequestURI()))
		return
	}
	c.Set(sessionKey, sess)
	switch c.Request.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		c.Next()
		return
	}
	token := c.GetHeader(csrfHeader)
	if token == "" {
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, MaxBodyBytes)
		if err := c.Request.ParseForm(); err != nil {
			Fail(c, formError(err))
			return
		}
		token = c.Request.PostForm.Get(csrfField)
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(sess.CSRF)) != 1 {
		Fail(c, &Error{Status: http.StatusForbidden, Code: "csrf_failed", Message: "This form is out of date or came from another site. Reload the page and try again."})
		return
	}
	c.Next()
}

func formError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return tooLarge(tooBig.Limit)
	}
	return &Error{Status: http.StatusBadRequest, Code: "malformed_form", Message: "The form could not be read.", Err: err}
}

func sessionOf(c *gin.Context) (store.Session, bool) {
	v, ok := c.Get(sessionKey)
	if !ok {
		return store.Session{}, false
	}
	sess, ok := v.(store.Session)
	return sess, ok
}

// CSRFToken is the session's CSRF token, for forms and fetch calls made
// outside the templates' {{template "csrf" .}}; empty without a session.
func CSRFToken(c *gin.Context) string {
	sess, _ := sessionOf(c)
	return sess.CSRF
}

// safeNext keeps a post-login redirect on this site.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, `/\`) {
		return "/admin"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/admin"
	}
	return next
}

var errNoPassword = errors.New("web: no admin password is set")

func (s *server) passwordSet() bool {
	if s.deps.AdminPassword != "" {
		return true
	}
	set := false
	_ = s.deps.DB.View(func(tx *store.Tx) error { set = tx.AdminPasswordHash() != nil; return nil })
	return set
}

// checkPassword compares with MAILROOM_ADMIN_PASSWORD when set, else with
// the stored bcrypt hash.
func (s *server) checkPassword(pw string) (bool, error) {
	if s.deps.AdminPassword != "" {
		want, got := sha256.Sum256([]byte(s.deps.AdminPassword)), sha256.Sum256([]byte(pw))
		return subtle.ConstantTimeCompare(want[:], got[:]) == 1, nil
	}
	var hash []byte
	if err := s.deps.DB.View(func(tx *store.Tx) error { hash = tx.AdminPasswordHash(); return nil }); err != nil {
		return false, fmt.Errorf("web: read admin password hash: %w", err)
	}
	if hash == nil {
		return false, errNoPassword
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(pw)) == nil, nil
}

// EnsureAdminPassword prepares the admin login at start-up. With a password
// (MAILROOM_ADMIN_PASSWORD) it stores that password's bcrypt hash. Without
// one it keeps a stored hash, or, on first start, generates a password,
// stores its hash and returns it: print it once, it is never shown again.
func EnsureAdminPassword(db *store.DB, password string) (generated string, err error) {
	var existing []byte
	if err := db.View(func(tx *store.Tx) error { existing = tx.AdminPasswordHash(); return nil }); err != nil {
		return "", fmt.Errorf("web: read admin password hash: %w", err)
	}
	if password == "" && existing != nil {
		return "", nil
	}
	if password != "" && bcrypt.CompareHashAndPassword(existing, []byte(password)) == nil {
		return "", nil
	}
	if password == "" {
		generated = randomToken(18)
		password = generated
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if errors.Is(err, bcrypt.ErrPasswordTooLong) {
		return "", fmt.Errorf("web: MAILROOM_ADMIN_PASSWORD is longer than 72 bytes, the most bcrypt uses: %w", err)
	}
	if err != nil {
		return "", fmt.Errorf("web: hash admin password: %w", err)
	}
	if err := db.Update(func(tx *store.Tx) error { return tx.SetAdminPasswordHash(hash) }); err != nil {
		return "", fmt.Errorf("web: store admin password hash: %w", err)
	}
	return generated, nil
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// loginLimiter counts failed logins per client IP in a sliding window.
type loginLimiter struct {
	limit  int
	window time.Duration

	mu    sync.Mutex
	fails map[string][]time.Time
}

// maxTrackedIPs bounds the limiter's memory; past it, idle entries go.
const maxTrackedIPs = 10000

func newLoginLimiter(limit int, window time.Duration) *loginLimiter {
	return &loginLimiter{limit: limit, window: window, fails: map[string][]time.Time{}}
}

// wait is how long ip must wait before its next try; zero: it may try now.
func (l *loginLimiter) wait(ip string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	recent := l.recent(ip, now)
	if len(recent) < l.limit {
		return 0
	}
	return recent[len(recent)-l.limit].Add(l.window).Sub(now)
}

func (l *loginLimiter) fail(ip string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.fails) >= maxTrackedIPs {
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

func (l *loginLimiter) reset(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.fails, ip)
}

// recent returns ip's failures inside the window, dropping older ones.
func (l *loginLimiter) recent(ip string, now time.Time) []time.Time {
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
