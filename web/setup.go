package web

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/oauth2"

	"mailroom/queue"
	"mailroom/queue/google"
)

// SetupOptions are the settings the first-run setup page checks, as the
// process runs with them (after --demo pointed Google at the emulator).
// Secrets are passed only as "is set", except the alert webhook, whose host
// alone is shown.
type SetupOptions struct {
	// Demo: the Google settings point at the built-in emulator.
	Demo bool
	// PublicURL is the effective public URL (MAILROOM_PUBLIC_URL, or
	// http:// + the listener); PublicURLSet reports whether it was given.
	PublicURL    string
	PublicURLSet bool
	// GoogleClientID is MAILROOM_GOOGLE_CLIENT_ID; GoogleClientSecretSet
	// reports whether MAILROOM_GOOGLE_CLIENT_SECRET is set.
	GoogleClientID        string
	GoogleClientSecretSet bool
	// RedirectURL is the effective OAuth redirect URL; RedirectURLSet
	// reports whether MAILROOM_GOOGLE_REDIRECT_URL was given.
	RedirectURL    string
	RedirectURLSet bool
	// PubSubTopic is MAILROOM_PUBSUB_TOPIC; PollInterval is
	// MAILROOM_GMAIL_POLL_INTERVAL (what keeps accounts in sync without it).
	PubSubTopic  string
	PollInterval time.Duration
	// PushAudience and PushServiceAccount are MAILROOM_PUSH_AUDIENCE and
	// MAILROOM_PUSH_SERVICE_ACCOUNT; PushTokenSet reports whether
	// MAILROOM_PUSH_TOKEN is set.
	PushAudience       string
	PushServiceAccount string
	PushTokenSet       bool
	// AlertWebhookURL is MAILROOM_ALERT_WEBHOOK_URL; only its host is shown.
	AlertWebhookURL string
	// GmailUserUnits and GmailProjectUnits are
	// MAILROOM_GMAIL_USER_UNITS_PER_MINUTE and
	// MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE (the demo's as it runs).
	GmailUserUnits, GmailProjectUnits int
	// GmailPrices is the Gmail price list in force
	// (MAILROOM_GMAIL_QUOTA_PRICES). Zero: google.DefaultPrices.
	GmailPrices google.Prices
	// Google is the OAuth client the credentials check calls (a
	// *google.Client built from the settings above); its consent URL also
	// gives the scopes shown. Nil: no check, no scopes.
	Google SetupGoogle
	// ConnectRedirectURIs is MAILROOM_CONNECT_REDIRECT_URIS (where connect
	// links may return), shown with an example of their use.
	ConnectRedirectURIs []string
	// CheckTimeout bounds the credentials check. Zero: 5 s.
	CheckTimeout time.Duration
}

// SetupGoogle is the part of *google.Client the setup page uses.
type SetupGoogle interface {
	// Exchange trades a consent code at the token endpoint.
	Exchange(ctx context.Context, code string) (google.Token, error)
	// AuthCodeURL is the consent page URL, carrying the scopes asked for.
	AuthCodeURL(state, loginHint string) string
}

var _ SetupGoogle = (*google.Client)(nil)

// gmailPushPublisher is the service account through which Gmail publishes
// to a Pub/Sub topic; it needs the Pub/Sub Publisher role on the topic.
const gmailPushPublisher = "gmail-api-push@system.gserviceaccount.com"

// setupCheckCode is the deliberately invalid consent code of the
// credentials check: Google answers it with 400 invalid_grant when the
// client is valid and 401 invalid_client when it is not.
const setupCheckCode = "mailroom-setup-check-not-a-real-code"

// normalizeSetup fills in the setup options' defaults.
func normalizeSetup(opts SetupOptions) SetupOptions {
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 5 * time.Second
	}
	opts.PublicURL = strings.TrimRight(opts.PublicURL, "/")
	return opts
}

// setupHandlers are the first-run setup page's routes (/admin/setup).
type setupHandlers struct {
	*server
	opts SetupOptions
}

// Item states, in the order of their weight.
const (
	setupOK      = "ok"
	setupDemo    = "demo"
	setupWarn    = "warn"
	setupMissing = "missing"
)

// setupItem is one line of the checklist.
type setupItem struct {
	Key   string // stable id: public_url, oauth_client, redirect_url, pubsub_topic, push_auth, alert_webhook
	Title string
	State string // ok, demo, warn or missing
	Value string // what is configured, secrets never included
	Note  string // one sentence: what it means, or how to fix it
}

// setupValue is one value to paste into Google Cloud.
type setupValue struct {
	ID    string // element id, for the copy button
	Title string
	Value string
	Where string // where in Google Cloud it goes
	Note  string
}

type setupView struct {
	Demo     bool
	Items    []setupItem
	Missing  int
	Warnings int
	Values   []setupValue
	Scopes   []string
	// CanAlert: an Alerter with somewhere to post is wired (the test
	// alert button).
	CanAlert bool
	// CanCheck: an OAuth client is set (the credentials check button).
	CanCheck bool
	// Connect shows how a service uses a connect link.
	Connect setupConnect
}

// setupConnect is the setup page's connect-link card: the redirect URIs
// allowed, a curl call making a link, and the outcome a link brought back
// to this page (the demo lists it as a redirect URI).
type setupConnect struct {
	RedirectURIs []string
	Example      string
	// Back is the query a link returned here with (status, error,
	// accountId, state); empty when not arriving from one.
	Status, Error, AccountID string
}

func (x *setupHandlers) page(c *gin.Context) {
	v := x.view()
	if s := x.server; s != nil {
		// Without a webhook the Alerter has nowhere to post (the demo
		// catches alerts in process).
		v.CanAlert = s.deps.Alerts != nil && (x.opts.AlertWebhookURL != "" || x.opts.Demo)
	}
	v.Connect.Status, v.Connect.Error, v.Connect.AccountID = truncateParam(c.Query("status")), truncateParam(c.Query("error")), truncateParam(c.Query("accountId"))
	x.render(c, http.StatusOK, "setup", v)
}

// truncateParam keeps a query value shown on the page short (it is only
// ever printed escaped).
func truncateParam(s string) string {
	if len(s) > 64 {
		return s[:64]
	}
	return s
}

// connectExample is the curl call that makes a connect link here.
func (x *setupHandlers) connectExample() setupConnect {
	back := "https://app.example/gmail-done"
	if len(x.opts.ConnectRedirectURIs) > 0 {
		back = x.opts.ConnectRedirectURIs[0]
	}
	return setupConnect{
		RedirectURIs: x.opts.ConnectRedirectURIs,
		Example: "curl -s -H \"Authorization: Bearer $TOKEN\" \\\n  -d '{\"redirectUri\":\"" + back + "\",\"state\":\"your-session-id\",\"email\":\"user@gmail.com\"}' \\\n  " +
			x.opts.PublicURL + "/api/v1/users/$USER_ID/connect",
	}
}

func (x *setupHandlers) pushURL() string { return x.opts.PublicURL + "/push/gmail" }

// view builds the checklist and the values from the options.
func (x *setupHandlers) view() setupView {
	o := x.opts
	v := setupView{Demo: o.Demo, Scopes: x.scopes(), CanCheck: o.Google != nil && o.GoogleClientID != "" && o.GoogleClientSecretSet, Connect: x.connectExample()}
	v.Items = []setupItem{x.publicURLItem(), x.oauthItem(), x.redirectItem(), x.topicItem(), x.pushItem(), x.alertItem()}
	if x.opts.GmailUserUnits > 0 {
		v.Items = append(v.Items[:len(v.Items)-1], x.gmailQuotaItem(), v.Items[len(v.Items)-1])
	}
	for _, it := range v.Items {
		switch it.State {
		case setupMissing:
			v.Missing++
		case setupWarn:
			v.Warnings++
		}
	}

	v.Values = append(v.Values, setupValue{ID: "setup-redirect", Title: "Authorized redirect URI", Value: o.RedirectURL,
		Where: "APIs & Services → Credentials → your OAuth client (Web application)"})
	push := setupValue{ID: "setup-push", Title: "Push endpoint URL", Value: x.pushURL(),
		Where: "Pub/Sub → Subscriptions → your push subscription → Endpoint URL"}
	switch {
	case o.PushAudience == "" && o.PushTokenSet:
		push.Value += "?token=<MAILROOM_PUSH_TOKEN>"
		push.Note = "Replace the placeholder with the value of MAILROOM_PUSH_TOKEN; this page never shows it."
	case o.PushTokenSet:
		push.Note = "With OIDC authentication. The shared-token alternative is " + x.pushURL() + "?token=<MAILROOM_PUSH_TOKEN> (the placeholder replaced by the value of MAILROOM_PUSH_TOKEN)."
	default:
		push.Note = "With authentication enabled and the service account below."
	}
	v.Values = append(v.Values, push)
	aud := setupValue{ID: "setup-audience", Title: "Audience (OIDC)", Value: o.PushAudience,
		Where: "the push subscription → Enable authentication → Audience"}
	if aud.Value == "" {
		aud.Value = x.pushURL()
		aud.Note = "Suggested: MAILROOM_PUSH_AUDIENCE is not set; set it to this same value (Pub/Sub's default audience is the endpoint URL)."
	}
	v.Values = append(v.Values, aud)
	if o.PushServiceAccount != "" {
		v.Values = append(v.Values, setupValue{ID: "setup-sa", Title: "Service account (OIDC)", Value: o.PushServiceAccount,
			Where: "the push subscription → Enable authentication → Service account"})
	}
	v.Values = append(v.Values, setupValue{ID: "setup-publisher", Title: "Topic publisher", Value: gmailPushPublisher,
		Where: "Pub/Sub → Topics → " + orText(o.PubSubTopic, "your topic") + " → Permissions: role Pub/Sub Publisher",
		Note:  "Gmail publishes mailbox changes through this account."})
	return v
}

// scopes are the OAuth scopes the client asks for, read off its consent
// URL so that they cannot drift from what queue/google requests.
func (x *setupHandlers) scopes() []string {
	if x.opts.Google == nil {
		return nil
	}
	u, err := url.Parse(x.opts.Google.AuthCodeURL("setup", ""))
	if err != nil {
		return nil
	}
	return strings.Fields(u.Query().Get("scope"))
}

func (x *setupHandlers) publicURLItem() setupItem {
	o := x.opts
	it := setupItem{Key: "public_url", Title: "Public URL", Value: o.PublicURL}
	switch {
	case !o.PublicURLSet:
		it.State, it.Value = setupWarn, o.PublicURL+" (the listener: MAILROOM_PUBLIC_URL is not set)"
		it.Note = "Google cannot reach the listener address: set MAILROOM_PUBLIC_URL to the https:// URL of your TLS reverse proxy."
	case !strings.HasPrefix(strings.ToLower(o.PublicURL), "https://"):
		it.State = setupWarn
		it.Note = "Pub/Sub pushes only to https endpoints, Google's sign-in returns over http only to localhost, and admin cookies are not marked Secure: serve mailroom through a TLS reverse proxy and set MAILROOM_PUBLIC_URL to its https:// URL."
	default:
		it.State = setupOK
		it.Note = "Users and Google reach mailroom here; the values below are made from it."
	}
	return it
}

func (x *setupHandlers) oauthItem() setupItem {
	o := x.opts
	it := setupItem{Key: "oauth_client", Title: "Google OAuth client"}
	switch {
	case o.Demo:
		it.State, it.Value = setupDemo, o.GoogleClientID
		it.Note = "Points at the built-in Google emulator; for real accounts restart without --demo and set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET."
	case o.GoogleClientID != "" && o.GoogleClientSecretSet:
		it.State, it.Value = setupOK, o.GoogleClientID+" · secret set (not shown)"
		it.Note = "Accounts can be connected with Google's sign-in; the button below checks that Google accepts this client."
	default:
		it.State, it.Value = setupMissing, "not set"
		it.Note = "Create an OAuth client of type Web application in Google Cloud (APIs & Services → Credentials) and set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET."
	}
	return it
}

func (x *setupHandlers) redirectItem() setupItem {
	o := x.opts
	it := setupItem{Key: "redirect_url", Title: "OAuth redirect URL", Value: o.RedirectURL}
	if !o.RedirectURLSet {
		it.Value += " (public URL + /oauth/google/callback)"
	}
	u, err := url.Parse(o.RedirectURL)
	switch {
	case o.Demo:
		it.State = setupDemo
		it.Note = "The emulator's sign-in comes back here; a real OAuth client must list its redirect URL under Authorized redirect URIs."
	case err != nil || u.Host == "":
		it.State = setupMissing
		it.Note = "This is not an absolute URL: set MAILROOM_GOOGLE_REDIRECT_URL, or unset it to use the public URL + /oauth/google/callback."
	case u.Scheme == "https":
		it.State = setupOK
		it.Note = "Add it to the OAuth client's Authorized redirect URIs, exactly as shown."
	case isLoopbackHost(u.Hostname()):
		it.State = setupWarn
		it.Note = "Google accepts an http redirect only to this machine, so sign-in works only from here: set MAILROOM_PUBLIC_URL (or MAILROOM_GOOGLE_REDIRECT_URL) to an https URL."
	default:
		it.State = setupMissing
		it.Note = "Google refuses http redirect URLs outside localhost: set MAILROOM_PUBLIC_URL (or MAILROOM_GOOGLE_REDIRECT_URL) to an https URL."
	}
	return it
}

func (x *setupHandlers) topicItem() setupItem {
	o := x.opts
	it := setupItem{Key: "pubsub_topic", Title: "Pub/Sub topic", Value: o.PubSubTopic}
	switch {
	case o.Demo:
		it.State = setupDemo
		it.Note = "The emulator's topic: Gmail changes are pushed in process, as Pub/Sub would push them."
	case o.PubSubTopic != "":
		it.State = setupOK
		it.Note = "users.watch asks Gmail to publish every mailbox change to this topic; " + gmailPushPublisher + " needs the Pub/Sub Publisher role on it."
	default:
		it.State, it.Value = setupWarn, "not set: polling only"
		it.Note = fmt.Sprintf("Without a topic Gmail pushes nothing and accounts are synced by polling alone, every %s (MAILROOM_GMAIL_POLL_INTERVAL): set MAILROOM_PUBSUB_TOPIC=projects/PROJECT/topics/TOPIC to see changes within seconds.", humanDuration(o.PollInterval))
	}
	return it
}

func (x *setupHandlers) pushItem() setupItem {
	o := x.opts
	it := setupItem{Key: "push_auth", Title: "Push authentication"}
	var parts []string
	if o.PushAudience != "" {
		parts = append(parts, "OIDC audience "+o.PushAudience)
		if o.PushServiceAccount != "" {
			parts = append(parts, "service account "+o.PushServiceAccount)
		}
	}
	if o.PushTokenSet {
		parts = append(parts, "shared ?token= (set, not shown)")
	}
	it.Value = strings.Join(parts, " · ")
	switch {
	case o.Demo:
		it.State = setupDemo
		it.Note = "Pushes carry OIDC tokens signed by the emulator and are verified against its keys, as in production."
	case o.PushAudience != "" && o.PushServiceAccount == "":
		it.State = setupWarn
		it.Note = "Any Google-signed token for this audience is accepted: set MAILROOM_PUSH_SERVICE_ACCOUNT to the push subscription's service account to accept only it."
	case o.PushAudience != "":
		it.State = setupOK
		it.Note = "Pushes must carry a Google-signed OIDC token for this audience and service account."
	case o.PushTokenSet:
		it.State = setupOK
		it.Note = "Pushes must carry ?token= with the value of MAILROOM_PUSH_TOKEN; OIDC (MAILROOM_PUSH_AUDIENCE) is the stronger choice."
	default:
		it.State, it.Value = setupMissing, "neither an OIDC audience nor a shared token"
		it.Note = "Every push is refused: set MAILROOM_PUSH_AUDIENCE and MAILROOM_PUSH_SERVICE_ACCOUNT for OIDC, or MAILROOM_PUSH_TOKEN for a shared token."
	}
	return it
}

func (x *setupHandlers) gmailQuotaItem() setupItem {
	o := x.opts
	pr := o.GmailPrices
	if pr.Name == "" {
		pr = google.MustPrices(google.DefaultPrices)
	}
	it := setupItem{Key: "gmail_quota", Title: "Gmail quota",
		Value: fmt.Sprintf("%s units a minute per account, %s for the project, at Google's %s price list (messages.get %d, threads.get %d)",
			thousands(o.GmailUserUnits), thousands(o.GmailProjectUnits), pr.Name, pr.MessagesGet, pr.ThreadsGet)}
	sizing := fullSyncSizing(pr, o.GmailUserUnits)
	switch {
	case o.Demo:
		it.State = setupDemo
		it.Note = fmt.Sprintf("The emulated Google project is an older one, on Google's %s price list with %s units a minute per user (projects created since May 2026 get the 2026 list and 6,000), so the demo's first syncs stay short; the emulator refuses what Google would. %s",
			pr.Name, thousands(o.GmailUserUnits), sizing)
	case o.GmailUserUnits > pr.UserUnitsPerMinute:
		it.State = setupWarn
		it.Note = fmt.Sprintf("More than the %s units a minute per user of Google's %s price list (MAILROOM_GMAIL_QUOTA_PRICES): set MAILROOM_GMAIL_USER_UNITS_PER_MINUTE to what your project's quota page in Cloud Console shows, or leave it unset for the list's. Refusals from Google lower mailroom's budget on their own anyway. %s",
			thousands(pr.UserUnitsPerMinute), pr.Name, sizing)
	default:
		it.State = setupOK
		it.Note = fmt.Sprintf("Every Gmail call spends from one budget per account and one for the project, live changes first, then reclassify, then full syncs, at the %s price list's costs. A project created before May 2026 that kept its earlier quota sets MAILROOM_GMAIL_QUOTA_PRICES=2025. %s",
			pr.Name, sizing)
	}
	return it
}

// fullSyncSizing says what a first sync of 10,000 messages costs at the
// price list and the account's units a minute (a messages.get each, and
// the list pages): the most it takes, threads fetched whole take less.
func fullSyncSizing(pr google.Prices, perMinute int) string {
	const n, page = 10_000, 500
	units := n*pr.MessagesGet + (n+page-1)/page*pr.MessagesList
	minutes := (units + max(perMinute, 1) - 1) / max(perMinute, 1)
	return fmt.Sprintf("A first sync of 10,000 messages costs up to %s units: about %d minutes of one account's quota.", thousands(units), minutes)
}

// thousands writes n with comma separators.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func (x *setupHandlers) alertItem() setupItem {
	o := x.opts
	it := setupItem{Key: "alert_webhook", Title: "Alert webhook"}
	switch {
	case o.AlertWebhookURL != "":
		host := "the webhook"
		if u, err := url.Parse(o.AlertWebhookURL); err == nil && u.Host != "" {
			host = u.Host
		}
		it.State, it.Value = setupOK, "posts to "+host+" (the rest of the URL is a secret, not shown)"
		it.Note = "Dead letters are announced there, grouped; the button below sends a test message."
	case o.Demo:
		it.State, it.Value = setupDemo, "caught in process"
		it.Note = "Alerts are shown on the Demo alerts page; set MAILROOM_ALERT_WEBHOOK_URL to post them to Discord or Slack instead."
	default:
		it.State, it.Value = setupMissing, "not set"
		it.Note = "Tasks that fail for good show only on the Dead letters page: set MAILROOM_ALERT_WEBHOOK_URL to a Discord or Slack incoming webhook to be told."
	}
	return it
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func orText(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// testAlert sends the Alerter's test message, as the dead-letters page's
// button does, and comes back to the setup page.
func (x *setupHandlers) testAlert(c *gin.Context) {
	s := x.server
	if s == nil || s.deps.Alerts == nil {
		x.fail(c, unavailable("Alerts are not wired in this server."))
		return
	}
	kind, text := sendTestAlert(c.Request.Context(), s.deps.Alerts)
	x.setFlash(c, kind, text)
	redirect(c, "/admin/setup")
}

// sendTestAlert posts the Alerter's test message within 15 s and returns
// the flash that reports it (the setup and dead-letters pages' buttons).
func sendTestAlert(ctx context.Context, a *queue.Alerter) (kind, text string) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := a.Test(ctx); err != nil {
		return "error", "The test alert was not delivered: " + err.Error()
	}
	return "ok", "A test alert was posted to the webhook."
}

// checkGoogle makes the one harmless call of the credentials check.
func (x *setupHandlers) checkGoogle(c *gin.Context) {
	o := x.opts
	if o.Google == nil || o.GoogleClientID == "" || !o.GoogleClientSecretSet {
		x.setFlash(c, "error", "There is no OAuth client to check: set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET and restart.")
		redirect(c, "/admin/setup")
		return
	}
	ok, text := checkGoogleClient(c.Request.Context(), o.Google, o.CheckTimeout, o.RedirectURL)
	kind := "error"
	if ok {
		kind = "ok"
	}
	x.setFlash(c, kind, text)
	redirect(c, "/admin/setup")
}

// checkGoogleClient trades a deliberately invalid consent code at the
// token endpoint, within timeout. Google answers 400 invalid_grant when the
// client id and secret are right (only the code is wrong) and 401
// invalid_client when they are not; nothing is created or changed. It
// returns whether the client is valid and one sentence saying why.
func checkGoogleClient(ctx context.Context, g SetupGoogle, timeout time.Duration, redirectURL string) (bool, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := g.Exchange(ctx, setupCheckCode)
	var re *oauth2.RetrieveError
	var ne net.Error
	switch {
	case err == nil:
		return false, "The token endpoint accepted a made-up code, so it is not Google's: check MAILROOM_GOOGLE_TOKEN_URL."
	case errors.As(err, &re):
		switch re.ErrorCode {
		case "invalid_grant":
			return true, "Google accepts this OAuth client id and secret: it refused only the deliberately invalid code (400 invalid_grant)."
		case "invalid_client":
			return false, "Google does not accept this OAuth client (401 invalid_client): check MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET against the client in Google Cloud."
		case "redirect_uri_mismatch":
			return false, "Google knows this OAuth client but it does not list " + redirectURL + " among its Authorized redirect URIs (redirect_uri_mismatch): add it in Google Cloud."
		case "unauthorized_client":
			return false, "This OAuth client may not use the authorization-code flow (unauthorized_client): create one of type Web application."
		}
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		return false, fmt.Sprintf("The token endpoint answered %d %s, which says nothing certain about the client: check MAILROOM_GOOGLE_TOKEN_URL.", status, orText(re.ErrorCode, "without an OAuth error code"))
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return false, fmt.Sprintf("The token endpoint did not answer within %s: check that this machine can reach it (MAILROOM_GOOGLE_TOKEN_URL, proxies, firewall).", timeout)
	default:
		return false, "The token endpoint could not be reached (" + err.Error() + "): check that this machine can reach it."
	}
}
