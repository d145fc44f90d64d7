// Package googlefake is an in-memory Google for tests, benchmarks and
// `mailroom serve --demo`: Gmail v1 (users, messages, history, labels, watch),
// Sheets v4 (spreadsheets.get and values), OAuth 2 (token and consent
// endpoints), the OIDC certificates that verify Pub/Sub push tokens, and an
// optional Pub/Sub push publisher.
//
// It speaks Google's REST wire format, encoded with the structs generated in
// google.golang.org/api, so the official client libraries talk to it
// unchanged. Point them at the base URL returned by Start (it ends in "/"):
//
//	srv := googlefake.New(googlefake.Options{})
//	base, err := srv.Start()
//	refresh := srv.AddAccount("ann@example.com")
//	conf := &oauth2.Config{Endpoint: oauth2.Endpoint{TokenURL: srv.TokenURL()}}
//	ts := conf.TokenSource(ctx, &oauth2.Token{RefreshToken: refresh})
//	svc, err := gmail.NewService(ctx, option.WithEndpoint(base), option.WithTokenSource(ts))
//
// Tests drive the mailboxes and spreadsheets through the Go API (s.Gmail,
// s.Sheets), inject faults with InjectFault, and read counters of calls, quota
// units and Sheets writes.
package googlefake

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Server. The zero value is a working emulator.
type Options struct {
	// Now is the clock used for token expiry, history retention, watch
	// expiration, Sheets quota windows, message dates and push tokens.
	// Zero: time.Now.
	Now func() time.Time
	// Seed seeds the random numbers of probabilistic faults. Zero: 1.
	Seed uint64

	// AccessTokenTTL is the lifetime of issued access tokens. The token
	// endpoint reports it in whole seconds, at least 1. Zero: one hour.
	AccessTokenTTL time.Duration
	// ClientID and ClientSecret, when set, are required at the token and
	// consent endpoints. Empty: any client is accepted.
	ClientID, ClientSecret string
	// ConsentAccount is the email that the consent endpoint approves
	// (created on first use). Empty: the login_hint when it names a known
	// account, else access_denied. SetConsentAccount changes it later.
	ConsentAccount string
	// RedirectURIs are the OAuth client's authorized redirect URIs: the
	// consent endpoint refuses any other (400 redirect_uri_mismatch, no
	// redirect), as Google does. Empty: any absolute URL.
	RedirectURIs []string
	// AnonymousAccount, when set, is the account of API requests that carry
	// no Authorization header (option.WithoutAuthentication). Empty: such
	// requests get 401.
	AnonymousAccount string

	// HistoryRetention drops history records older than this, so that a
	// history.list from before them answers 404. Zero: 7 days; negative:
	// records are kept forever.
	HistoryRetention time.Duration
	// HistoryMaxRecords keeps at most this many history records per mailbox.
	// Zero: no limit.
	HistoryMaxRecords int
	// WatchTTL is how long users.watch lasts. Zero: 7 days.
	WatchTTL time.Duration
	// HistoryStart offsets every mailbox's history ids: the n-th mailbox
	// made starts at HistoryStart + n×1,000,000. A restarted demo sets it
	// above what an earlier run handed out, because clients keep their
	// watermarks and per-message history ids. Zero: 0.
	HistoryStart uint64

	// SheetsWriteLimit and SheetsReadLimit are the Sheets write and read
	// calls an account may make per SheetsWindow, and
	// SheetsProjectWriteLimit and SheetsProjectReadLimit those of all
	// accounts together; further calls get 429 RESOURCE_EXHAUSTED. Zero:
	// Google's 60, 60, 300 and 300; negative: unlimited.
	SheetsWriteLimit, SheetsReadLimit               int
	SheetsProjectWriteLimit, SheetsProjectReadLimit int
	// SheetsWindow is the rolling window of the Sheets quotas. Zero: one
	// minute.
	SheetsWindow time.Duration
	// SheetsGridRows and SheetsGridColumns are the grid of a new sheet.
	// Zero: Google's 1,000 x 26.
	SheetsGridRows, SheetsGridColumns int

	// GmailQuotaPrices is the Gmail price list the emulator charges
	// (see gmail_quota.go): GmailPrices2026 (the default: projects created
	// since May 1, 2026) or GmailPrices2025 (older projects).
	GmailQuotaPrices string
	// GmailUserUnitsPerMinute and GmailProjectUnitsPerMinute are Gmail's
	// quota limits per GmailQuotaWindow (see gmail_quota.go). Zero: the
	// price list's per-user limit (6,000 for 2026, 15,000 for 2025) and
	// Google's 1,200,000; negative: unlimited. GmailQuotaWindow zero: one
	// minute. GmailMaxConcurrent is the most requests of one user in
	// flight (more get 429). Zero: 20; negative: unlimited.
	GmailUserUnitsPerMinute    int
	GmailProjectUnitsPerMinute int
	GmailQuotaWindow           time.Duration
	GmailMaxConcurrent         int

	// MaxBodyBytes limits request bodies; larger ones get 413. Zero: 10 MiB.
	MaxBodyBytes int64

	// PushURL, when set, receives a Pub/Sub push envelope (with a signed OIDC
	// token) after changes to a mailbox with an active watch. Empty: no push.
	// SetPushURL changes it later.
	PushURL string
	// PushAudience is the aud claim of push tokens. Empty: PushURL.
	PushAudience string
	// PushServiceAccount is the email claim of push tokens.
	// Empty: DefaultPushServiceAccount.
	PushServiceAccount string
	// PushClient sends push requests. Zero: a client with a 10 s timeout.
	PushClient *http.Client
	// PushMinInterval is the least time between two notifications of one
	// user; a change within it of the last one gets none (dropped, not
	// delayed). Google's push guide, "Notification limitations": "Each Gmail
	// user being watched has a maximum notification rate of 1 event/sec.
	// Any user notifications above that rate will be dropped." Zero: 1 s;
	// negative: no limit (every change is pushed, coalesced per user).
	PushMinInterval time.Duration
	// HistoryLag hides history records younger than this from history.list
	// (and its answered historyId stops below them), while the push for
	// them is sent at once: the field reports Gmail's history empty for one
	// to three seconds after the push that names it (gogcli issue 379).
	// Google's documents promise no lag, so zero (the default) has none.
	HistoryLag time.Duration
}

// Server is the emulator: an http.Handler plus a Go API to drive it. All
// methods are safe for concurrent use.
type Server struct {
	// Gmail is the mailboxes' Go API.
	Gmail *Gmail
	// Sheets is the spreadsheets' Go API.
	Sheets *Sheets

	opts    Options
	handler http.Handler
	auth    *authority
	keys    *signer
	faults  *faultSet
	pusher  *pusher
	nextID  atomic.Uint64 // message and spreadsheet id sequence
	stats   stats
	base    atomic.Pointer[string]
	httpSrv *http.Server
	ln      net.Listener
	closeMu sync.Mutex
}

// New returns a Server configured by opts. It listens nowhere: use Handler
// with a server of your own, or Start.
func New(opts Options) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.AccessTokenTTL <= 0 {
		opts.AccessTokenTTL = time.Hour
	}
	if opts.HistoryRetention == 0 {
		opts.HistoryRetention = 7 * 24 * time.Hour
	}
	if opts.WatchTTL <= 0 {
		opts.WatchTTL = 7 * 24 * time.Hour
	}
	opts.sheetsDefaults()
	if opts.SheetsWindow <= 0 {
		opts.SheetsWindow = time.Minute
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 10 << 20
	}
	if opts.PushServiceAccount == "" {
		opts.PushServiceAccount = DefaultPushServiceAccount
	}
	if opts.PushClient == nil {
		opts.PushClient = &http.Client{Timeout: 10 * time.Second}
	}
	s := &Server{opts: opts}
	s.stats.calls = make(map[string]int)
	s.auth = newAuthority(s)
	s.keys = newSigner()
	s.faults = newFaultSet(rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)))
	s.pusher = newPusher(s)
	s.Gmail = newGmail(s)
	s.Sheets = newSheets(s)
	s.handler = s.buildMux()
	return s
}

// TB is the part of testing.TB that StartForTest uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// StartForTest starts a Server on a loopback port and closes it when the test
// ends.
func StartForTest(t TB, opts Options) *Server {
	t.Helper()
	s := New(opts)
	if _, err := s.Start(); err != nil {
		t.Fatalf("googlefake: start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Handler returns the emulator's HTTP handler. It serves every API at the
// root: gmail/v1/..., v4/spreadsheets/..., token, o/oauth2/auth, revoke and
// oauth2/v3/certs.
func (s *Server) Handler() http.Handler { return s.handler }

// Start serves the handler on 127.0.0.1 at a free port and returns the base
// URL, "http://127.0.0.1:PORT/". Call Close to stop it.
func (s *Server) Start() (string, error) {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.ln != nil {
		return "", errors.New("googlefake: already started")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("googlefake: listen: %w", err)
	}
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	s.ln, s.httpSrv = ln, srv
	base := "http://" + ln.Addr().String() + "/"
	s.SetBaseURL(base)
	go func() { _ = srv.Serve(ln) }()
	return base, nil
}

// SetBaseURL tells the emulator where it is reachable when it is served by a
// server of the caller's (Start sets it). URL helpers such as TokenURL and
// CertsURL are built from it.
func (s *Server) SetBaseURL(base string) {
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	s.base.Store(&base)
}

// URL returns the base URL ("http://127.0.0.1:PORT/"), or "" before Start or
// SetBaseURL.
func (s *Server) URL() string {
	if p := s.base.Load(); p != nil {
		return *p
	}
	return ""
}

// TokenURL returns the OAuth token endpoint, for oauth2.Endpoint.TokenURL.
func (s *Server) TokenURL() string { return s.URL() + "token" }

// AuthURL returns the OAuth consent endpoint, for oauth2.Endpoint.AuthURL.
func (s *Server) AuthURL() string { return s.URL() + "o/oauth2/auth" }

// CertsURL returns the JWKS endpoint serving the keys of SignPushToken.
func (s *Server) CertsURL() string { return s.URL() + "oauth2/v3/certs" }

// Close stops the listener of Start (closing open connections) and the push
// publisher. It is safe to call more than once and without Start.
func (s *Server) Close() error {
	s.pusher.close()
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.httpSrv == nil {
		return nil
	}
	err := s.httpSrv.Close()
	s.httpSrv = nil
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

func (s *Server) now() time.Time { return s.opts.Now() }

// newID returns the next number of the server-wide id sequence.
func (s *Server) newID() uint64 { return s.nextID.Add(1) }

// SkipIDs makes every message and spreadsheet id made from now on come
// after floor in the server-wide id sequence (nothing changes when the
// sequence is already past it). A restarted demo calls it once its fixed
// data is made, so that new messages never take ids that an earlier run
// gave to others.
func (s *Server) SkipIDs(floor uint64) {
	for {
		cur := s.nextID.Load()
		if cur >= floor || s.nextID.CompareAndSwap(cur, floor) {
			return
		}
	}
}

// Calls returns how many requests the emulator received for method (one of
// the Method constants), including failed and faulted ones.
func (s *Server) Calls(method string) int {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	return s.stats.calls[method]
}

// CallCounts returns a copy of the request counts by method.
func (s *Server) CallCounts() map[string]int {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	return maps.Clone(s.stats.calls)
}

// ResetCounters zeroes the call counts, Gmail quota units and Sheets
// counters (not the Sheets quota windows themselves).
func (s *Server) ResetCounters() {
	s.stats.mu.Lock()
	clear(s.stats.calls)
	s.stats.mu.Unlock()
	s.Gmail.resetUnits()
	s.Sheets.resetStats()
}

type stats struct {
	mu    sync.Mutex
	calls map[string]int
}

func (s *Server) countCall(method string) {
	s.stats.mu.Lock()
	s.stats.calls[method]++
	s.stats.mu.Unlock()
}

// ---- request dispatch ----

// endpoint is one API method: its name, what it needs and its handler.
type endpoint struct {
	method string
	// auth: the call needs a bearer token (or AnonymousAccount).
	auth bool
	// gmail: the call costs Gmail quota units (gmailPrices).
	gmail bool
	// oauth: errors are written in the OAuth shape {"error":"..."}.
	oauth  bool
	handle func(c *call) (any, error)
}

// call is one request on its way through the dispatcher.
type call struct {
	r       *http.Request
	ep      *endpoint
	params  map[string]string // userId, id, spreadsheetId, range
	query   url.Values
	body    []byte
	account string // the bearer token's account, when ep.auth
}

// noContent is a handler result answered with 204 and no body.
type noContent struct{}

// redirect is a handler result answered with 302 to its URL.
type redirect string

func (s *Server) buildMux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/gmail/v1/users/", func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, s.Gmail.route)
	})
	mux.HandleFunc("/v4/spreadsheets/", func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, s.Sheets.route)
	})
	for _, p := range []string{"/token", "/o/oauth2/token"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, s.auth.routeToken) })
	}
	for _, p := range []string{"/o/oauth2/auth", "/o/oauth2/v2/auth"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, s.auth.routeConsent) })
	}
	for _, p := range []string{"/revoke", "/o/oauth2/revoke"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, s.auth.routeRevoke) })
	}
	mux.HandleFunc("/oauth2/v3/certs", func(w http.ResponseWriter, r *http.Request) {
		s.serve(w, r, s.keys.routeCerts)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, errNotFound("No such API: "+r.URL.Path), false)
	})
	return mux
}

// routeFunc finds the endpoint of a request and its path parameters. It
// returns an *apiError (404, 405) when there is none.
type routeFunc func(r *http.Request) (*endpoint, map[string]string, error)

func (s *Server) serve(w http.ResponseWriter, r *http.Request, route routeFunc) {
	ep, params, err := route(r)
	if err != nil {
		writeError(w, err, false)
		return
	}
	s.countCall(ep.method)
	c := &call{r: r, ep: ep, params: params, query: r.URL.Query()}
	if r.Body != nil && r.Method != http.MethodGet {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				writeError(w, &apiError{Code: http.StatusRequestEntityTooLarge, Status: "INVALID_ARGUMENT",
					Reason: "uploadTooLarge", Message: "Request body too large."}, ep.oauth)
				return
			}
			writeError(w, errInvalid("Unreadable request body."), ep.oauth)
			return
		}
		c.body = body
	}
	if ep.auth {
		account, err := s.auth.authenticate(r)
		if err != nil {
			writeError(w, err, false)
			return
		}
		c.account = account
		if ep.gmail {
			done, qerr := s.Gmail.quota.admit(account, ep.method, c.query.Get("format"))
			if qerr != nil {
				writeError(w, qerr, false)
				return
			}
			defer done()
		}
	}

	f := s.faults.match(c)
	if f != nil && f.Latency > 0 {
		t := time.NewTimer(f.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	if f != nil && !f.AfterWrite && f.fails() {
		f.answer(w, ep.oauth)
		return
	}
	res, err := ep.handle(c)
	if f != nil && f.AfterWrite && f.fails() {
		f.answer(w, ep.oauth)
		return
	}
	if err != nil {
		writeError(w, err, ep.oauth)
		return
	}
	switch v := res.(type) {
	case noContent:
		w.WriteHeader(http.StatusNoContent)
	case redirect:
		http.Redirect(w, r, string(v), http.StatusFound)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(v); err != nil {
		writeError(w, &apiError{Code: 500, Status: "INTERNAL", Reason: "backendError", Message: err.Error()}, false)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// decodeBody decodes the call's JSON body into v; an empty body leaves v as is.
func (c *call) decodeBody(v any) error {
	if len(bytes.TrimSpace(c.body)) == 0 {
		return nil
	}
	if err := json.Unmarshal(c.body, v); err != nil {
		return errInvalid("Invalid JSON payload received. " + err.Error())
	}
	return nil
}

// splitPath returns the unescaped segments of the escaped request path after
// prefix, or nil when the path does not start with it.
func splitPath(r *http.Request, prefix string) []string {
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, prefix) {
		return nil
	}
	raw := strings.Split(strings.TrimPrefix(p, prefix), "/")
	out := make([]string, 0, len(raw))
	for _, seg := range raw {
		u, err := url.PathUnescape(seg)
		if err != nil {
			u = seg
		}
		out = append(out, u)
	}
	return out
}

// ---- errors ----

// apiError is an error answered in Google's JSON error shape.
type apiError struct {
	Code   int
	Status string // e.g. NOT_FOUND
	Reason string // errors[0].reason, e.g. notFound
	// Domain is errors[0].domain. Empty: global.
	Domain  string
	Message string
	// Header is added to the response (WWW-Authenticate, Retry-After).
	Header http.Header
	// OAuthCode, when set, is the OAuth error code of endpoints answering in
	// the OAuth shape ({"error":"invalid_grant"}).
	OAuthCode string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("googlefake: %d %s: %s", e.Code, e.Reason, e.Message)
}

func errNotFound(msg string) *apiError {
	if msg == "" {
		msg = "Requested entity was not found."
	}
	return &apiError{Code: 404, Status: "NOT_FOUND", Reason: "notFound", Message: msg}
}

func errInvalid(msg string) *apiError {
	return &apiError{Code: 400, Status: "INVALID_ARGUMENT", Reason: "invalidArgument", Message: msg}
}

func errForbidden(msg string) *apiError {
	return &apiError{Code: 403, Status: "PERMISSION_DENIED", Reason: "forbidden", Message: msg}
}

func errMethod() *apiError {
	return &apiError{Code: 405, Status: "INVALID_ARGUMENT", Reason: "httpMethodNotAllowed", Message: "Method not allowed."}
}

// statusFor gives the canonical status and reason of an HTTP code, used for
// injected faults without an explicit reason.
func statusFor(code int) (status, reason, message string) {
	switch code {
	case 400:
		return "INVALID_ARGUMENT", "invalidArgument", "Bad Request"
	case 401:
		return "UNAUTHENTICATED", "authError", "Invalid Credentials"
	case 403:
		return "PERMISSION_DENIED", "rateLimitExceeded", "Rate Limit Exceeded"
	case 404:
		return "NOT_FOUND", "notFound", "Requested entity was not found."
	case 409:
		return "ABORTED", "conflict", "Conflict"
	case 429:
		return "RESOURCE_EXHAUSTED", "rateLimitExceeded", "Resource has been exhausted (e.g. check quota)."
	case 500:
		return "INTERNAL", "backendError", "Internal error encountered."
	case 502:
		return "UNAVAILABLE", "backendError", "Bad Gateway"
	case 503:
		return "UNAVAILABLE", "backendError", "The service is currently unavailable."
	case 504:
		return "DEADLINE_EXCEEDED", "backendError", "Deadline exceeded."
	}
	return "UNKNOWN", "unknown", http.StatusText(code)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    int         `json:"code"`
	Message string      `json:"message"`
	Errors  []errorItem `json:"errors"`
	Status  string      `json:"status"`
}

type errorItem struct {
	Message string `json:"message"`
	Domain  string `json:"domain"`
	Reason  string `json:"reason"`
}

type oauthErrorBody struct {
	Error       string `json:"error"`
	Description string `json:"error_description,omitempty"`
}

// writeError answers err: an *apiError in Google's JSON error shape (or the
// OAuth shape when oauth is set), anything else as a 500.
func writeError(w http.ResponseWriter, err error, oauth bool) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{Code: 500, Status: "INTERNAL", Reason: "backendError", Message: err.Error()}
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	var body any
	if oauth {
		code := e.OAuthCode
		if code == "" {
			code = strings.ToLower(e.Status)
		}
		body = oauthErrorBody{Error: code, Description: e.Message}
	} else {
		domain := e.Domain
		if domain == "" {
			domain = "global"
		}
		body = errorBody{Error: errorDetail{
			Code:    e.Code,
			Message: e.Message,
			Errors:  []errorItem{{Message: e.Message, Domain: domain, Reason: e.Reason}},
			Status:  e.Status,
		}}
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(e.Code)
	_, _ = w.Write(b)
}
