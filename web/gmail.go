package web

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"mailroom/queue/gmail"
	"mailroom/queue/google"
)

// GmailOptions are what the Gmail pages show about the setup.
type GmailOptions struct {
	// PublicURL is MAILROOM_PUBLIC_URL (the push endpoint is under it).
	PublicURL string
	// PushAudience is MAILROOM_PUSH_AUDIENCE, shown on the setup card.
	PushAudience string
	// PushToken reports whether MAILROOM_PUSH_TOKEN is set.
	PushToken bool
}

// gmailHandlers are the Gmail pipeline's routes: the accounts and messages
// API, the push endpoint, the OAuth consent routes and the Accounts pages.
type gmailHandlers struct {
	*server
	p    GmailPipeline
	opts GmailOptions
}

// mapGmailError answers the Gmail pipeline's errors; nil for others.
func mapGmailError(err error) *httpError {
	var inv *gmail.InvalidError
	switch {
	case errors.As(err, &inv):
		return &httpError{Status: http.StatusBadRequest, Code: "invalid", Message: capitalize(inv.Message) + ".", Field: inv.Field, Err: err}
	case errors.Is(err, gmail.ErrPushUnauthorized):
		return &httpError{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "The push carries no token, or one that cannot be verified.", Err: err}
	case errors.Is(err, gmail.ErrPushForbidden):
		return &httpError{Status: http.StatusForbidden, Code: "forbidden", Message: "The push token is not accepted here (audience, email or setup).", Err: err}
	case errors.Is(err, gmail.ErrPushTooLarge):
		return tooLarge(gmail.MaxPushBody)
	case errors.Is(err, gmail.ErrPushMalformed):
		return &httpError{Status: http.StatusBadRequest, Code: "malformed_push", Message: "The push body is not a Pub/Sub envelope with a Gmail notification: " + strings.TrimPrefix(err.Error(), gmail.ErrPushMalformed.Error()+": ") + ".", Err: err}
	case errors.Is(err, gmail.ErrOAuthUnavailable):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "not_configured", Message: "Connecting through Google needs an OAuth client: set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET.", Err: err}
	case errors.Is(err, google.ErrRevoked):
		return &httpError{Status: http.StatusBadRequest, Code: "google_refused", Message: "Google refused the sign-in; start again.", Err: err}
	}
	return nil
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// ---- API ----

type connectRequest struct {
	UserID       string `json:"userId"`
	Email        string `json:"email"`
	RefreshToken string `json:"refreshToken"`
}

func (g *gmailHandlers) apiConnect(c *gin.Context) {
	var req connectRequest
	if err := bindJSON(c, &req); err != nil {
		g.fail(c, err)
		return
	}
	acc, _, err := g.p.Connect(c.Request.Context(), gmail.ConnectRequest{
		UserID: req.UserID, Email: req.Email, Token: google.Token{RefreshToken: req.RefreshToken},
	})
	if err != nil {
		g.fail(c, err)
		return
	}
	v, err := g.p.Account(acc.ID)
	if err != nil {
		g.fail(c, err)
		return
	}
	g.writeJSON(c, http.StatusCreated, v)
}

// apiAccounts is GET /api/v1/accounts[?userId=U]: every account, or one
// user's (a user token always sees only its own).
func (g *gmailHandlers) apiAccounts(c *gin.Context) {
	accs, err := g.p.Accounts()
	if err == nil {
		err = g.p.WithQuota(c.Request.Context(), accs)
	}
	if err != nil {
		g.fail(c, err)
		return
	}
	out := make([]gmail.AccountView, 0, len(accs))
	for _, a := range accs {
		if uid := c.Query("userId"); uid == "" || a.UserID == uid {
			out = append(out, a)
		}
	}
	g.writeJSON(c, http.StatusOK, gin.H{"accounts": out})
}

func (g *gmailHandlers) apiAccount(c *gin.Context) {
	v, err := g.p.Account(c.Param("id"))
	if err == nil {
		v.GmailQuota, err = g.p.Quota(c.Request.Context(), v.ID)
	}
	if err != nil {
		g.fail(c, err)
		return
	}
	g.writeJSON(c, http.StatusOK, v)
}

func (g *gmailHandlers) apiResync(c *gin.Context) {
	if err := g.p.Resync(c.Request.Context(), c.Param("id")); err != nil {
		g.fail(c, err)
		return
	}
	g.writeJSON(c, http.StatusAccepted, gin.H{"id": c.Param("id"), "resync": "queued"})
}

func (g *gmailHandlers) apiDelete(c *gin.Context) {
	// A grant Google did not revoke is logged by the pipeline; the
	// contract's answer stays 204.
	if _, err := g.p.Delete(c.Request.Context(), c.Param("id")); err != nil {
		g.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// boolParam reads an optional true/false query parameter.
func boolParam(c *gin.Context, name string) (*bool, error) {
	v, ok := c.GetQuery(name)
	if !ok || v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil || (v != "true" && v != "false") {
		return nil, invalid(name, name+" must be true or false.")
	}
	return &b, nil
}

// validCursor reports whether a messages cursor can be one this server
// gave out (a Gmail message id).
func validCursor(s string) bool {
	if len(s) > 256 {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r > '~' {
			return false
		}
	}
	return true
}

func (g *gmailHandlers) apiMessages(c *gin.Context) {
	q := gmail.MessageQuery{Label: c.Query("label"), Cursor: c.Query("cursor")}
	if !validCursor(q.Cursor) {
		g.fail(c, invalid("cursor", "cursor is not one this server gave out; use the \"next\" value of the previous page."))
		return
	}
	if !utf8.ValidString(q.Label) || len(q.Label) > 256 {
		g.fail(c, invalid("label", "label must be a label name or id of at most 256 bytes of text."))
		return
	}
	var err error
	if q.Unread, err = boolParam(c, "unread"); err != nil {
		g.fail(c, err)
		return
	}
	if q.Trashed, err = boolParam(c, "trashed"); err != nil {
		g.fail(c, err)
		return
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > gmail.MaxMessagesPage {
			g.fail(c, invalid("limit", "limit must be a whole number from 1 to "+strconv.Itoa(gmail.MaxMessagesPage)+"."))
			return
		}
		q.Limit = n
	}
	msgs, next, err := g.p.Messages(c.Param("id"), q)
	if err != nil {
		g.fail(c, err)
		return
	}
	g.writeJSON(c, http.StatusOK, gin.H{"messages": msgs, "next": next})
}

func (g *gmailHandlers) apiMessage(c *gin.Context) {
	m, err := g.p.Message(c.Param("id"), c.Param("messageId"))
	if err != nil {
		g.fail(c, err)
		return
	}
	g.writeJSON(c, http.StatusOK, m)
}

// ---- push ----

// push is POST /push/gmail: the body is read up to its limit, then the
// pipeline checks auth (401, 403) before the body (413, 400) and answers
// once the notification is in bbolt (204).
func (g *gmailHandlers) push(c *gin.Context) {
	var body []byte
	tooLarge := false
	if c.Request.Body != nil {
		var err error
		body, err = io.ReadAll(io.LimitReader(c.Request.Body, gmail.MaxPushBody+1))
		if err != nil {
			g.fail(c, &httpError{Status: http.StatusBadRequest, Code: "malformed_push", Message: "The push body could not be read.", Err: err})
			return
		}
		tooLarge = len(body) > gmail.MaxPushBody
	}
	err := g.p.Push(c.Request.Context(), gmail.PushRequest{
		Authorization: c.GetHeader("Authorization"), Token: c.Query("token"), Body: body, TooLarge: tooLarge,
	})
	if errors.Is(err, gmail.ErrPushUnauthorized) {
		c.Header("WWW-Authenticate", `Bearer realm="mailroom push"`)
	}
	if err != nil {
		g.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
