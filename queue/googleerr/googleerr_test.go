package googleerr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/googleerr"
)

// Each class of the adapter goes to the queue's: a refusal waits its own
// retry time, a permanent error is permanent, the rest is retried; the
// cause stays findable, and an error mapped already is left alone.
func TestToQueue(t *testing.T) {
	t.Parallel()
	cause := errors.New("googleapi: Error 429")
	type class int
	const (
		retryable class = iota
		permanent
		limited
	)
	cases := []struct {
		name  string
		err   error
		class class
		wait  time.Duration
	}{
		{"refused by Google, the account's", &google.Refused{Err: cause, RetryAfter: 7 * time.Second, Scope: google.ScopeAccount}, limited, 7 * time.Second},
		{"refused by Google, the project's", &google.Refused{Err: cause, RetryAfter: 42 * time.Second, Scope: google.ScopeProject}, limited, 42 * time.Second},
		{"refused by the budget", &google.Refused{Err: fmt.Errorf("budget: %w", google.ErrQuotaWait), RetryAfter: 1500 * time.Millisecond, Scope: google.ScopeAccount}, limited, 1500 * time.Millisecond},
		{"refused, wrapped by the pipeline", fmt.Errorf("sheets: flush: %w", &google.Refused{Err: cause, RetryAfter: 3 * time.Second}), limited, 3 * time.Second},
		{"refused without a wait", &google.Refused{Err: cause}, limited, time.Second}, // the queue's "soon"
		{"permanent", &google.Permanent{Err: fmt.Errorf("%w: %w", google.ErrRevoked, cause)}, permanent, 0},
		{"permanent, wrapped", fmt.Errorf("gmail: sync: %w", &google.Permanent{Err: cause}), permanent, 0},
		{"transient", &google.Transient{Err: cause}, retryable, 0},
		{"unclassified", cause, retryable, 0},
		{"cancelled", context.Canceled, retryable, 0},
		{"queue's rate limit already", queue.RateLimited(cause, 9*time.Second), limited, 9 * time.Second},
		{"queue's permanent already", queue.Permanent(&google.Refused{Err: cause, RetryAfter: time.Second}), permanent, 0},
	}
	for _, tc := range cases {
		got := googleerr.ToQueue(tc.err)
		wait, isLimited := queue.RetryAfter(got)
		switch tc.class {
		case limited:
			if !isLimited || wait != tc.wait || queue.IsPermanent(got) {
				t.Errorf("%s: %v (limited %t, wait %s), want rate limited for %s", tc.name, got, isLimited, wait, tc.wait)
			}
		case permanent:
			if !queue.IsPermanent(got) || isLimited {
				t.Errorf("%s: %v, want permanent", tc.name, got)
			}
		case retryable:
			if got != tc.err {
				t.Errorf("%s: %v, want it returned as it is", tc.name, got)
			}
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: the cause is lost: %v", tc.name, got)
		}
		if got.Error() != tc.err.Error() && !isLimited {
			t.Errorf("%s: message %q, want the cause's %q", tc.name, got, tc.err)
		}
		if again := googleerr.ToQueue(got); again != got {
			t.Errorf("%s: mapped twice: %v, want %v", tc.name, again, got)
		}
	}
	if googleerr.ToQueue(nil) != nil {
		t.Error("nil mapped to an error")
	}
	// The adapter's sentinels stay findable through the queue's classes.
	err := googleerr.ToQueue(&google.Permanent{Err: fmt.Errorf("%w: %w", google.ErrNotFound, cause)})
	if !errors.Is(err, google.ErrNotFound) || !google.IsPermanent(err) {
		t.Errorf("sentinel or class lost: %v", err)
	}
}
