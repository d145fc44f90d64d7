package web

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

type tokensView struct {
	Tokens []store.APIToken
	// New is the token just made, shown this once.
	New   *newToken
	Error string
	Name  string
}

type newToken struct {
	Name    string
	Token   string
	BaseURL string // for the example call
}

// apiTokenPrefix starts every token made in the admin page, so a leaked
// one is easy to recognise.
const apiTokenPrefix = "mr_"

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

func (s *server) renderTokens(c *gin.Context, status int, v tokensView) {
	list, err := s.tokens()
	if err != nil {
		Fail(c, err)
		return
	}
	v.Tokens = list
	RenderStatus(c, status, "tokens", v)
}

func (s *server) tokensPage(c *gin.Context) { s.renderTokens(c, http.StatusOK, tokensView{}) }

func (s *server) createToken(c *gin.Context) {
	name := strings.TrimSpace(c.PostForm("name"))
	switch {
	case name == "":
		s.renderTokens(c, http.StatusBadRequest, tokensView{Error: "Give the token a name, such as the script or machine that will use it."})
		return
	case utf8.RuneCountInString(name) > 100:
		s.renderTokens(c, http.StatusBadRequest, tokensView{Error: "The name must be at most 100 characters.", Name: name})
		return
	}
	token := apiTokenPrefix + randomToken(32)
	if err := s.deps.DB.Update(func(tx *store.Tx) error {
		_, err := tx.APITokenCreate(name, token)
		return err
	}); err != nil {
		Fail(c, fmt.Errorf("web: create API token: %w", err))
		return
	}
	s.log.Info("API token created", "name", name, "token_prefix", token[:8])
	s.renderTokens(c, http.StatusCreated, tokensView{New: &newToken{Name: name, Token: token, BaseURL: s.baseURL(c)}})
}

func (s *server) revokeToken(c *gin.Context) {
	id := c.Param("id")
	err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.APITokenDelete(id) })
	switch {
	case errors.Is(err, store.ErrNotFound):
		SetFlash(c, "error", "That token was already revoked.")
	case err != nil:
		Fail(c, fmt.Errorf("web: revoke API token: %w", err))
		return
	default:
		s.log.Info("API token revoked", "token_id", id)
		SetFlash(c, "ok", "The token is revoked; requests using it are refused from now on.")
	}
	Redirect(c, "/admin/tokens")
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
