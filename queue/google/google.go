// Package google is mailroom's thin adapter over Google's APIs: Gmail v1
// (and Sheets v4, in sheets.go), the OAuth 2 token source of a connected
// account, the verifier of Pub/Sub push tokens, the Gmail budget, and
// Google's errors in the adapter's own classes (Refused, Permanent,
// Transient: see Classify), which know no task engine; a pipeline maps them
// to its engine's (queue/googleerr). It is the only importer of
// google.golang.org/api.
//
// Every constructor takes a base URL and an *http.Client, so tests and
// `serve --demo` point it at the emulator in googlefake.
package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"
)

// Google's OAuth 2 endpoints.
const (
	googleAuthURL   = "https://accounts.google.com/o/oauth2/v2/auth"
	googleTokenURL  = "https://oauth2.googleapis.com/token"
	googleRevokeURL = "https://oauth2.googleapis.com/revoke"
)

// Scopes are the OAuth scopes mailroom asks for: read and label mail, write
// sheets.
var defaultScopes = []string{
	"https://www.googleapis.com/auth/gmail.modify",
	"https://www.googleapis.com/auth/spreadsheets",
}

// Config configures a Client. Zero values take the defaults named.
type Config struct {
	// APIURL is the base URL serving Gmail ({base}gmail/v1/...) and Sheets
	// ({base}v4/spreadsheets/...), MAILROOM_GOOGLE_API_URL. Empty: Google's.
	APIURL string
	// TokenURL is the OAuth 2 token endpoint, MAILROOM_GOOGLE_TOKEN_URL.
	// Empty: Google's.
	TokenURL string
	// AuthURL is the OAuth 2 consent page. Empty: Google's, or the
	// emulator's "o/oauth2/auth" next to a TokenURL ending in "/token".
	AuthURL string
	// RevokeURL is the OAuth 2 revocation endpoint,
	// MAILROOM_GOOGLE_REVOKE_URL. Empty: Google's, or "revoke" next to a
	// TokenURL ending in "/token" (the emulator's).
	RevokeURL string
	// ClientID, ClientSecret and RedirectURL are the OAuth client
	// (MAILROOM_GOOGLE_CLIENT_*). Refreshing tokens needs the id and secret
	// with Google; the emulator accepts any.
	ClientID, ClientSecret, RedirectURL string
	// Scopes asked for at consent. Empty: gmail.modify and spreadsheets.
	Scopes []string
	// HTTPClient carries every call, API and token endpoint. Nil: a client
	// with a 30 s timeout.
	HTTPClient *http.Client
	// RefreshTimeout bounds one token refresh. Zero: 15 s.
	RefreshTimeout time.Duration
	// ReadRetries is how many times an idempotent read (get, list, history,
	// profile, labels) is retried at once after a 5xx or a network error,
	// before the error goes to the task's retry policy. Zero: 2; negative:
	// none.
	ReadRetries int
	// ReadRetryDelay is the wait before the first such retry, doubled each
	// time. Zero: 200 ms.
	ReadRetryDelay time.Duration
	// Budget, when set, is the Gmail quota every Gmail call spends from
	// first, at its price list (BudgetConfig.Prices). Nil: calls are not
	// budgeted (tests of the adapter alone).
	Budget *Budget
	// Prices is the price list in force when there is no Budget (the
	// Budget's wins). Zero: DefaultPrices.
	Prices Prices
	// Registerer receives mailroom_google_rate_limited_total. Nil: a
	// private registry.
	Registerer prometheus.Registerer
}

// Client makes the per-account API adapters and runs the OAuth flow.
type Client struct {
	cfg   Config
	hc    *http.Client
	oauth oauth2.Config
	// rateLimited counts the answers in which Google refused for quota.
	rateLimited *prometheus.CounterVec
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.RefreshTimeout <= 0 {
		cfg.RefreshTimeout = 15 * time.Second
	}
	if cfg.ReadRetries == 0 {
		cfg.ReadRetries = 2
	}
	if cfg.ReadRetryDelay <= 0 {
		cfg.ReadRetryDelay = 200 * time.Millisecond
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = defaultScopes
	}
	if cfg.APIURL != "" && !strings.HasSuffix(cfg.APIURL, "/") {
		// The client libraries drop a path without a trailing slash.
		cfg.APIURL += "/"
	}
	ep := oauth2.Endpoint{AuthURL: googleAuthURL, TokenURL: googleTokenURL}
	if cfg.TokenURL != "" {
		ep.TokenURL = cfg.TokenURL
		if base, ok := strings.CutSuffix(cfg.TokenURL, "/token"); ok && cfg.AuthURL == "" {
			ep.AuthURL = base + "/o/oauth2/auth"
		}
	}
	if cfg.AuthURL != "" {
		ep.AuthURL = cfg.AuthURL
	}
	if cfg.RevokeURL == "" {
		cfg.RevokeURL = googleRevokeURL
		if base, ok := strings.CutSuffix(cfg.TokenURL, "/token"); ok {
			cfg.RevokeURL = base + "/revoke"
		}
	}
	ep.AuthStyle = oauth2.AuthStyleInParams
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	rl := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mailroom_google_rate_limited_total",
		Help: "Answers in which Google refused a call for quota (429, or 403 with a rate-limit reason).",
	}, []string{"api"})
	if err := cfg.Registerer.Register(rl); err != nil {
		// A second client on one registry counts into the first's series.
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				rl = existing
			}
		}
	}
	for _, api := range []string{apiGmail, apiSheets} {
		rl.WithLabelValues(api)
	}
	return &Client{
		cfg: cfg,
		hc:  cfg.HTTPClient,
		oauth: oauth2.Config{
			ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret, RedirectURL: cfg.RedirectURL,
			Scopes: cfg.Scopes, Endpoint: ep,
		},
		rateLimited: rl,
	}
}

// Budget returns the Gmail quota budget of Config.Budget (nil without one).
func (c *Client) Budget() *Budget { return c.cfg.Budget }

// OAuthConfigured reports whether an OAuth client is set, so that accounts
// can be connected through the consent flow.
func (c *Client) OAuthConfigured() bool { return c.cfg.ClientID != "" }

// AuthCodeURL returns the consent page URL for state, asking for offline
// access (a refresh token) and the consent prompt. loginHint may be empty.
func (c *Client) AuthCodeURL(state, loginHint string) string {
	return c.authCodeURL(state, loginHint)
}

// ConsentURL is AuthCodeURL with a PKCE challenge (S256) of verifier, which
// ExchangeVerified must then present.
func (c *Client) ConsentURL(state, loginHint, verifier string) string {
	return c.authCodeURL(state, loginHint, oauth2.S256ChallengeOption(verifier))
}

func (c *Client) authCodeURL(state, loginHint string, extra ...oauth2.AuthCodeOption) string {
	opts := []oauth2.AuthCodeOption{oauth2.AccessTypeOffline, oauth2.SetAuthURLParam("prompt", "consent")}
	if loginHint != "" {
		opts = append(opts, oauth2.SetAuthURLParam("login_hint", loginHint))
	}
	return c.oauth.AuthCodeURL(state, append(opts, extra...)...)
}

// Exchange trades a consent code for a token. Errors are classified.
func (c *Client) Exchange(ctx context.Context, code string) (Token, error) {
	return c.exchange(ctx, code)
}

// ExchangeVerified trades a consent code asked for by ConsentURL, proving
// the PKCE challenge with its verifier.
func (c *Client) ExchangeVerified(ctx context.Context, code, verifier string) (Token, error) {
	return c.exchange(ctx, code, oauth2.VerifierOption(verifier))
}

func (c *Client) exchange(ctx context.Context, code string, opts ...oauth2.AuthCodeOption) (Token, error) {
	ctx, cancel := context.WithTimeout(context.WithValue(ctx, oauth2.HTTPClient, c.hc), c.cfg.RefreshTimeout)
	defer cancel()
	t, err := c.oauth.Exchange(ctx, code, opts...)
	if err != nil {
		return Token{}, fmt.Errorf("google: exchange consent code: %w", Classify(err))
	}
	return tokenFrom(t), nil
}
