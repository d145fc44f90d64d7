package web

import (
	"context"
	"errors"
	"net/http"
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/gmail"
	"mailroom/queue/google/accounts"
	"mailroom/store"
)

// ConnectLinks is the consent round trip of the accounts service: the
// API's connect links and the admin page's own connect share it.
type ConnectLinks interface {
	CreateLink(r accounts.LinkRequest) (accounts.Link, error)
	CheckLink(token string) (store.ConnectLink, error)
	OpenLink(token string) (consentURL string, err error)
	FinishLink(ctx context.Context, cb accounts.Callback) (accounts.Finished, error)
	LinkDone(l store.ConnectLink, result, accountID string)
}

var _ ConnectLinks = (*accounts.Service)(nil)

// maxLinkState bounds the caller's state echoed on the redirect.
const maxLinkState = 512

// connectHandlers are the connect routes: POST /api/v1/users/{uid}/connect,
// GET and POST /connect/{token} (the link's page and its continue button),
// the admin page's start and the OAuth callback that both end in.
type connectHandlers struct {
	s     *server
	links ConnectLinks
	gm    GmailPipeline
	// redirects is MAILROOM_CONNECT_REDIRECT_URIS (exact match).
	redirects []string
	base      string // MAILROOM_PUBLIC_URL, without a trailing slash
}

func (s *server) connectHandlers() *connectHandlers {
	if s.deps.Gmail == nil || s.deps.Connect == nil {
		return nil
	}
	return &connectHandlers{s: s, links: s.deps.Connect, gm: s.deps.Gmail, redirects: s.deps.ConnectRedirectURIs,
		base: strings.TrimSuffix(s.deps.PublicURL, "/")}
}

type connectLinkRequest struct {
	RedirectURI string `json:"redirectUri"`
	State       string `json:"state"`
	Email       string `json:"email"`
}

type connectLinkAnswer struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expiresAt"`
}

// mapConnectError answers the accounts service's link errors; nil for
// others.
func mapConnectError(err error) *httpError {
	switch {
	case errors.Is(err, accounts.ErrOAuthUnavailable):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "not_configured", Message: "Connecting through Google needs an OAuth client: set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET.", Err: err}
	case errors.Is(err, accounts.ErrUnknownUser):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "There is no such user.", Field: "uid", Err: err}
	case errors.Is(err, accounts.ErrLinkUnknown):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "This connect link is not valid. Ask for a new one.", Err: err}
	}
	return nil
}

// apiCreate is POST /api/v1/users/{uid}/connect → 201 {"url","expiresAt"}.
func (h *connectHandlers) apiCreate(c *gin.Context) {
	var req connectLinkRequest
	if err := bindJSON(c, &req); err != nil {
		h.s.fail(c, err)
		return
	}
	switch {
	case req.RedirectURI == "":
		h.s.fail(c, invalid("redirectUri", "redirectUri is required: the address the browser returns to, one of MAILROOM_CONNECT_REDIRECT_URIS."))
		return
	case !slices.Contains(h.redirects, req.RedirectURI):
		h.s.fail(c, invalid("redirectUri", "redirectUri is not one of MAILROOM_CONNECT_REDIRECT_URIS (exact match); add it there first."))
		return
	case len(req.State) > maxLinkState:
		h.s.fail(c, invalid("state", "state may be at most 512 bytes."))
		return
	case req.Email != "" && !plainAddress(req.Email):
		h.s.fail(c, invalid("email", "email is not an email address."))
		return
	}
	l, err := h.links.CreateLink(accounts.LinkRequest{UserID: c.Param("uid"), RedirectURI: req.RedirectURI, State: req.State, Email: req.Email})
	if err != nil {
		h.s.fail(c, err)
		return
	}
	h.s.writeJSON(c, http.StatusCreated, connectLinkAnswer{URL: h.linkURL(c, l), ExpiresAt: l.ExpiresAt.UTC()})
}

// linkURL is the link under MAILROOM_PUBLIC_URL (or, without one, the
// address the request came to).
func (h *connectHandlers) linkURL(c *gin.Context, l accounts.Link) string {
	base := h.base
	if base == "" {
		scheme := "http"
		if c.Request.TLS != nil {
			scheme = "https"
		}
		base = scheme + "://" + c.Request.Host
	}
	return base + "/connect/" + l.Token
}

func plainAddress(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && a.Name == "" && strings.EqualFold(a.Address, strings.TrimSpace(s))
}

// connectView is the connect page's data: a link's continue form (with
// Action), or a short notice (without).
type connectView struct {
	Title, Text, Error string
	// Action and CSRF: the continue form, its token bound to the link and
	// to the browser's connect cookie.
	Action, CSRF     string
	Email, ExpiresAt string
}

// open is GET /connect/{token}: a page whose button continues to Google
// (POST); looking at it, as a chat app's link preview does, uses nothing
// up. A used or expired link returns to its redirect URI with
// error=expired_link.
func (h *connectHandlers) open(c *gin.Context) {
	l, err := h.links.CheckLink(c.Param("token"))
	if err != nil {
		h.finish(c, err)
		return
	}
	h.continuePage(c, http.StatusOK, l, "")
}

// follow is POST /connect/{token}, the page's button: with the form token
// of this link and this browser's connect cookie, on to Google's consent.
// Without them (a stale page, a post from another site) the page again.
func (h *connectHandlers) follow(c *gin.Context) {
	token := c.Param("token")
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, 64<<10)
	if err := c.Request.ParseForm(); err != nil {
		h.s.fail(c, formError(err))
		return
	}
	pre, err := c.Request.Cookie(h.s.cookies.connect)
	if err != nil || !h.s.keys.verify(connectPurpose(token), pre.Value, c.Request.PostForm.Get(csrfField)) {
		l, err := h.links.CheckLink(token)
		if err != nil {
			h.finish(c, err)
			return
		}
		h.continuePage(c, http.StatusForbidden, l, "This page was out of date or came from another site. Press the button to continue.")
		return
	}
	u, err := h.links.OpenLink(token)
	if err != nil {
		h.finish(c, err)
		return
	}
	redirect(c, u)
}

// connectCookieLen is the length of a connect cookie's value
// (randomToken(24)).
const connectCookieLen = 32

// continuePage draws the link's page with its continue form, keeping the
// browser's connect cookie (or making one).
func (h *connectHandlers) continuePage(c *gin.Context, status int, l store.ConnectLink, errText string) {
	token := c.Param("token")
	pre := randomToken(24)
	if ck, err := c.Request.Cookie(h.s.cookies.connect); err == nil && len(ck.Value) == connectCookieLen {
		pre = ck.Value
	}
	http.SetCookie(c.Writer, h.s.cookie(h.s.cookies.connect, pre, int(accounts.LinkTTL.Seconds())))
	text := "mailroom asks Google for access to your Gmail, to keep your mail in step and label it by your rules."
	h.s.render(c, status, "connect", connectView{Title: "Connect your Gmail", Text: text, Error: errText,
		Action: "/connect/" + token, CSRF: h.s.keys.sign(connectPurpose(token), pre),
		Email: l.Email, ExpiresAt: l.ExpiresAt.UTC().Format("15:04 MST")})
	c.Abort()
}

// connectPurpose binds a continue form's token to its link.
func connectPurpose(token string) string { return "connect " + store.ConnectLinkKey(token) }

// adminStart is POST /oauth/google/start (admin session, CSRF checked)
// with userId and an optional email hint: the admin page's connect, a link
// bound to this session, followed at once.
func (h *connectHandlers) adminStart(c *gin.Context) {
	email := strings.TrimSpace(c.PostForm("email"))
	if email != "" && !plainAddress(email) {
		h.s.setFlash(c, "error", "The Gmail address hint is not an email address.")
		redirect(c, "/admin/accounts")
		return
	}
	l, err := h.links.CreateLink(accounts.LinkRequest{UserID: c.PostForm("userId"), Email: email, Session: csrfToken(c)})
	var u string
	if err == nil {
		u, err = h.links.OpenLink(l.Token)
	}
	if err != nil {
		e := h.s.mapError(err)
		if e.Status >= 500 && !errors.Is(err, accounts.ErrOAuthUnavailable) {
			h.s.fail(c, err)
			return
		}
		h.s.setFlash(c, "error", e.Message)
		redirect(c, "/admin/accounts")
		return
	}
	redirect(c, u)
}

// adminLink is POST /admin/accounts/{id}/connect-link: a connect link for
// the account's user and address, shown to the admin to send (an account
// whose grant Google refused comes back with its mirror kept).
func (h *connectHandlers) adminLink(c *gin.Context) {
	v, err := h.gm.Account(c.Param("id"))
	if err != nil {
		h.s.fail(c, err)
		return
	}
	l, err := h.links.CreateLink(accounts.LinkRequest{UserID: v.UserID, Email: v.Email})
	if err != nil {
		e := h.s.mapError(err)
		h.s.setFlash(c, "error", e.Message)
		redirect(c, "/admin/accounts")
		return
	}
	h.s.setFlash(c, "ok", "Send this link to the owner of "+v.Email+" (single use, valid until "+l.ExpiresAt.UTC().Format("15:04 MST")+"): "+h.linkURL(c, l))
	redirect(c, "/admin/accounts")
}

// callback is GET /oauth/google/callback: Google's redirect after consent,
// for links and the admin page alike. It never answers a 500: a link's
// failure returns to its redirect URI with its error code.
func (h *connectHandlers) callback(c *gin.Context) {
	cb := accounts.Callback{State: c.Query("state"), Code: c.Query("code"), Error: c.Query("error")}
	if sess, _, ok := h.s.loadSession(c); ok {
		cb.Session = sess.CSRF
	}
	f, err := h.links.FinishLink(c.Request.Context(), cb)
	if errors.Is(err, accounts.ErrLinkUnknown) && cb.Session != "" {
		// An admin in session: tell them on the Accounts page (the
		// text is ours, never what the request carried).
		msg := "The sign-in state is not valid or was already used; start again."
		if cb.Error != "" {
			msg = linkErrorText(accounts.LinkGoogleError)
			if cb.Error == "access_denied" {
				msg = linkErrorText(accounts.LinkDenied)
			}
		}
		h.s.setFlash(c, "error", msg)
		redirect(c, "/admin/accounts")
		return
	}
	if err != nil {
		h.finish(c, err)
		return
	}
	acc, _, err := h.gm.Connect(c.Request.Context(), gmail.ConnectRequest{UserID: f.Link.UserID, Email: f.Email, Token: f.Token})
	if err != nil {
		h.s.log.Error("connect the account of a finished consent", "link_id", f.Link.ID, "err", err)
		code := accounts.LinkGoogleError
		if errors.Is(err, store.ErrNotFound) || errors.As(err, new(*gmail.InvalidError)) {
			code = accounts.LinkExpired // the user is gone
		}
		h.links.LinkDone(f.Link, code, "")
		h.finish(c, &accounts.LinkError{Code: code, Link: f.Link, Err: err})
		return
	}
	h.links.LinkDone(f.Link, accounts.LinkConnected, acc.ID)
	l := f.Link
	switch {
	case l.Session != "":
		h.s.setFlash(c, "ok", acc.Email+" is connected; its sync is running.")
		redirect(c, "/admin/accounts/"+acc.ID)
	case l.RedirectURI != "":
		h.back(c, l, url.Values{"status": {"connected"}, "accountId": {acc.ID}})
	default:
		h.page(c, http.StatusOK, "Gmail connected", acc.Email+" is connected to mailroom. You can close this page.")
	}
}

// finish answers a link that cannot go on: back to the link's redirect URI
// with status=error&error=CODE, to the admin page for an admin connect,
// or a short page when there is nowhere to go.
func (h *connectHandlers) finish(c *gin.Context, err error) {
	var le *accounts.LinkError
	if !errors.As(err, &le) {
		e := h.s.mapError(err)
		if e.Status >= 500 {
			h.s.log.Error("connect link", "path", c.Request.URL.Path, "err", err)
		}
		if errors.Is(err, accounts.ErrLinkUnknown) {
			h.page(c, http.StatusBadRequest, "This link is not valid", "The link is unknown, was already used, or belongs to another sign-in. Ask for a new one.")
			return
		}
		h.page(c, e.Status, "Gmail could not be connected", e.Message)
		return
	}
	h.s.log.Info("connect link refused", "link_id", le.Link.ID, "code", le.Code, "err", le.Err)
	switch {
	case le.Link.Session != "":
		h.s.setFlash(c, "error", linkErrorText(le.Code))
		redirect(c, "/admin/accounts")
	case le.Link.RedirectURI != "":
		h.back(c, le.Link, url.Values{"status": {"error"}, "error": {le.Code}})
	default:
		h.page(c, http.StatusBadRequest, "Gmail could not be connected", linkErrorText(le.Code))
	}
}

// linkErrorText says what a link error code means.
func linkErrorText(code string) string {
	switch code {
	case accounts.LinkDenied:
		return "Google did not connect the account: the sign-in was cancelled or consent was refused."
	case accounts.LinkExpired:
		return "The connect link was already used or has expired; make a new one."
	case accounts.LinkWrongUser:
		return "Google signed in another address than the one the link was made for; sign in with that address."
	}
	return "Google did not connect the account: it answered with an error; try again."
}

// back redirects to the link's redirect URI with q and the link's state
// added to the URI's own query.
func (h *connectHandlers) back(c *gin.Context, l store.ConnectLink, q url.Values) {
	u, err := url.Parse(l.RedirectURI)
	if err != nil {
		h.page(c, http.StatusBadRequest, "Gmail could not be connected", "The link's return address is not valid.")
		return
	}
	all := u.Query()
	for k, v := range q {
		all[k] = v
	}
	if l.State != "" {
		all.Set("state", l.State)
	}
	u.RawQuery = all.Encode()
	c.Redirect(http.StatusFound, u.String())
	c.Abort()
}

// page is the short page an end user sees when a link has nowhere to
// return to.
func (h *connectHandlers) page(c *gin.Context, status int, title, text string) {
	h.s.render(c, status, "connect", connectView{Title: title, Text: text})
	c.Abort()
}
