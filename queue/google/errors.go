package google

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
)

// Sentinel errors. Classified errors wrap them, so errors.Is finds them
// through the error classes below.
var (
	// ErrRevoked: the account's grant is gone (invalid_grant, or 401 even
	// after a refresh). Retrying cannot fix it; the user must reconnect.
	ErrRevoked = errors.New("access to the Google account was revoked or expired")
	// ErrNotFound: the item (message, label, spreadsheet) does not exist.
	ErrNotFound = errors.New("not found at Google")
	// ErrHistoryTooOld: history.list refused the start id (404); a full
	// sync is needed.
	ErrHistoryTooOld = errors.New("history start id too old")
	// ErrInvalidLabel: a call named a label id the mailbox does not have
	// (400 "Invalid label"), such as one deleted in Gmail since its id was
	// cached. Look the label up again.
	ErrInvalidLabel = errors.New("label id unknown to Gmail")
	// ErrNoOAuthClient: no OAuth client is configured, and Google's token
	// endpoint refreshes no token without one. Permanent until configured.
	ErrNoOAuthClient = errors.New("no Google OAuth client is configured (set MAILROOM_GOOGLE_CLIENT_ID and MAILROOM_GOOGLE_CLIENT_SECRET): Google refreshes no token without one")
)

// Error classes. Every error of a Google call is classified (Classify) as
// one of these, or returned as it is (context cancellation, the budget's
// store): the adapter speaks no task engine's language. A pipeline maps
// them to its engine's classes where its tasks take them. Each class's
// Error is its cause's, and Unwrap gives the cause, so errors.Is and
// errors.As see through it.

// Refused is a call refused for quota, by Google or by the budget before
// it was sent: it did nothing, and may be made again after RetryAfter.
type Refused struct {
	Err error
	// RetryAfter is how long until the call may be made again: Google's
	// retry time when it named one.
	RetryAfter time.Duration
	// Scope is whose quota refused it; ScopeUnscoped when the answer does
	// not say (and for the token endpoint's refusals).
	Scope Scope
}

func (e *Refused) Error() string { return e.Err.Error() }
func (e *Refused) Unwrap() error { return e.Err }

// Permanent is an error that making the call again cannot fix: a revoked
// grant, a 404, another 4xx.
type Permanent struct{ Err error }

func (e *Permanent) Error() string { return e.Err.Error() }
func (e *Permanent) Unwrap() error { return e.Err }

// Transient is an error that may pass: a 5xx, a timeout or a network
// error. The call may be made again later.
type Transient struct{ Err error }

func (e *Transient) Error() string { return e.Err.Error() }
func (e *Transient) Unwrap() error { return e.Err }

// RetryAfter returns the wait of a refusal (Refused) in err's chain.
func RetryAfter(err error) (time.Duration, bool) {
	var r *Refused
	if errors.As(err, &r) {
		return r.RetryAfter, true
	}
	return 0, false
}

// IsPermanent reports whether err's chain holds a Permanent.
func IsPermanent(err error) bool {
	var p *Permanent
	return errors.As(err, &p)
}

// IsTransient reports whether err's chain holds a Transient.
func IsTransient(err error) bool {
	var t *Transient
	return errors.As(err, &t)
}

// Scope is whose quota a refusal was for, as the answer says (see
// refusalScope). Its values are the budget script's refusal kinds.
type Scope int

// Scopes.
const (
	// ScopeAccount: the account's per-user limit (userRateLimitExceeded,
	// or a rateLimitExceeded whose text names the user); for the budget's
	// own refusals, the account's window.
	ScopeAccount Scope = 1
	// ScopeProject: the project's limit (text naming the project's
	// per-minute quota, not a user's); for the budget, the project's
	// window.
	ScopeProject Scope = 2
	// ScopeConcurrent: 429 too many concurrent requests for the user.
	ScopeConcurrent Scope = 3
	// ScopeUnscoped: a refusal that names no scope ("Rate Limit
	// Exceeded", "Resource has been exhausted (e.g. check quota).").
	ScopeUnscoped Scope = 4
)

// String names the scope in logs.
func (s Scope) String() string {
	switch s {
	case ScopeAccount:
		return "the account's"
	case ScopeProject:
		return "the project's"
	case ScopeConcurrent:
		return "concurrent requests"
	case ScopeUnscoped:
		return "no scope named"
	}
	return strconv.Itoa(int(s))
}

// defaultRateWait is the wait of a rate limit without Retry-After.
const defaultRateWait = 5 * time.Second

// Classify puts an error of a Google call in its class:
//
//   - 429, and 403 with a rate-limit reason: Refused, with the server's
//     retry time (5 s without one) and the scope its text names;
//   - 5xx, and network errors: Transient;
//   - invalid_grant from the token endpoint and 401: Permanent, wrapping
//     ErrRevoked;
//   - 404: Permanent, wrapping ErrNotFound;
//   - 400 "Invalid label": Permanent, wrapping ErrInvalidLabel;
//   - other 4xx: Permanent.
//
// Context cancellation, an error already classified and any other error
// are returned as they are.
func Classify(err error) error {
	if err == nil || IsPermanent(err) || IsTransient(err) {
		return err
	}
	if _, refused := RetryAfter(err); refused {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, ErrRevoked) || errors.Is(err, ErrNoOAuthClient) {
		return &Permanent{Err: err}
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		switch {
		case re.ErrorCode == "invalid_grant" || re.ErrorCode == "unauthorized_client":
			return &Permanent{Err: fmt.Errorf("%w: %w", ErrRevoked, err)}
		case status == http.StatusTooManyRequests:
			return &Refused{Err: err, RetryAfter: retryAfter(re.Response.Header), Scope: ScopeUnscoped}
		case status >= 500 || status == 0:
			return &Transient{Err: err}
		default:
			return &Permanent{Err: err}
		}
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch {
		case ge.Code == http.StatusTooManyRequests || (ge.Code == http.StatusForbidden && rateLimitReason(ge)):
			return &Refused{Err: err, RetryAfter: retryHint(ge), Scope: refusalScope(ge)}
		case ge.Code >= 500:
			return &Transient{Err: err}
		case ge.Code == http.StatusUnauthorized:
			return &Permanent{Err: fmt.Errorf("%w: %w", ErrRevoked, err)}
		case ge.Code == http.StatusNotFound:
			return &Permanent{Err: fmt.Errorf("%w: %w", ErrNotFound, err)}
		case ge.Code == http.StatusBadRequest && invalidLabel(ge.Message):
			return &Permanent{Err: fmt.Errorf("%w: %w", ErrInvalidLabel, err)}
		default:
			return &Permanent{Err: err}
		}
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return &Transient{Err: err}
	}
	return err // the rest: unclassified (a retry may help)
}

// invalidLabel reports whether a 400's message is Gmail's answer to an
// unknown label id ("Invalid label: Label_7"); "Invalid label name" is not.
func invalidLabel(msg string) bool {
	return msg == "Invalid label" || strings.HasPrefix(msg, "Invalid label:")
}

// rateLimitReason reports whether a 403 is a quota refusal: a rate-limit
// reason, RESOURCE_EXHAUSTED, or a message that says so (Google's per-user
// refusal in the field, "Quota exceeded for quota metric 'Queries' and
// limit 'Queries per minute per user' ...", GAM-team/got-your-back issue
// 309, comes under reasons a client may not expect).
func rateLimitReason(ge *googleapi.Error) bool {
	for _, e := range ge.Errors {
		switch e.Reason {
		case "rateLimitExceeded", "userRateLimitExceeded", "quotaExceeded", "dailyLimitExceeded":
			return true
		}
	}
	text := refusalText(ge)
	return strings.Contains(ge.Body, "RESOURCE_EXHAUSTED") || strings.Contains(text, "quota exceeded for quota metric") ||
		strings.Contains(text, "rate limit exceeded")
}

// retryAfterMessage reads the time in Gmail's "User-rate limit exceeded.
// Retry after 2026-06-01T12:01:00.000Z" (developers.google.com/workspace/
// gmail/api/guides/handle-errors).
func retryAfterMessage(msg string) (time.Time, bool) {
	_, rest, ok := strings.Cut(msg, "Retry after ")
	if !ok {
		return time.Time{}, false
	}
	if i := strings.IndexAny(rest, " \t\n"); i >= 0 {
		rest = rest[:i]
	}
	t, err := time.Parse(time.RFC3339Nano, rest)
	return t, err == nil
}

// quotaRefusal tells whose quota Google refused a classified error of a
// Gmail call for (0: it is no refusal of Google's) and its wait (Google's
// retry time when it named one: see retryHint). A wait for our own
// budget is none.
func quotaRefusal(err error) (Scope, time.Duration) {
	var r *Refused
	var ge *googleapi.Error
	if !errors.As(err, &r) || !errors.As(err, &ge) {
		return 0, 0
	}
	if ge.Code != http.StatusTooManyRequests && ge.Code != http.StatusForbidden {
		return 0, 0
	}
	return r.Scope, r.RetryAfter
}

// refusalScope reads whose quota Google refused a call for from what the
// refusal says, not from its reason alone. Google's documents give the
// reason userRateLimitExceeded to the per-user limit and rateLimitExceeded
// to the project's (developers.google.com/workspace/gmail/api/reference/
// quota), but in the field Gmail refuses one user over its minute with
// rateLimitExceeded too, saying so only in its text: 403 rateLimitExceeded
// in usageLimits, "Quota exceeded for quota metric 'Queries' and limit
// 'Queries per minute per user' of service 'gmail.googleapis.com' for
// consumer 'project_number:…'" (elie222/inbox-zero issue 480,
// mxngls/gmail-cleaner issue 5, GAM-team/got-your-back issue 309), and 403
// rateLimitExceeded "User-rate limit exceeded.  Retry after <time>"
// (taers232c/GAMADV-XTD3 issue 337). Under the May 2026 quotas, which
// count units, the same answer reads "Quota exceeded for quota metric
// 'Total Query Cost' and limit 'Units per minute per user'" (one public
// report): a user's limit by its words, like the 'Queries' one. So, in
// this order:
//
//   - text naming concurrent requests ("Too many concurrent requests for
//     user", a 429): ScopeConcurrent, the account's calls in flight;
//   - text naming a user ("per user", "User-rate", "User Rate", "for
//     user", or a quota limit "…PerUser" in the details), or the reason
//     userRateLimitExceeded: ScopeAccount;
//   - text naming the project's quota without a user (a per-minute or
//     per-project limit, or the consumer whose quota it is): ScopeProject;
//   - anything else names no scope (403 or 429 rateLimitExceeded "Rate
//     Limit Exceeded", 429 RESOURCE_EXHAUSTED "Resource has been exhausted
//     (e.g. check quota).", mxngls/gmail-cleaner issue 5 and
//     elie222/inbox-zero issue 379, seen on one busy mailbox):
//     ScopeUnscoped, which the budget charges to the account unless
//     other accounts are refused the same way (see Budget.Refused).
func refusalScope(ge *googleapi.Error) Scope {
	text := refusalText(ge)
	has := func(subs ...string) bool {
		for _, s := range subs {
			if strings.Contains(text, s) {
				return true
			}
		}
		return false
	}
	userReason := false
	for _, e := range ge.Errors {
		userReason = userReason || e.Reason == "userRateLimitExceeded"
	}
	switch {
	case has("concurrent"):
		return ScopeConcurrent
	case has("per user", "user-rate", "user rate", "for user", "peruser") || userReason:
		return ScopeAccount
	case has("per minute", "perminute", "per project", "perproject", "for consumer"):
		return ScopeProject
	}
	return ScopeUnscoped
}

// refusalText is everything a refusal says about itself, lower-cased: its
// message, its items' messages, and the quota limit and metric of a
// google.rpc.ErrorInfo in its details (newer Google APIs name the limit
// there, "QueriesPerMinutePerUser").
func refusalText(ge *googleapi.Error) string {
	parts := []string{ge.Message}
	for _, e := range ge.Errors {
		parts = append(parts, e.Message)
	}
	for _, d := range ge.Details {
		m, ok := d.(map[string]any)
		if !ok {
			continue
		}
		if md, ok := m["metadata"].(map[string]any); ok {
			for _, k := range []string{"quota_limit", "quota_metric", "quota_limit_value"} {
				if v, ok := md[k].(string); ok {
					parts = append(parts, v)
				}
			}
		}
	}
	return strings.ToLower(strings.Join(parts, " | "))
}

// quotaRefused reports whether err (unclassified) is Google refusing a call
// for quota: 429, or 403 with a rate-limit reason.
func quotaRefused(err error) bool {
	var ge *googleapi.Error
	if !errors.As(err, &ge) {
		return false
	}
	return ge.Code == http.StatusTooManyRequests || ge.Code == http.StatusForbidden && rateLimitReason(ge)
}

// retryAfter reads Retry-After in seconds or as an HTTP date.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return defaultRateWait
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return max(time.Duration(secs)*time.Second, time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), time.Second)
	}
	return defaultRateWait
}

// unauthorized reports whether err is a 401 from an API (the access token
// was refused before its expiry).
func unauthorized(err error) bool {
	var ge *googleapi.Error
	return errors.As(err, &ge) && ge.Code == http.StatusUnauthorized
}

// transient reports whether err is worth an immediate retry of a read: a
// 5xx or a network error, not a rate limit or the caller's cancellation.
func transient(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		return ge.Code >= 500
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne)
}
