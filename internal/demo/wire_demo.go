package demo

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/googlefake"
	"mailroom/queue/google"
)

// Demo timings: with --demo, the settings still at their defaults are
// shortened so a newcomer sees retries, dead letters and reclassifies
// within a minute. A setting given explicitly (flag or environment) with
// a value other than its default is kept.
var demoTimings = []struct {
	name string
	get  func(*app.Config) *time.Duration
	demo time.Duration
}{
	{"retry-initial", func(c *app.Config) *time.Duration { return &c.RetryInitial }, 2 * time.Second},
	{"retry-max", func(c *app.Config) *time.Duration { return &c.RetryMax }, 10 * time.Second},
	{"reclassify-debounce", func(c *app.Config) *time.Duration { return &c.ReclassifyDebounce }, 15 * time.Second},
	{"reclassify-tick", func(c *app.Config) *time.Duration { return &c.ReclassifyTick }, 5 * time.Second},
	{"gmail-poll-interval", func(c *app.Config) *time.Duration { return &c.GmailPollInterval }, 2 * time.Minute},
}

// demoGmailPrices is the demo project's Gmail price list: an older
// project's (15,000 units a user a minute, the earlier table).
const demoGmailPrices = google.Prices2025

// Prepare makes `serve --demo` before the app is built (cmd calls it
// only with --demo, then app.New, which validates the config it leaves):
// it starts the emulated Google on a loopback port and points every Google
// setting of cfg at it, shortens the default timings, and returns the
// app's deps: logger with the demo's own requests at debug level, alerts
// caught in process when no webhook is set, the traffic generator (a
// service), the demo pages' source and the emulator's closer.
func Prepare(ctx context.Context, cfg *app.Config, logger *slog.Logger) (app.Deps, error) {
	_, deps, err := prepare(ctx, cfg, logger)
	return deps, err
}

// warnReplacedGoogleSettings warns about the Google settings the demo's
// simulated Google replaces.
func warnReplacedGoogleSettings(log *slog.Logger, cfg *app.Config) {
	var replaced []string
	for _, s := range []struct {
		name string
		val  string
	}{
		{"MAILROOM_GOOGLE_API_URL", cfg.GoogleAPIURL}, {"MAILROOM_GOOGLE_TOKEN_URL", cfg.GoogleTokenURL},
		{"MAILROOM_GOOGLE_REVOKE_URL", cfg.GoogleRevokeURL},
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
}

// prepare is Prepare, returning the demo too.
func prepare(_ context.Context, cfg *app.Config, logger *slog.Logger) (*demo, app.Deps, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	log := logger.With("component", "demo")
	// The demo's own requests are logged at debug level.
	deps := app.Deps{Logger: slog.New(demoLogHandler{logger.Handler()})}

	warnReplacedGoogleSettings(log, cfg)

	defaults := app.Defaults()
	var shortened []string
	for _, t := range demoTimings {
		if p := t.get(cfg); *p == *t.get(defaults) {
			*p = t.demo
			shortened = append(shortened, t.name+"="+t.demo.String())
		}
	}
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryInitial)
	// The emulated project is an older one, on Google's earlier price list
	// with 15,000 Gmail units a minute per user, so the demo's first syncs
	// stay short; the emulator charges what mailroom budgets (the setup
	// page says so).
	if cfg.GmailQuotaPrices == defaults.GmailQuotaPrices && cfg.GmailUserUnits == defaults.GmailUserUnits {
		cfg.GmailQuotaPrices = demoGmailPrices
		shortened = append(shortened, "gmail-quota-prices="+demoGmailPrices)
	}

	// The emulator starts with the process: its Gmail quota count is new at
	// every start, so a restart does not wait out the last minute.
	deps.GoogleRestartsWithProcess = true

	// Push: Pub/Sub's OIDC token, signed by the emulator and checked
	// against its certificates, as in production.
	pushURL := cfg.BaseURL() + "/push/gmail"
	cfg.PushAudience = pushURL
	cfg.PushServiceAccount = googlefake.DefaultPushServiceAccount
	cfg.PubSubTopic = demoPubSubTopic
	cfg.GoogleClientID = demoClientID
	if len(cfg.ConnectRedirectURIs) == 0 {
		// The setup page shows what a connect link brought back.
		cfg.ConnectRedirectURIs = []string{cfg.BaseURL() + "/admin/setup"}
	}
	cfg.GoogleClientSecret = demoSecret(16)
	if cfg.APIToken == "" {
		// The traffic generator's token; kept in memory only.
		cfg.APIToken = "demo-" + demoSecret(24)
	}

	// The app's handler, given by app.New before anything runs.
	var appHandler http.Handler
	deps.UseHandler = func(h http.Handler) { appHandler = h }
	handler := demoInProcess{handler: func() http.Handler { return appHandler }}
	api := &demoAPI{client: &http.Client{Transport: handler, Timeout: 30 * time.Second}, token: cfg.APIToken}
	d, err := newDemo(log, cfg, pushURL, api, handler)
	if err != nil {
		return nil, app.Deps{}, err
	}
	deps.Closers = append(deps.Closers, d.close)
	base := d.fake.URL()
	cfg.GoogleAPIURL = base
	cfg.GoogleTokenURL = d.fake.TokenURL()
	cfg.GoogleRevokeURL = "" // derived from the token URL: the emulator's
	cfg.GoogleCertsURL = d.fake.CertsURL()

	if cfg.AlertWebhookURL == "" {
		d.webhook = &demoWebhook{now: time.Now, log: log}
		deps.AlertURL, deps.AlertClient = demoWebhookURL, &http.Client{Transport: d.webhook, Timeout: 10 * time.Second}
	}
	// The built-in webhook receiver, on a loopback port: the demo's
	// webhooks may reach loopback addresses.
	recv, ln, err := newDemoReceiver(log)
	if err != nil {
		return nil, app.Deps{}, err
	}
	go func() { _ = recv.srv.Serve(ln) }()
	deps.Closers = append(deps.Closers, recv.close)
	d.receiver = recv
	cfg.WebhookAllowPrivate = true
	deps.Services = append(deps.Services, d)
	deps.DemoSource = demoSource{d}
	log.Info("demo: simulated Google running", "url", base, "accounts", len(demoAccounts), "spreadsheets", len(demoSheets),
		"scale", d.scale, "shortened_timings", strings.Join(shortened, ","), "alerts_in_process", d.webhook != nil,
		"webhook_receiver", recv.url, "webhook_allow_private", true)
	return d, deps, nil
}
