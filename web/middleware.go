package web

import (
	"log/slog"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// logRequests logs one line per request with slog. The query string is
// never logged: it may carry a secret (the push endpoint's ?token=); nor is
// a connect link's token.
func (s *server) logRequests(c *gin.Context) {
	start := time.Now()
	c.Next()
	path := c.Request.URL.Path
	if strings.HasPrefix(path, "/connect/") {
		path = "/connect/…" // the link's token is its secret
	}
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
	if s.secure {
		// Reached over https (MAILROOM_PUBLIC_URL): browsers keep to it for
		// a year. Sent over plain http too, where browsers ignore it (the
		// TLS proxy in front makes the request https for them).
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	c.Next()
}
