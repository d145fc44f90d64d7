package app

import (
	"log/slog"
	"net/http"

	"mailroom/internal/lifecycle"
	"mailroom/web"
)

// Deps are what the app is built with besides its configuration, all made
// before New: the logger, and what the demo world (internal/demo) adds.
// cmd composes them, so app imports neither the demo nor cmd.
type Deps struct {
	// Logger is the app's logger (NewLogger). Nil: logs are discarded.
	Logger *slog.Logger
	// AlertURL, when set, is where dead-letter alerts are posted instead of
	// MAILROOM_ALERT_WEBHOOK_URL, through AlertClient (the demo catches
	// them in process). Nil AlertClient: a default client.
	AlertURL    string
	AlertClient *http.Client
	// Services are the caller's own, started after the pipelines' loops and
	// before HTTP, and stopped in reverse (the demo's traffic).
	Services []lifecycle.Service
	// DemoSource gives the demo-only admin pages their view of the
	// emulated Google.
	DemoSource web.DemoSource
	// UseHandler, when set, is given the app's HTTP handler once New has
	// built it, before New returns and so before any service starts (the
	// demo drives the API in process through it).
	UseHandler func(http.Handler)
	// Closers run, in reverse order, when the app closes, before the
	// broker and the store close; New owns them (a failed New runs them).
	Closers []func() error
}
