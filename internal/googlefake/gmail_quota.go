package googlefake

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Gmail's usage limits, as Google documents them
// (developers.google.com/workspace/gmail/api/reference/quota): every method
// costs quota units (the price list, gmailPrices), and two limits apply at
// once, per user and per project. Google runs two price lists at once
// (doc_gmail.go names the sources of each row): a Cloud project created on
// or after May 1, 2026 gets 6,000 units per user per minute and the new
// table (messages.get 20, threads.get 40, ...), one that used the API
// between November 2025 and April 2026 keeps 15,000 and the earlier table
// (messages.get 5, threads.get 10). Both get 1,200,000 per project per
// minute. Options.GmailQuotaPrices picks the list; the default is the one a
// new project gets.
//
// Over a limit Google refuses the call (developers.google.com/workspace/
// gmail/api/guides/handle-errors): 403 with reason userRateLimitExceeded
// (per user) or rateLimitExceeded (per project), both in the usageLimits
// domain, the user's message naming when to retry ("Retry after <RFC 3339
// time>"); and 429 rateLimitExceeded "Too many concurrent requests for
// user" when one user has too many requests in flight. A refused call costs
// nothing. In the field Google refuses a user over its minute in other
// shapes too (rateLimitExceeded with a message naming the per-user limit,
// or a 429 naming no scope): SetUserRefusal picks the shape, and
// doc_gmail.go names the report each comes from.
//
// The emulator keeps an exact sliding log of every counted call (Google
// does not say how it measures its minute; a sliding window is at least as
// strict as any fixed one).
const (
	DefaultGmailProjectUnitsPerMinute = 1_200_000
	// DefaultGmailMaxConcurrent is the most requests of one user in flight.
	// Google documents the 429 but not its number; 20 is well below what
	// Gmail is reported to allow, so the emulator errs on the strict side.
	DefaultGmailMaxConcurrent = 20
)

// Gmail price lists (Options.GmailQuotaPrices, Gmail.SetQuotaPrices).
const (
	// GmailPrices2026: projects created since May 1, 2026 (the default),
	// 6,000 units a user a minute.
	GmailPrices2026          = "2026"
	GmailPrices2026UserUnits = 6000
	// GmailPrices2025: projects that used the API between November 2025
	// and April 2026, 15,000 units a user a minute.
	GmailPrices2025          = "2025"
	GmailPrices2025UserUnits = 15000
)

// gmailPriceList is one price list: units by method, the surcharge of a
// messages.get that returns the body, and the per-user limit.
type gmailPriceList struct {
	name      string
	userUnits int
	byMethod  map[string]int
	// getBody is what a messages.get of format full, raw or html costs.
	getBody int
}

// gmailPrices returns the price list named, written from Google's tables
// (not from mailroom's: the emulator checks the app, it does not copy it).
func gmailPrices(name string) (gmailPriceList, error) {
	old := map[string]int{
		MethodGetProfile: 1, MethodWatch: 100, MethodStop: 50, MethodMessagesList: 5, MethodMessagesGet: 5,
		MethodMessagesModify: 5, MethodMessagesBatchModify: 50, MethodMessagesTrash: 5, MethodMessagesUntrash: 5,
		MethodMessagesDelete: 10, MethodHistoryList: 2, MethodLabelsList: 1, MethodLabelsGet: 1,
		MethodLabelsCreate: 5, MethodThreadsGet: 10,
	}
	switch name {
	case GmailPrices2025:
		return gmailPriceList{name: name, userUnits: GmailPrices2025UserUnits, byMethod: old, getBody: 5}, nil
	case GmailPrices2026, "":
		now := maps.Clone(old)
		// Content reads four times dearer; the rest unchanged.
		now[MethodMessagesGet], now[MethodMessagesTrash], now[MethodThreadsGet] = 20, 20, 40
		return gmailPriceList{name: GmailPrices2026, userUnits: GmailPrices2026UserUnits, byMethod: now, getBody: 60}, nil
	}
	return gmailPriceList{}, fmt.Errorf("googlefake: no Gmail price list %q (want %s or %s)", name, GmailPrices2026, GmailPrices2025)
}

// price is what a call of method costs, format being messages.get's
// format parameter; 0 for a method that is not Gmail's.
func (l gmailPriceList) price(method, format string) int {
	if method == MethodMessagesGet {
		switch format {
		case "", "full", "raw", "html": // full is the default format
			return l.getBody
		}
	}
	return l.byMethod[method]
}

// Error reasons of Gmail's quota refusals. QuotaRefusals counts refusals
// under the reason Google's quota page gives the limit refused
// (userRateLimitExceeded: the user's; rateLimitExceeded: the project's),
// whatever shape the answer took (see RefusalShape).
const (
	ReasonUserRateLimit = "userRateLimitExceeded"
	ReasonRateLimit     = "rateLimitExceeded"
)

// RefusalShape is the words of a Gmail quota refusal. Google documents one
// shape per limit, but in the field it refuses a user over its minute in
// several (see doc_gmail.go for the reports each comes from); mailroom
// must tell them apart by what they say.
type RefusalShape string

// Refusal shapes.
const (
	// RefusalUserDocumented: 403 userRateLimitExceeded in usageLimits,
	// "User-rate limit exceeded.  Retry after <time>" (handle-errors and
	// quota reference). The default shape of the per-user refusal.
	RefusalUserDocumented RefusalShape = "user-documented"
	// RefusalQueriesPerUser: 403 rateLimitExceeded in usageLimits, "Quota
	// exceeded for quota metric 'Queries' and limit 'Queries per minute
	// per user' of service 'gmail.googleapis.com' for consumer
	// 'project_number:…'." (elie222/inbox-zero issue 480,
	// mxngls/gmail-cleaner issue 5, GAM-team/got-your-back issue 309).
	RefusalQueriesPerUser RefusalShape = "queries-per-minute-per-user"
	// RefusalTotalQueryCost: 403 rateLimitExceeded in usageLimits, "Quota
	// exceeded for quota metric 'Total Query Cost' and limit 'Units per
	// minute per user' of service 'gmail.googleapis.com' for consumer
	// 'project_number:…'.": the same answer under the May 2026 quotas,
	// which count units, not queries (one public report quotes it; the
	// rest of the body is the 'Queries' shape's, an assumption).
	RefusalTotalQueryCost RefusalShape = "total-query-cost-per-user"
	// RefusalUserRateRetry: 403 rateLimitExceeded in usageLimits,
	// "User-rate limit exceeded.  Retry after <time>"
	// (taers232c/GAMADV-XTD3 issues 337 and 375).
	RefusalUserRateRetry RefusalShape = "user-rate-retry-after"
	// RefusalResourceExhausted: 429 RESOURCE_EXHAUSTED, rateLimitExceeded
	// in global, "Resource has been exhausted (e.g. check quota)." (the
	// first answer in mxngls/gmail-cleaner issue 5; elie222/inbox-zero
	// issue 379). It names no scope.
	RefusalResourceExhausted RefusalShape = "resource-exhausted"
	// RefusalProject: 403 rateLimitExceeded in usageLimits, "Rate Limit
	// Exceeded": the project's limit as the quota reference names it. The
	// shape of the project refusal; it names no scope in its words.
	RefusalProject RefusalShape = "project-documented"
	// RefusalConcurrent: 429 RESOURCE_EXHAUSTED, rateLimitExceeded in
	// usageLimits, "Too many concurrent requests for user"
	// (handle-errors; elie222/inbox-zero issue 1880,
	// taers232c/GAMADV-XTD3 issue 149).
	RefusalConcurrent RefusalShape = "concurrent"
)

// RefusalShapes lists every shape, for tests that run against each.
func RefusalShapes() []RefusalShape {
	return []RefusalShape{RefusalUserDocumented, RefusalQueriesPerUser, RefusalTotalQueryCost, RefusalUserRateRetry,
		RefusalResourceExhausted, RefusalProject, RefusalConcurrent}
}

// UserRefusalShapes lists the shapes Google has been seen to give a user
// over its per-minute quota (SetUserRefusal takes one).
func UserRefusalShapes() []RefusalShape {
	return []RefusalShape{RefusalUserDocumented, RefusalQueriesPerUser, RefusalTotalQueryCost, RefusalUserRateRetry,
		RefusalResourceExhausted}
}

// gmailProjectNumber is the project number the emulator's refusals name
// (Google names the calling project's).
const gmailProjectNumber = "123456789012"

// refusal returns the answer of the shape; retry is when the caller may
// try again, named in the message where the shape names it.
func (sh RefusalShape) refusal(retry time.Time) (*apiError, bool) {
	at := retry.UTC().Format("2006-01-02T15:04:05.000Z")
	switch sh {
	case RefusalUserDocumented:
		return &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason: ReasonUserRateLimit, Message: "User-rate limit exceeded.  Retry after " + at}, true
	case RefusalQueriesPerUser:
		return &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' " +
				"of service 'gmail.googleapis.com' for consumer 'project_number:" + gmailProjectNumber + "'."}, true
	case RefusalTotalQueryCost:
		return &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "Quota exceeded for quota metric 'Total Query Cost' and limit 'Units per minute per user' " +
				"of service 'gmail.googleapis.com' for consumer 'project_number:" + gmailProjectNumber + "'."}, true
	case RefusalUserRateRetry:
		return &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "User-rate limit exceeded.  Retry after " + at}, true
	case RefusalResourceExhausted:
		return &apiError{Code: http.StatusTooManyRequests, Status: "RESOURCE_EXHAUSTED", Domain: "global",
			Reason: ReasonRateLimit, Message: "Resource has been exhausted (e.g. check quota)."}, true
	case RefusalProject:
		return &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "Rate Limit Exceeded"}, true
	case RefusalConcurrent:
		return &apiError{Code: http.StatusTooManyRequests, Status: "RESOURCE_EXHAUSTED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "Too many concurrent requests for user"}, true
	}
	return nil, false
}

// gmailQuota counts Gmail quota units: the lifetime counters tests read and
// the sliding windows that refuse calls.
type gmailQuota struct {
	now func() time.Time

	mu          sync.Mutex
	prices      gmailPriceList
	userSet     int // the user limit as set (0: the price list's)
	userLimit   int // <= 0: unlimited
	projLimit   int // <= 0: unlimited
	window      time.Duration
	maxInFlight int // <= 0: unlimited
	userShape   RefusalShape

	users    map[string]*userQuota
	projLog  []spent
	projUsed int
	projPeak int // the most units in any window since the counters were reset
	all      int // lifetime units, all users
}

type userQuota struct {
	log      []spent
	used     int            // units in log
	total    int            // lifetime units
	byMethod map[string]int // lifetime units by method
	refused  map[string]int // refusals by reason
	inFlight int
}

// spent is one counted call in a sliding log.
type spent struct {
	at    time.Time
	units int
}

func newGmailQuota(o Options) *gmailQuota {
	prices, err := gmailPrices(o.GmailQuotaPrices)
	if err != nil {
		panic(err) // a test's Options
	}
	q := &gmailQuota{now: o.Now, users: map[string]*userQuota{}, userShape: RefusalUserDocumented, prices: prices}
	q.set(o.GmailUserUnitsPerMinute, o.GmailProjectUnitsPerMinute, o.GmailQuotaWindow, o.GmailMaxConcurrent)
	return q
}

// set applies limits with the Options' zero-value rules.
func (q *gmailQuota) set(user, project int, window time.Duration, inFlight int) {
	set := user
	if user == 0 {
		user = q.prices.userUnits
	}
	if project == 0 {
		project = DefaultGmailProjectUnitsPerMinute
	}
	if window <= 0 {
		window = time.Minute
	}
	if inFlight == 0 {
		inFlight = DefaultGmailMaxConcurrent
	}
	q.mu.Lock()
	q.userSet, q.userLimit, q.projLimit, q.window, q.maxInFlight = set, user, project, window, inFlight
	q.mu.Unlock()
}

func (q *gmailQuota) user(email string) *userQuota {
	u := q.users[email]
	if u == nil {
		u = &userQuota{byMethod: map[string]int{}, refused: map[string]int{}}
		q.users[email] = u
	}
	return u
}

// prune drops the entries of log at or before cut and returns the rest and
// the units dropped.
func prune(log []spent, cut time.Time) ([]spent, int) {
	i, gone := 0, 0
	for i < len(log) && !log[i].at.After(cut) {
		gone += log[i].units
		i++
	}
	if i == 0 {
		return log, 0
	}
	return append(log[:0:0], log[i:]...), gone
}

// retryAt is when enough of log has left the window for need more units
// to fit under limit.
func retryAt(log []spent, used, need, limit int, window time.Duration) time.Time {
	for _, e := range log {
		used -= e.units
		if used+need <= limit {
			return e.at.Add(window)
		}
	}
	if len(log) > 0 {
		return log[len(log)-1].at.Add(window)
	}
	return time.Time{}
}

// admit counts a call of method (messages.get's format given) for email at
// the price list's cost, or refuses it. A call admitted holds an in-flight
// slot until done is called.
func (q *gmailQuota) admit(email, method, format string) (done func(), err *apiError) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	units := q.prices.price(method, format)
	u := q.user(email)
	if q.maxInFlight > 0 && u.inFlight >= q.maxInFlight {
		u.refused["concurrent"]++
		e, _ := RefusalConcurrent.refusal(now)
		return nil, e
	}
	cut := now.Add(-q.window)
	var gone int
	u.log, gone = prune(u.log, cut)
	u.used -= gone
	q.projLog, gone = prune(q.projLog, cut)
	q.projUsed -= gone
	if units > 0 && q.userLimit > 0 && u.used+units > q.userLimit {
		u.refused[ReasonUserRateLimit]++
		at := retryAt(u.log, u.used, units, q.userLimit, q.window)
		if units > q.userLimit {
			at = now.Add(q.window)
		}
		e, _ := q.userShape.refusal(at)
		return nil, e
	}
	if units > 0 && q.projLimit > 0 && q.projUsed+units > q.projLimit {
		u.refused[ReasonRateLimit]++
		e, _ := RefusalProject.refusal(now)
		return nil, e
	}
	if units > 0 {
		e := spent{at: now, units: units}
		u.log = append(u.log, e)
		u.used += units
		q.projLog = append(q.projLog, e)
		q.projUsed += units
		q.projPeak = max(q.projPeak, q.projUsed)
		u.total += units
		u.byMethod[method] += units
		q.all += units
	}
	u.inFlight++
	return func() {
		q.mu.Lock()
		u.inFlight--
		q.mu.Unlock()
	}, nil
}

// SetQuota changes the Gmail limits at once: units per user and per project
// per window, the window, and the most requests of one user in flight.
// Zero takes the default (the price list's 6,000 or 15,000, 1,200,000, one
// minute, 20); a negative limit is unlimited. Units already in the windows
// stay there.
func (g *Gmail) SetQuota(userUnits, projectUnits int, window time.Duration, maxConcurrent int) {
	g.quota.set(userUnits, projectUnits, window, maxConcurrent)
}

// SetQuotaPrices changes the price list the emulator charges
// (GmailPrices2026 or GmailPrices2025); a per-user limit left at its
// default follows the list's. Units already in the windows stay there.
func (g *Gmail) SetQuotaPrices(name string) error {
	prices, err := gmailPrices(name)
	if err != nil {
		return err
	}
	q := g.quota
	q.mu.Lock()
	q.prices = prices
	if q.userSet == 0 {
		q.userLimit = prices.userUnits
	}
	q.mu.Unlock()
	return nil
}

// QuotaPrices returns the name of the price list the emulator charges.
func (g *Gmail) QuotaPrices() string {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	return g.quota.prices.name
}

// Price returns what the emulator charges now for a call of method
// (messages.get's format given: "metadata", "full", ...).
func (g *Gmail) Price(method, format string) int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	return g.quota.prices.price(method, format)
}

// SetUserRefusal chooses the shape of the per-user refusal (one of
// UserRefusalShapes; the default is RefusalUserDocumented). The count in
// QuotaRefusals stays under userRateLimitExceeded whatever the shape.
func (g *Gmail) SetUserRefusal(shape RefusalShape) error {
	if !slices.Contains(UserRefusalShapes(), shape) {
		return fmt.Errorf("googlefake: %q is not a shape of the per-user refusal", shape)
	}
	g.quota.mu.Lock()
	g.quota.userShape = shape
	g.quota.mu.Unlock()
	return nil
}

// QuotaUnits returns the Gmail quota units the account spent, by Google's
// per-method table (refused calls cost nothing).
func (g *Gmail) QuotaUnits(email string) int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	if u := g.quota.users[normEmail(email)]; u != nil {
		return u.total
	}
	return 0
}

// QuotaUnitsByMethod returns the units the account spent by method (a
// Method constant).
func (g *Gmail) QuotaUnitsByMethod(email string) map[string]int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	if u := g.quota.users[normEmail(email)]; u != nil {
		return maps.Clone(u.byMethod)
	}
	return map[string]int{}
}

// QuotaRefusals returns how many of the account's calls the quota refused,
// by reason: userRateLimitExceeded, rateLimitExceeded (the project's), and
// "concurrent" (429, too many in flight).
func (g *Gmail) QuotaRefusals(email string) map[string]int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	if u := g.quota.users[normEmail(email)]; u != nil {
		return maps.Clone(u.refused)
	}
	return map[string]int{}
}

// TotalQuotaRefusals returns how many calls the quota refused, all
// accounts and reasons together.
func (g *Gmail) TotalQuotaRefusals() int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	n := 0
	for _, u := range g.quota.users {
		for _, c := range u.refused {
			n += c
		}
	}
	return n
}

// TotalQuotaUnits returns the quota units spent by all accounts.
func (g *Gmail) TotalQuotaUnits() int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	return g.quota.all
}

// PeakProjectUnits returns the most units the project spent in any one
// window (sliding, as counted for refusals) since the counters were last
// reset: exact, since a window's sum can only peak at a counted call.
func (g *Gmail) PeakProjectUnits() int {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	return g.quota.projPeak
}

// QuotaWindow returns the units in the current window: the account's and
// the project's, with the limits (<= 0: unlimited).
func (g *Gmail) QuotaWindow(email string) (user, userLimit, project, projectLimit int) {
	q := g.quota
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	cut := now.Add(-q.window)
	var gone int
	q.projLog, gone = prune(q.projLog, cut)
	q.projUsed -= gone
	if u := q.users[normEmail(email)]; u != nil {
		u.log, gone = prune(u.log, cut)
		u.used -= gone
		user = u.used
	}
	return user, q.userLimit, q.projUsed, q.projLimit
}

func (g *Gmail) resetUnits() {
	g.quota.mu.Lock()
	defer g.quota.mu.Unlock()
	for _, u := range g.quota.users {
		u.total = 0
		clear(u.byMethod)
		clear(u.refused)
	}
	g.quota.all = 0
	g.quota.projPeak = 0
}
