package web

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

type tokensView struct {
	Tokens []tokenRow
	Users  []store.User
	// New is the token just made, shown this once.
	New   *newToken
	Error string
	// The form's values after an error.
	Name, UserID, ExpiresIn string
	// Sessions are the admin sessions signed in now.
	Sessions []sessionRow
}

// tokenRow is one token on the page.
type tokenRow struct {
	store.APIToken
	UserEmail string // for a user token
	Expired   bool
}

type newToken struct {
	Name      string
	Token     string
	UserEmail string // empty: an admin token
	ExpiresAt time.Time
	BaseURL   string // for the example call
	Example   string // the path of the example call
}

// apiTokenPrefix starts every token made in the admin page, so a leaked
// one is easy to recognise.
const apiTokenPrefix = "mr_"

// maxTokenLife bounds expiresIn (ten years).
const maxTokenLife = 10 * 365 * 24 * time.Hour

// tokenRequest is what makes a token, from the API or the admin page.
type tokenRequest struct {
	Name      string `json:"name"`
	UserID    string `json:"userId"`
	ExpiresIn string `json:"expiresIn"`
}

// createTokenFrom validates req and stores a new token; it returns the
// stored token and its secret value, shown once.
func (s *server) createTokenFrom(req tokenRequest) (store.APIToken, string, error) {
	name := strings.TrimSpace(req.Name)
	switch {
	case name == "":
		return store.APIToken{}, "", invalid("name", "Give the token a name, such as the script or machine that will use it.")
	case !utf8.ValidString(name) || utf8.RuneCountInString(name) > 100:
		return store.APIToken{}, "", invalid("name", "The name must be at most 100 characters of text.")
	}
	var expiresAt time.Time
	if v := strings.TrimSpace(req.ExpiresIn); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > maxTokenLife {
			return store.APIToken{}, "", invalid("expiresIn", "expiresIn must be a Go duration such as 720h, more than zero and at most 87600h (ten years).")
		}
		expiresAt = s.now().Add(d)
	}
	token := apiTokenPrefix + randomToken(32)
	var t store.APIToken
	err := s.deps.DB.Update(func(tx *store.Tx) (err error) {
		t, err = tx.APITokenCreate(name, token, strings.TrimSpace(req.UserID), expiresAt)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.APIToken{}, "", &httpError{Status: http.StatusNotFound, Code: "not_found", Field: "userId", Message: "There is no such user."}
	}
	if err != nil {
		return store.APIToken{}, "", fmt.Errorf("web: create API token: %w", err)
	}
	s.log.Info("API token created", "name", name, "token_id", t.ID, "token_prefix", t.Prefix, "user_id", t.UserID, "admin", t.Admin)
	return t, token, nil
}

func (s *server) tokens() ([]store.APIToken, error) {
	var list []store.APIToken
	err := s.deps.DB.View(func(tx *store.Tx) error {
		var err error
		list, err = tx.APITokens()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("web: list API tokens: %w", err)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].CreatedAt.After(list[j].CreatedAt) })
	return list, nil
}

// ---- API ----

type tokenJSON struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	UserID     *string    `json:"userId"`
	CreatedAt  time.Time  `json:"createdAt"`
	ExpiresAt  *time.Time `json:"expiresAt"`
	LastUsedAt *time.Time `json:"lastUsedAt"`
}

func toTokenJSON(t store.APIToken) tokenJSON {
	out := tokenJSON{ID: t.ID, Name: t.Name, CreatedAt: t.CreatedAt}
	if t.UserID != "" {
		out.UserID = &t.UserID
	}
	if !t.ExpiresAt.IsZero() {
		out.ExpiresAt = &t.ExpiresAt
	}
	if !t.LastUsed.IsZero() {
		out.LastUsedAt = &t.LastUsed
	}
	return out
}

// apiCreateToken is POST /api/v1/tokens → 201 {"id","name","userId","expiresAt","token"}.
func (s *server) apiCreateToken(c *gin.Context) {
	var req tokenRequest
	if err := bindJSON(c, &req); err != nil {
		s.fail(c, err)
		return
	}
	t, token, err := s.createTokenFrom(req)
	if err != nil {
		s.fail(c, err)
		return
	}
	j := toTokenJSON(t)
	s.writeJSON(c, http.StatusCreated, struct {
		ID        string     `json:"id"`
		Name      string     `json:"name"`
		UserID    *string    `json:"userId"`
		ExpiresAt *time.Time `json:"expiresAt"`
		Token     string     `json:"token"`
	}{j.ID, j.Name, j.UserID, j.ExpiresAt, token})
}

// apiListTokens is GET /api/v1/tokens (no secrets).
func (s *server) apiListTokens(c *gin.Context) {
	list, err := s.tokens()
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]tokenJSON, 0, len(list))
	for _, t := range list {
		out = append(out, toTokenJSON(t))
	}
	s.writeJSON(c, http.StatusOK, gin.H{"tokens": out})
}

// apiDeleteToken is DELETE /api/v1/tokens/{id} → 204; the token stops
// working at once.
func (s *server) apiDeleteToken(c *gin.Context) {
	id := c.Param("id")
	if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.APITokenDelete(id) }); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			s.fail(c, notFound("There is no such token."))
			return
		}
		s.fail(c, fmt.Errorf("web: revoke API token: %w", err))
		return
	}
	s.log.Info("API token revoked", "token_id", id)
	c.Status(http.StatusNoContent)
}

// ---- admin page ----

func (s *server) renderTokens(c *gin.Context, status int, v tokensView) {
	list, err := s.tokens()
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.deps.DB.View(func(tx *store.Tx) (err error) { v.Users, err = tx.Users(); return err }); err != nil {
		s.fail(c, fmt.Errorf("web: list users: %w", err))
		return
	}
	emails := make(map[string]string, len(v.Users))
	for _, u := range v.Users {
		emails[u.ID] = u.Email
	}
	now := s.now()
	for _, t := range list {
		row := tokenRow{APIToken: t, Expired: t.Expired(now)}
		if t.UserID != "" {
			row.UserEmail = emails[t.UserID]
			if row.UserEmail == "" {
				row.UserEmail = t.UserID
			}
		}
		v.Tokens = append(v.Tokens, row)
	}
	if v.Sessions, err = s.sessionRows(c); err != nil {
		s.fail(c, err)
		return
	}
	s.render(c, status, "tokens", v)
}

func (s *server) tokensPage(c *gin.Context) { s.renderTokens(c, http.StatusOK, tokensView{}) }

func (s *server) createToken(c *gin.Context) {
	req := tokenRequest{Name: c.PostForm("name"), UserID: c.PostForm("userId"), ExpiresIn: c.PostForm("expiresIn")}
	t, token, err := s.createTokenFrom(req)
	var e *httpError
	if errors.As(err, &e) && e.Status < 500 {
		s.renderTokens(c, e.Status, tokensView{Error: e.Message, Name: req.Name, UserID: req.UserID, ExpiresIn: req.ExpiresIn})
		return
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	nt := &newToken{Name: t.Name, Token: token, ExpiresAt: t.ExpiresAt, BaseURL: s.baseURL(c), Example: "/api/v1/queues"}
	if t.UserID != "" {
		nt.Example = "/api/v1/users/" + t.UserID + "/rules"
		_ = s.deps.DB.View(func(tx *store.Tx) error {
			u, err := tx.UserGet(t.UserID)
			nt.UserEmail = u.Email
			return err
		})
	}
	s.renderTokens(c, http.StatusCreated, tokensView{New: nt})
}

func (s *server) revokeToken(c *gin.Context) {
	id := c.Param("id")
	err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.APITokenDelete(id) })
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.setFlash(c, "error", "That token was already revoked.")
	case err != nil:
		s.fail(c, fmt.Errorf("web: revoke API token: %w", err))
		return
	default:
		s.log.Info("API token revoked", "token_id", id)
		s.setFlash(c, "ok", "The token is revoked; requests using it are refused from now on.")
	}
	redirect(c, "/admin/tokens")
}

// baseURL is MAILROOM_PUBLIC_URL, or the URL this request came to.
func (s *server) baseURL(c *gin.Context) string {
	if s.deps.PublicURL != "" {
		return strings.TrimRight(s.deps.PublicURL, "/")
	}
	scheme := "http"
	if c.Request.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host
}
