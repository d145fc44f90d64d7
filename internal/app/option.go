package app

import (
	"context"
	"log/slog"
	"net/http"

	"mailroom/queue"
	"mailroom/web"
)

// Option adds to the app while New builds it: it runs after the store and
// the broker are open and before the queue and the pipelines read the
// configuration.
// The demo world (internal/demo) is one; cmd composes them, so app imports
// neither.
type Option func(ctx context.Context, b *Builder) error

// Builder is what an Option may see and change of an app being built.
type Builder struct{ a *App }

// Config is the configuration the pipelines will be built from; an
// option may change it.
func (b *Builder) Config() *Config { return b.a.cfg }

// Logger is the app's logger.
func (b *Builder) Logger() *slog.Logger { return b.a.log }

// SetLogger replaces the logger every part built after the option uses.
func (b *Builder) SetLogger(l *slog.Logger) { b.a.log = l }

// SetAlertClient sends dead-letter alerts to webhookURL through client
// (the demo catches them in process).
func (b *Builder) SetAlertClient(webhookURL string, client *http.Client) {
	b.a.alerts = queue.NewAlerter(queue.AlertConfig{
		WebhookURL: webhookURL, PublicURL: b.a.cfg.BaseURL(), Logger: b.a.log, Client: client, DB: b.a.db,
	})
}

// AddLoop adds a loop, started after the task servers and stopped before.
func (b *Builder) AddLoop(l Loop) { b.a.loops = append(b.a.loops, l) }

// SetDemoSource gives the demo-only admin pages their view of the
// emulated Google.
func (b *Builder) SetDemoSource(src web.DemoSource) { b.a.demoSource = src }

// OnClose adds a closer, run in reverse order when the app closes.
func (b *Builder) OnClose(f func() error) { b.a.closed = append(b.a.closed, f) }

// Handler is the app's HTTP handler; it is nil until New has built it, so
// call it only once the app runs.
func (b *Builder) Handler() http.Handler { return b.a.handler }
