package googlefake

import (
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"
)

// Gmail's usage limits, as Google documents them
// (developers.google.com/workspace/gmail/api/reference/quota): every method
// costs quota units (the per-method table in newEndpoint), and two limits
// apply at once, per user and per project. Since May 1, 2026 a project
// created after that date gets 6,000 units per user per minute (older
// projects keep 15,000) and 1,200,000 per project per minute.
//
// Over a limit Google refuses the call (developers.google.com/workspace/
// gmail/api/guides/handle-errors): 403 with reason userRateLimitExceeded
// (per user) or rateLimitExceeded (per project), both in the usageLimits
// domain, the user's message naming when to retry ("Retry after <RFC 3339
// time>"); and 429 rateLimitExceeded "Too many concurrent requests for
// user" when one user has too many requests in flight. A refused call costs
// nothing.
//
// The emulator keeps an exact sliding log of every counted call (Google
// does not say how it measures its minute; a sliding window is at least as
// strict as any fixed one).
const (
	DefaultGmailUserUnitsPerMinute    = 6000
	DefaultGmailProjectUnitsPerMinute = 1_200_000
	// DefaultGmailMaxConcurrent is the most requests of one user in flight.
	// Google documents the 429 but not its number; 20 is well below what
	// Gmail is reported to allow, so the emulator errs on the strict side.
	DefaultGmailMaxConcurrent = 20
)

// Error reasons of Gmail's quota refusals.
const (
	ReasonUserRateLimit = "userRateLimitExceeded"
	ReasonRateLimit     = "rateLimitExceeded"
)

// gmailQuota counts Gmail quota units: the lifetime counters tests read and
// the sliding windows that refuse calls.
type gmailQuota struct {
	now func() time.Time

	mu          sync.Mutex
	userLimit   int // <= 0: unlimited
	projLimit   int // <= 0: unlimited
	window      time.Duration
	maxInFlight int // <= 0: unlimited

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
	q := &gmailQuota{now: o.Now, users: map[string]*userQuota{}}
	q.set(o.GmailUserUnitsPerMinute, o.GmailProjectUnitsPerMinute, o.GmailQuotaWindow, o.GmailMaxConcurrent)
	return q
}

// set applies limits with the Options' zero-value rules.
func (q *gmailQuota) set(user, project int, window time.Duration, inFlight int) {
	if user == 0 {
		user = DefaultGmailUserUnitsPerMinute
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
	q.userLimit, q.projLimit, q.window, q.maxInFlight = user, project, window, inFlight
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

// admit counts a call of method costing units for email, or refuses it.
// A call admitted holds an in-flight slot until done is called.
func (q *gmailQuota) admit(email, method string, units int) (done func(), err *apiError) {
	now := q.now()
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.user(email)
	if q.maxInFlight > 0 && u.inFlight >= q.maxInFlight {
		u.refused["concurrent"]++
		return nil, &apiError{Code: http.StatusTooManyRequests, Status: "RESOURCE_EXHAUSTED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "Too many concurrent requests for user"}
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
		return nil, &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason:  ReasonUserRateLimit,
			Message: fmt.Sprintf("User-rate limit exceeded.  Retry after %s", at.UTC().Format("2006-01-02T15:04:05.000Z"))}
	}
	if units > 0 && q.projLimit > 0 && q.projUsed+units > q.projLimit {
		u.refused[ReasonRateLimit]++
		return nil, &apiError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED", Domain: "usageLimits",
			Reason: ReasonRateLimit, Message: "Rate Limit Exceeded"}
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
// Zero takes the default (6,000, 1,200,000, one minute, 20); a negative
// limit is unlimited. Units already in the windows stay there.
func (g *Gmail) SetQuota(userUnits, projectUnits int, window time.Duration, maxConcurrent int) {
	g.quota.set(userUnits, projectUnits, window, maxConcurrent)
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
