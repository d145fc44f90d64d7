package google

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/oauth2"
	"google.golang.org/api/googleapi"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	gerr := func(code int, reason string, h http.Header) error {
		return fmt.Errorf("call: %w", &googleapi.Error{Code: code, Errors: []googleapi.ErrorItem{{Reason: reason}}, Header: h})
	}
	oerr := func(status int, code string) error {
		return fmt.Errorf("refresh: %w", &oauth2.RetrieveError{Response: &http.Response{StatusCode: status, Header: http.Header{}}, ErrorCode: code})
	}
	type class int
	const (
		retryable class = iota // unclassified
		transient
		permanent
		limited
	)
	cases := []struct {
		name  string
		err   error
		class class
		is    error
		wait  time.Duration
	}{
		{"429 with Retry-After", gerr(429, "rateLimitExceeded", http.Header{"Retry-After": {"7"}}), limited, nil, 7 * time.Second},
		{"429 without", gerr(429, "", nil), limited, nil, defaultRateWait},
		{"429 with RetryInfo", fmt.Errorf("call: %w", &googleapi.Error{Code: 429, Header: http.Header{"Retry-After": {"7"}}, Details: []any{
			map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED"},
			map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "42s"},
		}}), limited, nil, 42 * time.Second},
		{"403 user rate", gerr(403, "userRateLimitExceeded", nil), limited, nil, defaultRateWait},
		{"403 quota", gerr(403, "quotaExceeded", nil), limited, nil, defaultRateWait},
		{"403 forbidden", gerr(403, "forbidden", nil), permanent, nil, 0},
		{"500", gerr(500, "backendError", nil), transient, nil, 0},
		{"503", gerr(503, "", nil), transient, nil, 0},
		{"401", gerr(401, "authError", nil), permanent, ErrRevoked, 0},
		{"404", gerr(404, "notFound", nil), permanent, ErrNotFound, 0},
		{"400", gerr(400, "invalidArgument", nil), permanent, nil, 0},
		{"400 invalid label", fmt.Errorf("call: %w", &googleapi.Error{Code: 400, Message: "Invalid label: Label_7"}), permanent, ErrInvalidLabel, 0},
		{"invalid_grant", oerr(400, "invalid_grant"), permanent, ErrRevoked, 0},
		{"token endpoint 503", oerr(503, ""), transient, nil, 0},
		{"token endpoint 429", oerr(429, ""), limited, nil, defaultRateWait},
		{"network", &net.OpError{Op: "dial", Err: errors.New("refused")}, transient, nil, 0},
		{"deadline", context.DeadlineExceeded, retryable, nil, 0},
	}
	for _, tc := range cases {
		got := Classify(tc.err)
		wait, isLimited := RetryAfter(got)
		switch {
		case tc.class == limited && (!isLimited || wait != tc.wait):
			t.Errorf("%s: %v, want rate limited %s", tc.name, got, tc.wait)
		case tc.class == permanent && !IsPermanent(got):
			t.Errorf("%s: %v, want permanent", tc.name, got)
		case tc.class == transient && (!IsTransient(got) || IsPermanent(got) || isLimited):
			t.Errorf("%s: %v, want transient", tc.name, got)
		case tc.class == retryable && (IsTransient(got) || IsPermanent(got) || isLimited):
			t.Errorf("%s: %v, want unclassified", tc.name, got)
		case tc.is != nil && !errors.Is(got, tc.is):
			t.Errorf("%s: %v does not wrap %v", tc.name, got, tc.is)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: the cause is lost: %v", tc.name, got)
		}
	}
	if name := Classify(&googleapi.Error{Code: 400, Message: "Invalid label name"}); errors.Is(name, ErrInvalidLabel) {
		t.Errorf("a bad label name is not an unknown label id: %v", name)
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
}

// Without an OAuth client, a refresh at Google's own token endpoint is
// refused before any call, permanently, naming the settings to set (Google
// refreshes no token without a client). An emulator's endpoint is still
// asked.
func TestRefreshWithoutOAuthClient(t *testing.T) {
	t.Parallel()
	_, err := New(Config{}).TokenSource(Token{RefreshToken: "1//r"}, nil).Token()
	if !errors.Is(err, ErrNoOAuthClient) || !IsPermanent(Classify(err)) || errors.Is(err, ErrRevoked) {
		t.Fatalf("refresh without a client: %v; want a permanent ErrNoOAuthClient, not a revoked grant", err)
	}
	_, err = New(Config{TokenURL: "http://127.0.0.1:1/token"}).TokenSource(Token{RefreshToken: "1//r"}, nil).Token()
	if err == nil || errors.Is(err, ErrNoOAuthClient) {
		t.Fatalf("refresh at another token endpoint: %v; want it asked (and unreachable)", err)
	}
}

// A quota refusal is read by what it says: each shape Google answers in
// (doc_gmail.go in the emulator names their reports) goes to the account,
// the project, the account's calls in flight, or names no scope; the
// retry time it names is the wait.
func TestQuotaRefusalScope(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(30 * time.Second).UTC().Format("2006-01-02T15:04:05.000Z")
	refusal := func(code int, reason, domain, msg string, h http.Header) error {
		ge := &googleapi.Error{Code: code, Message: msg, Header: h,
			Errors: []googleapi.ErrorItem{{Reason: reason, Message: msg}},
			Body:   fmt.Sprintf(`{"error":{"code":%d,"message":%q,"errors":[{"domain":%q,"reason":%q}]}}`, code, msg, domain, reason)}
		return Classify(fmt.Errorf("call: %w", ge))
	}
	cases := []struct {
		name string
		err  error
		kind Scope
		wait time.Duration // 0: about 30 s (the message's time)
	}{
		{"403 userRateLimitExceeded (documented)", refusal(403, "userRateLimitExceeded", "usageLimits", "User-rate limit exceeded.  Retry after "+at, nil), ScopeAccount, 0},
		{"403 rateLimitExceeded, Queries per minute per user", refusal(403, "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' of service 'gmail.googleapis.com' for consumer 'project_number:1'.", nil), ScopeAccount, defaultRateWait},
		{"429 Queries per minute per user", refusal(429, "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user' of service 'gmail.googleapis.com' for consumer 'project_number:1'.", nil), ScopeAccount, defaultRateWait},
		// Under the May 2026 quotas, which count units.
		{"403 rateLimitExceeded, Total Query Cost, Units per minute per user", refusal(403, "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Total Query Cost' and limit 'Units per minute per user' of service 'gmail.googleapis.com' for consumer 'project_number:1'.", nil), ScopeAccount, defaultRateWait},
		{"429 Total Query Cost, Units per minute per user", refusal(429, "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Total Query Cost' and limit 'Units per minute per user'", nil), ScopeAccount, defaultRateWait},
		{"403 rateLimitExceeded, Total Query Cost, the project's Units per minute", refusal(403, "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Total Query Cost' and limit 'Units per minute' of service 'gmail.googleapis.com' for consumer 'project_number:1'.", nil), ScopeProject, defaultRateWait},
		{"403 rateLimitExceeded, User-rate limit, Retry after", refusal(403, "rateLimitExceeded", "usageLimits", "User-rate limit exceeded.  Retry after "+at, nil), ScopeAccount, 0},
		{"403 userRateLimitExceeded, User Rate Limit Exceeded", refusal(403, "userRateLimitExceeded", "usageLimits",
			"User Rate Limit Exceeded. Rate of requests for user exceed configured project quota.", http.Header{"Retry-After": {"9"}}), ScopeAccount, 9 * time.Second},
		{"403 rateLimitExceeded, the project's per-minute quota", refusal(403, "rateLimitExceeded", "usageLimits",
			"Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' of service 'gmail.googleapis.com' for consumer 'project_number:1'.", nil), ScopeProject, defaultRateWait},
		{"403 rateLimitExceeded, Rate Limit Exceeded (documented project)", refusal(403, "rateLimitExceeded", "usageLimits", "Rate Limit Exceeded", nil), ScopeUnscoped, defaultRateWait},
		{"429 Resource has been exhausted", refusal(429, "rateLimitExceeded", "global", "Resource has been exhausted (e.g. check quota).", http.Header{"Retry-After": {"3"}}), ScopeUnscoped, 3 * time.Second},
		{"429 Too many concurrent requests for user", refusal(429, "rateLimitExceeded", "usageLimits", "Too many concurrent requests for user", nil), ScopeConcurrent, defaultRateWait},
		{"a limit PerUser in ErrorInfo", Classify(&googleapi.Error{Code: 429, Message: "Quota exceeded.", Details: []any{
			map[string]any{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
				"metadata": map[string]any{"quota_limit": "QueriesPerMinutePerUser", "quota_metric": "gmail.googleapis.com/default"}}}}), ScopeAccount, defaultRateWait},
	}
	for _, tc := range cases {
		kind, wait := quotaRefusal(tc.err)
		if kind != tc.kind {
			t.Errorf("%s: kind %d, want %d", tc.name, kind, tc.kind)
		}
		if tc.wait == 0 && (wait < 28*time.Second || wait > 30*time.Second) || tc.wait != 0 && wait != tc.wait {
			t.Errorf("%s: wait %s, want %s (0: the message's 30 s)", tc.name, wait, tc.wait)
		}
	}
	if kind, _ := quotaRefusal(Classify(&googleapi.Error{Code: 500})); kind != 0 {
		t.Errorf("a 500 is a quota refusal of kind %d", kind)
	}
	if kind, _ := quotaRefusal(&Refused{Err: ErrQuotaWait, RetryAfter: time.Second, Scope: ScopeAccount}); kind != 0 {
		t.Errorf("a wait for our own budget is a quota refusal of kind %d", kind)
	}
}
