package web

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"mailroom/store"
)

const (
	sessionKey = "mailroom.web.session"
	csrfField  = "csrf"
	csrfHeader = "X-CSRF-Token"
)

// cookieNames are the admin page's cookies: with the __Host- prefix when
// the public URL is https (the browser then insists on Secure, Path=/ and
// no Domain, so a sibling subdomain cannot plant one).
type cookieNames struct {
	session, preSession, flash, device, draft string
	// connect binds a connect link's continue form to the browser that
	// was shown it.
	connect string
}

func newCookieNames(secure bool) cookieNames {
	prefix := ""
	if secure {
		prefix = "__Host-"
	}
	return cookieNames{session: prefix + "mailroom_session", preSession: prefix + "mailroom_login",
		flash: prefix + "mailroom_flash", device: prefix + "mailroom_device", draft: prefix + "mailroom_draft",
		connect: prefix + "mailroom_connect"}
}

// cookieKeys signs the cookies the server does not store: the login
// form's pre-session, the flash message and the known-device mark. The key
// is made at start, so a restart only makes a login form or a flash go
// stale.
type cookieKeys struct{ mac []byte }

func newCookieKeys() cookieKeys {
	k := make([]byte, 32)
	_, _ = rand.Read(k) // crypto/rand never fails on supported platforms
	return cookieKeys{mac: k}
}

// sign is the MAC of value for purpose, URL-safe base64.
func (k cookieKeys) sign(purpose, value string) string {
	m := hmac.New(sha256.New, k.mac)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (k cookieKeys) verify(purpose, value, mac string) bool {
	return value != "" && subtle.ConstantTimeCompare([]byte(k.sign(purpose, value)), []byte(mac)) == 1
}

// loginView is the login page's data.
type loginView struct {
	Next       string
	Error      string
	NoPassword bool
	CSRF       string // bound to the pre-session cookie
}

func (s *server) cookie(name, value string, maxAge int) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode}
}

// renderLogin draws the login form with a fresh pre-session: a random
// cookie, and the form's CSRF token signed over it. A login post must carry
// both (login CSRF: another site cannot sign a browser in).
func (s *server) renderLogin(c *gin.Context, status int, v loginView) {
	pre := randomToken(24)
	http.SetCookie(c.Writer, s.cookie(s.cookies.preSession, pre, int(loginFormTTL.Seconds())))
	v.CSRF = s.keys.sign("login", pre)
	s.render(c, status, "login", v)
}

// loginFormTTL is how long a login form stays valid.
const loginFormTTL = time.Hour

func (s *server) loginPage(c *gin.Context) {
	if _, _, ok := s.loadSession(c); ok {
		redirect(c, safeNext(c.Query("next")))
		return
	}
	s.renderLogin(c, http.StatusOK, loginView{Next: safeNext(c.Query("next")), NoPassword: !s.passwordSet()})
}

// login checks the admin password. The attempt is counted before the
// password is checked (so parallel guesses cannot outrun the limit), per
// client address and against an account-wide ceiling (which a browser that
// signed in before is exempt from, so the admin can still sign in during a
// distributed guess), and bcrypt runs one comparison at a time.
func (s *server) login(c *gin.Context) {
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 64<<10)
	if err := c.Request.ParseForm(); err != nil {
		s.fail(c, formError(err))
		return
	}
	next := safeNext(c.Request.PostForm.Get("next"))
	pre, err := c.Request.Cookie(s.cookies.preSession)
	if err != nil || !s.keys.verify("login", pre.Value, c.Request.PostForm.Get(csrfField)) {
		s.renderLogin(c, http.StatusForbidden, loginView{Next: next,
			Error: "This sign-in form is out of date or came from another site. Enter the password again."})
		return
	}
	ip, now := c.ClientIP(), s.now()
	wait, counted := s.limiter.take(ip, now, s.knownBrowser(c))
	if wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		c.Header("Retry-After", retryAfterSeconds(wait))
		s.renderLogin(c, http.StatusTooManyRequests, loginView{Next: next,
			Error: fmt.Sprintf("Too many failed sign-ins. Wait %s and try again.", plural(secs, "second", "seconds"))})
		return
	}
	ok, err := s.checkPasswordBounded(c.Request.Context(), c.Request.PostForm.Get("password"))
	if errors.Is(err, errNoPassword) {
		s.renderLogin(c, http.StatusServiceUnavailable, loginView{Next: next, NoPassword: true})
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	if !ok {
		s.log.Warn("admin sign-in refused", "client_ip", ip)
		s.renderLogin(c, http.StatusUnauthorized, loginView{Next: next, Error: "That password is not right."})
		return
	}
	s.limiter.succeeded(ip, counted)
	cookie, err := s.newSession(now, c.Request.UserAgent(), ip)
	if err != nil {
		s.fail(c, err)
		return
	}
	http.SetCookie(c.Writer, s.cookie(s.cookies.session, cookie, int(s.sessionTTL.Seconds())))
	http.SetCookie(c.Writer, s.cookie(s.cookies.preSession, "", -1))
	dev := randomToken(16)
	http.SetCookie(c.Writer, s.cookie(s.cookies.device, dev+"."+s.keys.sign(s.devicePurpose(), dev), int((400*24*time.Hour).Seconds())))
	s.log.Info("admin signed in", "client_ip", ip)
	redirect(c, next)
}

// knownBrowser reports whether the request carries a known-browser cookie
// ("id.mac") this server signed.
func (s *server) knownBrowser(c *gin.Context) bool {
	ck, err := c.Request.Cookie(s.cookies.device)
	if err != nil {
		return false
	}
	id, mac, _ := strings.Cut(ck.Value, ".")
	return s.keys.verify(s.devicePurpose(), id, mac)
}

// devicePurpose is what known-browser marks are signed for: "End all
// sessions" moves it on, so every mark signed before stops counting (a
// browser or a copied cookie the admin meant to shut out does not keep
// its way past the sign-in limit).
func (s *server) devicePurpose() string {
	return "device/" + strconv.FormatUint(s.deviceEpoch.Load(), 10)
}

// checkPasswordBounded is checkPassword with at most one comparison at a
// time (bcrypt is deliberately slow; parallel guesses must not take every
// core).
func (s *server) checkPasswordBounded(ctx context.Context, pw string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	select {
	case s.bcryptSem <- struct{}{}:
		defer func() { <-s.bcryptSem }()
	case <-ctx.Done():
		return false, &httpError{Status: http.StatusServiceUnavailable, Code: "not_ready", RetryAfter: time.Second, Message: "Sign-in is busy; try again in a moment.", Err: ctx.Err()}
	}
	return s.checkPassword(pw)
}

func (s *server) logoutPage(c *gin.Context) { s.render(c, http.StatusOK, "logout", nil) }

func (s *server) logout(c *gin.Context) {
	if ck, err := c.Request.Cookie(s.cookies.session); err == nil {
		if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.SessionDelete(ck.Value) }); err != nil {
			s.fail(c, fmt.Errorf("web: end session: %w", err))
			return
		}
	}
	http.SetCookie(c.Writer, s.cookie(s.cookies.session, "", -1))
	s.setFlash(c, "ok", "You are signed out.")
	redirect(c, "/admin/login")
}

// endSessions is the admin page's "End all sessions": every session ends,
// this one too.
func (s *server) endSessions(c *gin.Context) {
	var n int
	if err := s.deps.DB.Update(func(tx *store.Tx) (err error) { n, err = tx.SessionsDeleteAll(""); return err }); err != nil {
		s.fail(c, fmt.Errorf("web: end sessions: %w", err))
		return
	}
	s.deviceEpoch.Add(1)
	s.log.Info("admin sessions ended", "sessions", n)
	http.SetCookie(c.Writer, s.cookie(s.cookies.session, "", -1))
	http.SetCookie(c.Writer, s.cookie(s.cookies.device, "", -1))
	s.setFlash(c, "ok", fmt.Sprintf("%s ended; sign in again.", plural(n, "session", "sessions")))
	redirect(c, "/admin/login")
}

// newSession stores a session for the browser (its User-Agent and
// address, shown in the sessions list) and returns its cookie value. A new
// sign-in ends no other session: a phone's sign-in leaves the laptop's.
func (s *server) newSession(now time.Time, userAgent, ip string) (string, error) {
	cookie := randomToken(32)
	sess := store.Session{ID: randomToken(12), CSRF: randomToken(32), CreatedAt: now.UTC(), ExpiresAt: now.Add(s.sessionTTL).UTC(),
		Device: truncateText(200, userAgent), IP: ip, LastSeen: now.UTC()}
	if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.SessionPut(cookie, sess) }); err != nil {
		return "", fmt.Errorf("web: store session: %w", err)
	}
	return cookie, nil
}

// sessionSeenEvery is how often a session's last-seen time is written:
// at most once a minute, not on every request.
const sessionSeenEvery = time.Minute

// endSession ends one session, by its ID, from the sessions list; ending
// the one in use signs this browser out.
func (s *server) endSession(c *gin.Context) {
	id := c.Param("id")
	cur, _ := sessionOf(c)
	err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.SessionEnd(id) })
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.setFlash(c, "error", "That session had already ended.")
	case err != nil:
		s.fail(c, fmt.Errorf("web: end session: %w", err))
		return
	default:
		s.log.Info("admin session ended", "session_id", id)
		if id == cur.ID {
			http.SetCookie(c.Writer, s.cookie(s.cookies.session, "", -1))
			s.setFlash(c, "ok", "This session is ended; sign in again.")
			redirect(c, "/admin/login")
			return
		}
		s.setFlash(c, "ok", "The session is ended; that browser must sign in again.")
	}
	redirect(c, "/admin/tokens#sessions")
}

// sessionRow is one line of the sessions list.
type sessionRow struct {
	store.Session
	Browser string // the device in words: "Chrome on Android"
	Current bool   // this browser's session
}

// sessionRows lists the live sessions for the admin page.
func (s *server) sessionRows(c *gin.Context) ([]sessionRow, error) {
	var list []store.Session
	if err := s.deps.DB.View(func(tx *store.Tx) (err error) { list, err = tx.Sessions(s.now()); return err }); err != nil {
		return nil, fmt.Errorf("web: list sessions: %w", err)
	}
	cur, _ := sessionOf(c)
	rows := make([]sessionRow, 0, len(list))
	for _, x := range list {
		rows = append(rows, sessionRow{Session: x, Browser: browserName(x.Device), Current: x.ID != "" && x.ID == cur.ID})
	}
	return rows, nil
}

// browserName says which browser on which system a User-Agent names, in
// the words people use ("Firefox on Linux"); the raw string is shown on
// hover.
func browserName(ua string) string {
	if ua == "" {
		return "Unknown browser"
	}
	browser := "A browser"
	for _, b := range []struct{ token, name string }{
		{"Edg/", "Edge"}, {"OPR/", "Opera"}, {"Firefox/", "Firefox"}, {"HeadlessChrome/", "Headless Chrome"},
		{"Chrome/", "Chrome"}, {"Chromium/", "Chromium"}, {"Safari/", "Safari"}, {"curl/", "curl"},
	} {
		if strings.Contains(ua, b.token) {
			browser = b.name
			break
		}
	}
	for _, o := range []struct{ token, name string }{
		{"Android", "Android"}, {"iPhone", "iPhone"}, {"iPad", "iPad"}, {"Windows", "Windows"},
		{"Mac OS X", "macOS"}, {"CrOS", "ChromeOS"}, {"Linux", "Linux"},
	} {
		if strings.Contains(ua, o.token) {
			return browser + " on " + o.name
		}
	}
	return browser
}

func (s *server) loadSession(c *gin.Context) (store.Session, string, bool) {
	ck, err := c.Request.Cookie(s.cookies.session)
	if err != nil || ck.Value == "" || len(ck.Value) > 128 {
		return store.Session{}, "", false
	}
	var sess store.Session
	now := s.now()
	err = s.deps.DB.View(func(tx *store.Tx) error {
		sess, err = tx.SessionGet(ck.Value, now)
		return err
	})
	if err != nil {
		return store.Session{}, "", false
	}
	if now.Sub(sess.LastSeen) >= sessionSeenEvery {
		sess.LastSeen = now.UTC()
		if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.SessionTouch(ck.Value, sess.LastSeen) }); err != nil {
			s.log.Warn("record a session's last request", "err", err)
		}
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
			s.fail(c, &httpError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "Sign in to the admin page first."})
			return
		}
		redirect(c, "/admin/login?next="+url.QueryEscape(c.Request.URL.RequestURI()))
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
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxBodyBytes)
		if err := c.Request.ParseForm(); err != nil {
			s.fail(c, formError(err))
			return
		}
		token = c.Request.PostForm.Get(csrfField)
	}
	if subtle.ConstantTimeCompare([]byte(token), []byte(sess.CSRF)) != 1 {
		s.fail(c, &httpError{Status: http.StatusForbidden, Code: "csrf_failed", Message: "This form is out of date or came from another site. Reload the page and try again."})
		return
	}
	c.Next()
}

func formError(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return tooLarge(tooBig.Limit)
	}
	return &httpError{Status: http.StatusBadRequest, Code: "malformed_form", Message: "The form could not be read.", Err: err}
}

func sessionOf(c *gin.Context) (store.Session, bool) {
	v, ok := c.Get(sessionKey)
	if !ok {
		return store.Session{}, false
	}
	sess, ok := v.(store.Session)
	return sess, ok
}

// csrfToken is the session's CSRF token, for forms and fetch calls made
// outside the templates' {{template "csrf" .}}; empty without a session.
func csrfToken(c *gin.Context) string {
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
	// A new password ends every session signed in with the old one.
	if err := db.Update(func(tx *store.Tx) error {
		if _, err := tx.SessionsDeleteAll(""); err != nil {
			return err
		}
		return tx.SetAdminPasswordHash(hash)
	}); err != nil {
		return "", fmt.Errorf("web: store admin password hash: %w", err)
	}
	return generated, nil
}

// ResetAdminPassword generates a new admin password, stores its bcrypt
// hash in place of the old one, ends every session and returns the new
// password (mailroom reset-password, with the service stopped).
func ResetAdminPassword(db *store.DB) (string, error) {
	password := randomToken(18)
	if _, err := EnsureAdminPassword(db, password); err != nil {
		return "", err
	}
	return password, nil
}

func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// loginLimiter counts sign-in attempts: per client IP, and for the one
// admin account from every client together. An attempt is counted when it
// starts (take) and forgiven when it turns out right (succeeded).
type loginLimiter struct {
	mu      sync.Mutex
	perIP   *failLimiter
	account *failLimiter
}

func newLoginLimiter(limit, accountLimit int, window time.Duration) *loginLimiter {
	return &loginLimiter{perIP: newFailLimiter(limit, window), account: newFailLimiter(accountLimit, window)}
}

// take counts an attempt of ip, or returns how long ip must wait. A known
// browser (one that signed in before) is held by its address's limit only:
// it neither meets nor counts toward the account-wide ceiling. counted
// reports whether the account-wide count took the attempt.
func (l *loginLimiter) take(ip string, now time.Time, known bool) (wait time.Duration, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.perIP.waitLocked(ip, now); w > 0 {
		return w, false
	}
	if !known {
		if w := l.account.waitLocked("", now); w > 0 {
			return w, false
		}
		l.account.failLocked("", now)
	}
	l.perIP.failLocked(ip, now)
	return 0, !known
}

// succeeded forgives ip's failures and, when counted, this attempt in the
// account-wide count.
func (l *loginLimiter) succeeded(ip string, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.perIP.fails, ip)
	if r := l.account.fails[""]; counted && len(r) > 0 {
		l.account.fails[""] = r[:len(r)-1]
	}
}
