package main

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"mailroom/queue"
	"mailroom/queue/google/googlefake"
	"mailroom/web"
)

// Demo timings: with --demo, the settings still at their defaults are
// shortened so a newcomer sees retries, dead letters and reclassifies
// within a minute. A setting given explicitly (flag or environment) with
// a value other than its default is kept.
var demoTimings = []struct {
	name string
	get  func(*config) *time.Duration
	demo time.Duration
}{
	{"retry-initial", func(c *config) *time.Duration { return &c.RetryInitial }, 2 * time.Second},
	{"retry-max", func(c *config) *time.Duration { return &c.RetryMax }, 10 * time.Second},
	{"reclassify-debounce", func(c *config) *time.Duration { return &c.ReclassifyDebounce }, 15 * time.Second},
	{"reclassify-tick", func(c *config) *time.Duration { return &c.ReclassifyTick }, 5 * time.Second},
	{"gmail-poll-interval", func(c *config) *time.Duration { return &c.GmailPollInterval }, 2 * time.Minute},
}

// wireDemo builds `serve --demo` (only with cfg.Demo): it starts the
// emulated Google on a loopback port and points every Google setting at
// it, before the pipelines read the configuration; it shortens the
// default timings, catches alerts in process when no webhook is set, and
// adds the traffic generator (a loop) and the demo pages (an extension).
func (a *app) wireDemo(ctx context.Context) error {
	if !a.cfg.Demo {
		return nil
	}
	cfg := a.cfg
	log := a.log.With("component", "demo")
	// The demo's own requests are logged at debug level.
	a.log = slog.New(demoLogHandler{a.log.Handler()})

	var replaced []string
	for _, s := range []struct {
		name string
		val  string
	}{
		{"MAILROOM_GOOGLE_API_URL", cfg.GoogleAPIURL}, {"MAILROOM_GOOGLE_TOKEN_URL", cfg.GoogleTokenURL},
		{"MAILROOM_GOOGLE_CERTS_URL", cfg.GoogleCertsURL}, {"MAILROOM_GOOGLE_CLIENT_ID", cfg.GoogleClientID},
		{"MAILROOM_PUSH_AUDIENCE", cfg.PushAudience}, {"MAILROOM_PUSH_SERVICE_ACCOUNT", cfg.PushServiceAccount},
		{"MAILROOM_PUBSUB_TOPIC", cfg.PubSubTopic},
	} {
		if s.val != "" {
			replaced = append(replaced, s.name)
		}
	}
	if len(replaced) > 0 {
		log.Warn("demo: the simulated Google replaces these Google settings; restart without --demo to use them", "settings", strings.Join(replaced, ","))
	}

	defaults := &config{}
	defaults.settings()
	var shortened []string
	for _, t := range demoTimings {
		if p := t.get(cfg); *p == *t.get(defaults) {
			*p = t.demo
			shortened = append(shortened, t.name+"="+t.demo.String())
		}
	}
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryInitial)

	// Push: Pub/Sub's OIDC token, signed by the emulator and checked
	// against its certificates, as in production.
	pushURL := cfg.publicURL() + "/push/gmail"
	cfg.PushAudience = pushURL
	cfg.PushServiceAccount = googlefake.DefaultPushServiceAccount
	cfg.PubSubTopic = demoPubSubTopic
	cfg.GoogleClientID = demoClientID
	cfg.GoogleClientSecret = demoSecret(16)
	if cfg.APIToken == "" {
		// The traffic generator's token; kept in memory only.
		cfg.APIToken = "demo-" + demoSecret(24)
	}

	handler := demoInProcess{handler: func() http.Handler { return a.handler }}
	api := &demoAPI{client: &http.Client{Transport: handler, Timeout: 30 * time.Second}, token: cfg.APIToken}
	d, err := newDemo(log, cfg, pushURL, api, handler)
	if err != nil {
		return err
	}
	a.closed = append(a.closed, d.close)
	base := d.fake.URL()
	cfg.GoogleAPIURL = base
	cfg.GoogleTokenURL = d.fake.TokenURL()
	cfg.GoogleCertsURL = d.fake.CertsURL()

	if cfg.AlertWebhookURL == "" {
		d.webhook = &demoWebhook{now: time.Now, log: log}
		a.alerts = queue.NewAlerter(queue.AlertConfig{
			WebhookURL: demoWebhookURL, PublicURL: cfg.publicURL(), Logger: a.log,
			Client: &http.Client{Transport: d.webhook, Timeout: 10 * time.Second},
		})
	}
	a.loops = append(a.loops, d)
	a.extensions = append(a.extensions, web.DemoPages(demoSource{d}))
	log.Info("demo: simulated Google running", "url", base, "accounts", len(demoAccounts), "spreadsheets", len(demoSheets),
		"scale", d.scale, "shortened_timings", strings.Join(shortened, ","), "alerts_in_process", d.webhook != nil)
	return nil
}
