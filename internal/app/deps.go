package app

import (
	"log/slog"
	"net/http"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/web"
)

// Deps are what the app is built with besides its configuration, all made
// before New: the logger, what the demo world (internal/demo) adds, and
// what a benchmark (internal/bench) sets that no operator does. cmd
// composes them, so app imports neither the demo, the benchmarks nor cmd.
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
	// Tasks are task types of the caller's own, each with its handler,
	// added to the pipelines' rows in the task table (a benchmark's no-op
	// type, its naive reclassify).
	Tasks []queue.TaskType
	// TaskLayout, when set, changes the queues and workers of the
	// pipelines' rows in place before the table is built (a benchmark's
	// baseline: every Gmail event type on one queue).
	TaskLayout func(rows []queue.TaskType)
	// GmailQuotaOff builds the app without the Gmail budget, for a Google
	// whose quota is off (a benchmark's emulator).
	GmailQuotaOff bool
	// GoogleTransport, when set, carries the Google clients' HTTP requests
	// instead of Go's default transport (a benchmark's old limiters).
	GoogleTransport http.RoundTripper
	// GoogleRestartsWithProcess: the Google the app talks to starts with
	// the process (the demo's emulator), so what it counted is lost with
	// the broker's windows at a restart: the Gmail budget does not wait
	// out a lost window (nor resume accounts at half).
	GoogleRestartsWithProcess bool
	// Closers run, in reverse order, when the app closes, before the
	// broker and the store close; New owns them (a failed New runs them).
	Closers []func() error
}
