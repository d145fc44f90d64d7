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

	"mailroom/queue"
)

// Sentinel errors. Classified errors wrap them, so errors.Is finds them
// through the queue's error classes.
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

// defaultRateWait is the wait of a rate limit without Retry-After.
const defaultRateWait = 5 * time.Second

// Classify maps an error of a Google call to the queue's error classes:
//
//   - 429, and 403 with a rate-limit reason: queue.RateLimited with the
//     server's Retry-After (5 s without one);
//   - 5xx, timeouts and network errors: retryable (returned as they are);
//   - invalid_grant from the token endpoint and 401: permanent, wrapping
//     ErrRevoked;
//   - 404: permanent, wrapping ErrNotFound;
//   - 400 "Invalid label": permanent, wrapping ErrInvalidLabel;
//   - other 4xx: permanent.
//
// Context cancellation is returned as it is.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	if queue.IsPermanent(err) {
		return err
	}
	if _, limited := queue.RetryAfter(err); limited {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if errors.Is(err, ErrRevoked) || errors.Is(err, ErrNoOAuthClient) {
		return queue.Permanent(err)
	}
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		status := 0
		if re.Response != nil {
			status = re.Response.StatusCode
		}
		switch {
		case re.ErrorCode == "invalid_grant" || re.ErrorCode == "unauthorized_client":
			return queue.Permanent(fmt.Errorf("%w: %w", ErrRevoked, err))
		case status == http.StatusTooManyRequests:
			return queue.RateLimited(err, retryAfter(re.Response.Header))
		case status >= 500 || status == 0:
			return err
		default:
			return queue.Permanent(err)
		}
	}
	var ge *googleapi.Error
	if errors.As(err, &ge) {
		switch {
		case ge.Code == http.StatusTooManyRequests || (ge.Code == http.StatusForbidden && rateLimitReason(ge)):
			return queue.RateLimited(err, retryHint(ge))
		case ge.Code >= 500:
			return err
		case ge.Code == http.StatusUnauthorized:
			return queue.Permanent(fmt.Errorf("%w: %w", ErrRevoked, err))
		case ge.Code == http.StatusNotFound:
			return queue.Permanent(fmt.Errorf("%w: %w", ErrNotFound, err))
		case ge.Code == http.StatusBadRequest && invalidLabel(ge.Message):
			return queue.Permanent(fmt.Errorf("%w: %w", ErrInvalidLabel, err))
		default:
			return queue.Permanent(err)
		}
	}
	return err // network errors and the rest: retryable
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

// quotaRefusal tells what kind of quota refusal a classified error of a
// Gmail call is (RefusedUser, RefusedProject, RefusedConcurrent,
// RefusedUnscoped; 0: none) and its wait (Google's retry time when it
// named one: see retryHint). A wait for our own budget is none.
func quotaRefusal(err error) (kind int, wait time.Duration) {
	wait, limited := queue.RetryAfter(err)
	var ge *googleapi.Error
	if !limited || !errors.As(err, &ge) {
		return 0, 0
	}
	if ge.Code != http.StatusTooManyRequests && ge.Code != http.StatusForbidden {
		return 0, 0
	}
	return refusalScope(ge), wait
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
//     user", a 429): RefusedConcurrent, the account's calls in flight;
//   - text naming a user ("per user", "User-rate", "User Rate", "for
//     user", or a quota limit "…PerUser" in the details), or the reason
//     userRateLimitExceeded: RefusedUser;
//   - text naming the project's quota without a user (a per-minute or
//     per-project limit, or the consumer whose quota it is): RefusedProject;
//   - anything else names no scope (403 or 429 rateLimitExceeded "Rate
//     Limit Exceeded", 429 RESOURCE_EXHAUSTED "Resource has been exhausted
//     (e.g. check quota).", mxngls/gmail-cleaner issue 5 and
//     elie222/inbox-zero issue 379, seen on one busy mailbox):
//     RefusedUnscoped, which the budget charges to the account unless
//     other accounts are refused the same way (see Budget.Refused).
func refusalScope(ge *googleapi.Error) int {
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
		return RefusedConcurrent
	case has("per user", "user-rate", "user rate", "for user", "peruser") || userReason:
		return RefusedUser
	case has("per minute", "perminute", "per project", "perproject", "for consumer"):
		return RefusedProject
	}
	return RefusedUnscoped
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
