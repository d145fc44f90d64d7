package queue

import (
	"errors"
	"fmt"
	"time"
)

// Error classes. A handler's plain error is retryable: it is retried with the
// configured backoff until MAILROOM_MAX_RETRIES is used up. The wrappers below
// change that.

// ErrStale marks a task that found nothing left to do because newer work
// superseded it. It counts as a success.
var ErrStale = errors.New("stale")

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot fix: the task goes to the
// dead-letter archive at once, after one attempt.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// RateLimitedError asks for the task to run again after a wait, without
// counting a failure or an attempt.
type RateLimitedError struct {
	Err   error
	After time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limited, retry in %s: %v", e.After, e.Err)
}
func (e *RateLimitedError) Unwrap() error { return e.Err }

// RateLimited marks err as a rate limit that lifts after the given wait.
// A wait of zero or less means "soon" (one second).
func RateLimited(err error, after time.Duration) error {
	if after <= 0 {
		after = time.Second
	}
	return &RateLimitedError{Err: err, After: after}
}

// RateLimitedNotBefore is RateLimited for a wait that must not end early
// (an HTTP Retry-After): asynq keeps a retry's time in whole seconds,
// truncated, so a wait ending inside a second would run up to a second
// early; this one is stretched to the next whole second. Quota waits use
// RateLimited: an early retry there is refused again at no cost, and
// stretching each of them slows a queue of them down.
func RateLimitedNotBefore(err error, after time.Duration) error {
	return RateLimited(err, notBefore(time.Now(), after))
}

// notBefore is a wait of at least d from now that ends on a whole second.
func notBefore(now time.Time, d time.Duration) time.Duration {
	at := now.Add(d)
	if t := at.Truncate(time.Second); !t.Equal(at) {
		at = t.Add(time.Second)
	}
	return at.Sub(now)
}

// RetryAfter returns the wait a rate-limited error names.
func RetryAfter(err error) (time.Duration, bool) {
	var r *RateLimitedError
	if errors.As(err, &r) {
		return r.After, true
	}
	return 0, false
}

// Stale wraps a reason into a stale outcome (a success that did nothing).
func Stale(reason string) error { return fmt.Errorf("%s: %w", reason, ErrStale) }

// IsStale reports whether err marks a stale task.
func IsStale(err error) bool { return errors.Is(err, ErrStale) }
