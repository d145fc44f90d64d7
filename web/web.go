// Package web is mailroom's HTTP face: the JSON API under /api/v1, the
// server-rendered admin page under /admin, health and metrics, Google's
// push endpoint and the OAuth consent routes. Every route is in routes.go,
// grouped by who may call it. Handlers bind, validate, call one method and
// render; pipelines know nothing of HTTP.
package web

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"mailroom/assets"
	"mailroom/queue"
	"mailroom/store"
)

// Deps is everything the web layer needs. Zero values take the defaults
// named.
type Deps struct {
	// Logger receives request logs and errors. Nil: discard.
	Logger *slog.Logger
	// DB is the store. Required.
	DB *store.DB
	// Webhooks is the webhooks pipeline. Nil: no /api/v1/webhooks.
	Webhooks Webhooks
	// EventsRetention is MAILROOM_EVENTS_RETENTION, said on the Webhooks
	// page.
	EventsRetention time.Duration
	// Queue is the task machinery. Nil: the queue pages and /api/v1/queues
	// show no queues, and redrive answers 503.
	Queue *queue.Queue
	// Gatherer is what /metrics exposes. Nil: an empty registry.
	Gatherer prometheus.Gatherer
	// Ready answers /readyz: nil error means ready. Nil: the store is pinged.
	Ready func(ctx context.Context) error
	// Problems lists what keeps the appliance from working now (the broker
	// away, the store unable to write), shown on the overview. Nil: none.
	Problems func() []Problem
	// Fleet, when set, is the fleet this mailroom belongs to (nil: none),
	// for the overview page.
	Fleet func(ctx context.Context) (*FleetStatus, error)
	// APIToken is MAILROOM_API_TOKEN, a static bearer token for /api/v1.
	// Empty: only tokens made in the admin page are accepted.
	APIToken string
	// AdminPassword is MAILROOM_ADMIN_PASSWORD. Empty: the login checks the
	// bcrypt hash stored by EnsureAdminPassword.
	AdminPassword string
	// PublicURL is MAILROOM_PUBLIC_URL; an https URL makes cookies Secure.
	PublicURL string
	// Demo shows the demo banner on every admin page.
	Demo bool
	// Alerts backs the "send a test alert" button. Nil: the button is hidden.
	Alerts *queue.Alerter
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// TrustedProxies are the addresses or CIDRs of reverse proxies whose
	// X-Forwarded-For is believed when finding the client's IP (the login
	// limit is per client IP). Nil: none, the peer address is the client.
	TrustedProxies []string
	// SessionTTL is how long an admin login lasts. Zero: 12h.
	SessionTTL time.Duration
	// LoginLimit is how many failed logins one client IP may make per
	// LoginWindow. Zero: 5 per minute.
	LoginLimit  int
	LoginWindow time.Duration
	// LoginAccountLimit is the account-wide ceiling on failed logins per
	// LoginWindow, from every client together. Zero: 4 × LoginLimit.
	LoginAccountLimit int
	// TokenFailLimit is how many failed tokens one source may send per
	// LoginWindow before it is answered 429. Zero: 20. Each door counts
	// apart: API bearer tokens and /metrics per client IP, pushes per
	// client IP and Pub/Sub subscription (a Google-signed push token is
	// verified even then: a shared egress address cannot block real pushes).
	TokenFailLimit int
	// EventsWaitsPerToken, EventsWaitsPerAddress and EventsWaits bound the
	// long polls of GET /api/v1/events held at once: per API token, per
	// client address and in all (past one: 429). Zero: 4, 8 and 256
	// (DefaultEventsWaits...).
	EventsWaitsPerToken   int
	EventsWaitsPerAddress int
	EventsWaits           int
	// MetricsToken is MAILROOM_METRICS_TOKEN: when set, /metrics wants
	// "Authorization: Bearer <it>". Empty: /metrics is open.
	MetricsToken string

	// The pipelines; each nil leaves its routes and pages out.
	Gmail        GmailPipeline
	GmailOptions GmailOptions
	Rules        RulesPipeline
	Forms        FormsPipeline
	// DemoSource backs the demo-only pages (serve --demo). Nil: none.
	DemoSource DemoSource
	// Setup is the first-run setup page's view of the settings. Nil: no
	// setup page.
	Setup *SetupOptions
	// DebugTasks backs POST /api/v1/debug/tasks (--debug-tasks). Nil: no
	// such route.
	DebugTasks DebugTasks
	// Connect is the Google consent round trip (connect links and the
	// admin page's connect). Nil (or no Gmail): no connect routes.
	Connect ConnectLinks
	// ConnectRedirectURIs is MAILROOM_CONNECT_REDIRECT_URIS: where a
	// connect link may return (exact match). Empty: nowhere, so the API
	// makes no links.
	ConnectRedirectURIs []string
}

// navItem is one entry of the admin navigation.
type navItem struct {
	Title string
	Path  string // absolute, for example "/admin/rules"
}

// server holds the built state of one handler; nothing here is global.
type server struct {
	deps         Deps
	log          *slog.Logger
	now          func() time.Time
	pages        map[string]*template.Template
	static       *staticFiles
	openAPI      []byte // the API description as JSON
	nav          []navItem
	secure       bool
	limiter      *loginLimiter
	tokenFails   *failLimiter // API bearer tokens, per client IP
	metricsFails *failLimiter // /metrics, per client IP
	pushFails    *failLimiter // pushes, per client IP and subscription
	waits        *waitLimiter // long polls of GET /api/v1/events held
	keys         cookieKeys
	// deviceEpoch moves on at "End all sessions": known-browser marks
	// signed before stop counting.
	deviceEpoch atomic.Uint64
	bcryptSem   chan struct{}
	cookies     cookieNames
	gatherer    prometheus.Gatherer
	sessionTTL  time.Duration
}

// FleetStatus is what the overview page shows of a fleet of mailrooms
// on one Google project.
type FleetStatus struct {
	Instance string   // this mailroom
	Seen     []string // the mailrooms seen alive, this one among them
	Up       bool     // the fleet's Redis answers
	// ProjectUnits is the project's Gmail units spent by every mailroom in
	// the last minute, of ProjectLimit; MineUnits this mailroom's.
	ProjectUnits, ProjectLimit, MineUnits int
}

// fleetOverview is the fleet's panel of the overview page.
func fleetOverview(f *FleetStatus) overviewPanel {
	others := make([]string, 0, len(f.Seen))
	for _, n := range f.Seen {
		if n != f.Instance {
			others = append(others, n)
		}
	}
	seen := "none"
	if len(others) > 0 {
		seen = strings.Join(others, ", ")
	}
	redis := "the fleet's Redis answers"
	if !f.Up {
		redis = fmt.Sprintf("the fleet's Redis does not answer: this mailroom spends 1/%d of the project's units from its own broker", max(1, len(f.Seen)))
	}
	return overviewPanel{Title: "Fleet", Figures: []overviewFigure{
		{Label: "Project's Gmail units, last minute (every mailroom)", Value: thousands(f.ProjectUnits), Note: "of " + thousands(f.ProjectLimit), Alert: !f.Up},
		{Label: "This mailroom's units, last minute", Value: thousands(f.MineUnits), Note: fmt.Sprintf("%s; %s", f.Instance, redis), Alert: !f.Up},
		{Label: "Other mailrooms seen", Value: fmt.Sprintf("%d", len(others)), Note: seen},
	}}
}

// overviewPanel is a titled row of figures on the overview page (the
// Gmail quota).
type overviewPanel struct {
	Title   string
	Figures []overviewFigure
}

// overviewFigure is one figure of a panel.
type overviewFigure struct {
	Label, Value, Note string
	// Alert marks a figure that needs the operator's attention.
	Alert bool
	// Link, when set, is where the figure leads.
	Link string
}

// New builds the HTTP handler: a gin engine with every route of routes.go.
// It fails when a template does not parse.
func New(deps Deps) (http.Handler, error) {
	s, err := newServer(deps)
	if err != nil {
		return nil, err
	}
	return s.engine()
}

// newServer checks deps, fills in defaults and parses the templates.
func newServer(deps Deps) (*server, error) {
	if deps.DB == nil {
		return nil, errors.New("web: Deps.DB is required")
	}
	s := &server{deps: deps, log: deps.Logger, now: deps.Now, gatherer: deps.Gatherer, sessionTTL: deps.SessionTTL}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("component", "web")
	if s.now == nil {
		s.now = time.Now
	}
	if s.gatherer == nil {
		s.gatherer = prometheus.NewRegistry()
	}
	if s.sessionTTL <= 0 {
		s.sessionTTL = 12 * time.Hour
	}
	limit, window := deps.LoginLimit, deps.LoginWindow
	if limit <= 0 {
		limit = 5
	}
	if window <= 0 {
		window = time.Minute
	}
	accountLimit := deps.LoginAccountLimit
	if accountLimit <= 0 {
		accountLimit = 4 * limit
	}
	s.limiter = newLoginLimiter(limit, accountLimit, window)
	tokenLimit := deps.TokenFailLimit
	if tokenLimit <= 0 {
		tokenLimit = 20
	}
	s.tokenFails = newFailLimiter(tokenLimit, window)
	s.metricsFails = newFailLimiter(tokenLimit, window)
	s.pushFails = newFailLimiter(tokenLimit, window)
	s.waits = newWaitLimiter(deps.EventsWaitsPerToken, deps.EventsWaitsPerAddress, deps.EventsWaits)
	s.bcryptSem = make(chan struct{}, 1)
	s.keys = newCookieKeys()
	if deps.Setup != nil {
		opts := normalizeSetup(*deps.Setup)
		s.deps.Setup = &opts
	}
	s.secure = strings.HasPrefix(strings.ToLower(deps.PublicURL), "https://")
	s.cookies = newCookieNames(s.secure)
	s.nav = s.buildNav()

	var err error
	if s.static, err = newStaticFiles(assets.Static()); err != nil {
		return nil, err
	}
	if s.pages, err = parsePages(assets.Templates(), s.funcs()); err != nil {
		return nil, err
	}
	if s.openAPI, err = openAPIJSON(assets.OpenAPI()); err != nil {
		return nil, err
	}
	return s, nil
}

// engine builds the gin engine with every route.
func (s *server) engine() (*gin.Engine, error) {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	if err := e.SetTrustedProxies(s.deps.TrustedProxies); err != nil {
		return nil, fmt.Errorf("web: trusted proxies: %w", err)
	}
	e.Use(s.logRequests, s.recovery, s.securityHeaders)
	e.NoRoute(s.notFound)
	e.NoMethod(s.methodNotAllowed)
	s.routes(e)
	return e, nil
}

// parsePages parses the templates: every file starting with "_" into a
// shared base, then each other *.html file as a page on a clone of it.
func parsePages(fsys fs.FS, funcs template.FuncMap) (map[string]*template.Template, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("web: read templates: %w", err)
	}
	base := template.New("").Funcs(funcs)
	var pageFiles []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case e.IsDir():
			return nil, fmt.Errorf("web: templates/%s: folders are not supported; put pages at the top level", name)
		case !strings.HasSuffix(name, ".html"):
			return nil, fmt.Errorf("web: templates/%s: template files must end in .html", name)
		case strings.HasPrefix(name, "_"):
			if _, err := base.ParseFS(fsys, name); err != nil {
				return nil, fmt.Errorf("web: parse template %s: %w", name, err)
			}
		default:
			pageFiles = append(pageFiles, name)
		}
	}
	if base.Lookup("layout") == nil {
		return nil, errors.New(`web: no template defines "layout" (expected in templates/_layout.html)`)
	}
	pages := make(map[string]*template.Template, len(pageFiles))
	for _, file := range pageFiles {
		t, err := base.Clone()
		if err != nil {
			return nil, fmt.Errorf("web: clone layout for %s: %w", file, err)
		}
		if _, err := t.ParseFS(fsys, file); err != nil {
			return nil, fmt.Errorf("web: parse template %s: %w", file, err)
		}
		if t.Lookup("content") == nil {
			return nil, fmt.Errorf(`web: template %s does not define "content"`, file)
		}
		pages[strings.TrimSuffix(file, ".html")] = t
	}
	return pages, nil
}

func (s *server) ctx(c *gin.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request.Context(), d)
}
