package app

import (
	"net/http"
	"time"

	"mailroom/queue/google"
	"mailroom/web"
)

// setupCheckTimeout bounds the setup page's Google credentials check.
const setupCheckTimeout = 5 * time.Second

// setupOptions builds the first-run setup page (/admin/setup) from the
// configuration as the app runs it: built after the pipelines, so with
// --demo it sees the emulator's Google settings.
func (a *App) setupOptions() *web.SetupOptions {
	cfg := a.cfg
	// Its own client, so the check is bounded by its own short timeout;
	// queue/google derives the token endpoint (Google's unless
	// MAILROOM_GOOGLE_TOKEN_URL is set) and the scopes.
	gc := google.New(google.Config{
		TokenURL: cfg.GoogleTokenURL, ClientID: cfg.GoogleClientID, ClientSecret: cfg.GoogleClientSecret, RedirectURL: cfg.redirectURL(),
		HTTPClient: &http.Client{Timeout: setupCheckTimeout}, RefreshTimeout: setupCheckTimeout,
	})
	return &web.SetupOptions{
		Demo:                  cfg.Demo,
		PublicURL:             cfg.BaseURL(),
		PublicURLSet:          cfg.PublicURL != "",
		GoogleClientID:        cfg.GoogleClientID,
		GoogleClientSecretSet: cfg.GoogleClientSecret != "",
		RedirectURL:           cfg.redirectURL(),
		RedirectURLSet:        cfg.GoogleRedirectURL != "",
		PubSubTopic:           cfg.PubSubTopic,
		PollInterval:          cfg.GmailPollInterval,
		PushAudience:          cfg.PushAudience,
		PushServiceAccount:    cfg.PushServiceAccount,
		PushTokenSet:          cfg.PushToken != "",
		AlertWebhookURL:       cfg.AlertWebhookURL,
		ConnectRedirectURIs:   cfg.ConnectRedirectURIs,
		GmailUserUnits:        cfg.GmailUserUnitsInForce(),
		GmailPrices:           cfg.GmailPrices(),
		GmailProjectUnits:     cfg.GmailProjectUnits,
		Google:                gc,
		CheckTimeout:          setupCheckTimeout,
	}
}
