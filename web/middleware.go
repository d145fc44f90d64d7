package web

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

// logRequests logs one line per request with slog. The query string is
// never logged: it may carry a secret (the push endpoint's ?token=).
func (s *server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	path := c.Request.URL.Path
	status := c.Writer.Status()
	level := slog.LevelInfo
	switch {
	case status >= 500:
		level = slog.LevelWarn
	case path == "/healthz" || path == "/readyz" || path == "/metrics" || strings.HasPrefix(path, "/static/") || strings.HasSuffix(path, ".json"):
		level = slog.LevelDebug
	}
	s.log.LogAttrs(c.Request.Context(), level, "http request",
		slog.String("method", c.Request.Method),
		slog.String("path", path),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		slog.Int("bytes", max(c.Writer.Size(), 0)),
		slog.String("client_ip", c.ClientIP()),
	)
}

// securityHeaders are sent with every answer. The admin page needs nothing
// from another origin and no inline script or style.
func (s *server) securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")
	c.Next()
}

// touchEvery is how stale a token's "last used" may get before a request
// writes it again (one write per token per interval, not per request).
const touchEvery = time.Minute

// apiAuth requires "Authorization: Bearer <token>": MAILROOM_API_TOKEN
// (constant-time compare) or a token made in the admin page (looked up by
// its hash).
func (s *server) apiAuth(c *gin.Context) {
	token, ok := bearerToken(c.GetHeader("Authorization"))
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="mailroom"`)
		Fail(c, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "Send an API token as \"Authorization: Bearer <token>\"."})
		return
	}
	if s.deps.APIToken != "" {
		want, got := sha256.Sum256([]byte(s.deps.APIToken)), sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(want[:], got[:]) == 1 {
			c.Next()
			return
		}
	}
	var t store.APIToken
	err := s.deps.DB.View(func(tx *store.Tx) error {
		var err error
		t, err = tx.APITokenLookup(token)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		c.Header("WWW-Authenticate", `Bearer realm="mailroom", error="invalid_token"`)
		Fail(c, &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "The API token is not valid (unknown or revoked)."})
		return
	}
	if err != nil {
		Fail(c, err)
		return
	}
	if now := s.now(); now.Sub(t.LastUsed) >= touchEvery {
		if err := s.deps.DB.Update(func(tx *store.Tx) error { return tx.APITokenTouch(token, now) }); err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Warn("record API token use", "token_prefix", t.Prefix, "err", err)
		}
	}
	c.Next()
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
