package sheets

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Errors of the submission limits.
var (
	// ErrSubmitLimited: a form or its user spent its allowance of
	// submissions (429 with Retry-After); see SubmitLimitError.
	ErrSubmitLimited = errors.New("too many submissions")
	// ErrUserBytesFull: the forms of a user keep MaxUserBytes of
	// submissions (429 with Retry-After); see UserBytesError.
	ErrUserBytesFull = errors.New("too many bytes of submissions kept")
	// ErrBacklogFull: a form has MaxWaiting rows waiting to be written
	// (409 form_backlog_full); see BacklogFullError.
	ErrBacklogFull = errors.New("too many rows wait to be written")
)

// SubmitLimitError is a submission refused by a rate limit.
type SubmitLimitError struct {
	// Scope is "form" (the form's limit) or "user" (all the forms of the
	// form's user together).
	Scope string
	// Limit submissions at once, refilled at Limit per Window.
	Limit  int
	Window time.Duration
	// RetryAfter is when the allowance has room for one more.
	RetryAfter time.Duration
}

func (e *SubmitLimitError) Error() string {
	return fmt.Sprintf("sheets: the %s's allowance of %d submissions (refilled at %d per %s) is spent; retry in %s", e.Scope, e.Limit, e.Limit, e.Window, e.RetryAfter)
}

func (e *SubmitLimitError) Unwrap() error { return ErrSubmitLimited }

// BacklogFullError is a submission refused because its form has too many
// rows waiting (a form in error, or one far behind its quota).
type BacklogFullError struct {
	Waiting, Limit int
	// LastError is the form's error when it is in the error state.
	LastError string
}

func (e *BacklogFullError) Error() string {
	return fmt.Sprintf("sheets: %d rows wait to be written (limit %d)", e.Waiting, e.Limit)
}

func (e *BacklogFullError) Unwrap() error { return ErrBacklogFull }

// UserBytesError is a submission refused because the forms of its user
// keep as many bytes of submissions (waiting or written and kept) as one
// user may.
type UserBytesError struct {
	Stored, Limit int64
	// RetryAfter is when pruning may next free some (written rows older
	// than the retention go); an hour when nothing is pruned.
	RetryAfter time.Duration
}

func (e *UserBytesError) Error() string {
	return fmt.Sprintf("sheets: the user's forms keep %d bytes of submissions (limit %d)", e.Stored, e.Limit)
}

func (e *UserBytesError) Unwrap() error { return ErrUserBytesFull }

// submitLimiter is a token bucket per form and per user: each holds up to
// its limit (a burst is taken at once) and refills at the limit per
// window. A submission is taken only when both its form and its user have
// a token. It lives in the process: the limits protect this process's CPU
// and the flushes' turn (the disk is bounded by MaxUserBytes, in the
// store), and a restart refills them.
type submitLimiter struct {
	perForm, perUser int
	window           time.Duration

	mu      sync.Mutex
	buckets map[string]*bucket
}

// bucket is a token bucket's state: tokens left at at.
type bucket struct {
	tokens float64
	at     time.Time
}

// maxSubmitKeys bounds the limiter's memory; past it, full buckets (which
// say nothing a missing one would not) go.
const maxSubmitKeys = 100_000

func newSubmitLimiter(perForm, perUser int, window time.Duration) *submitLimiter {
	return &submitLimiter{perForm: perForm, perUser: perUser, window: window, buckets: map[string]*bucket{}}
}

// take counts one submission of formID by userID at now, or refuses with
// a *SubmitLimitError and counts nothing.
func (l *submitLimiter) take(formID, userID string, now time.Time) error {
	fk, uk := "form:"+formID, "user:"+userID
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buckets) >= maxSubmitKeys {
		l.sweep(now)
	}
	fb, ub := l.fill(fk, l.perForm, now), l.fill(uk, l.perUser, now)
	if fb.tokens < 1 {
		return &SubmitLimitError{Scope: "form", Limit: l.perForm, Window: l.window, RetryAfter: l.wait(fb, l.perForm)}
	}
	if ub.tokens < 1 {
		return &SubmitLimitError{Scope: "user", Limit: l.perUser, Window: l.window, RetryAfter: l.wait(ub, l.perUser)}
	}
	fb.tokens--
	ub.tokens--
	return nil
}

// giveBack returns the tokens of a submission taken that was not stored
// after all (only accepted submissions count).
func (l *submitLimiter) giveBack(formID, userID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range []struct {
		key   string
		limit int
	}{{"form:" + formID, l.perForm}, {"user:" + userID, l.perUser}} {
		if b := l.buckets[k.key]; b != nil {
			b.tokens = min(b.tokens+1, float64(k.limit))
		}
	}
}

// fill returns key's bucket refilled up to now (a new one is full).
func (l *submitLimiter) fill(key string, limit int, now time.Time) *bucket {
	b := l.buckets[key]
	if b == nil {
		b = &bucket{tokens: float64(limit), at: now}
		l.buckets[key] = b
		return b
	}
	if now.After(b.at) {
		b.tokens = min(b.tokens+float64(limit)*now.Sub(b.at).Seconds()/l.window.Seconds(), float64(limit))
		b.at = now
	}
	return b
}

// wait is how long until b holds a whole token.
func (l *submitLimiter) wait(b *bucket, limit int) time.Duration {
	perToken := float64(l.window) / float64(limit)
	return max(time.Duration((1-b.tokens)*perToken), time.Millisecond)
}

// sweep forgets every bucket that would be full by now.
func (l *submitLimiter) sweep(now time.Time) {
	for k, b := range l.buckets {
		limit := l.perUser
		if strings.HasPrefix(k, "form:") {
			limit = l.perForm
		}
		if b.tokens+float64(limit)*now.Sub(b.at).Seconds()/l.window.Seconds() >= float64(limit) {
			delete(l.buckets, k)
		}
	}
}
