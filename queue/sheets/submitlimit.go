package sheets

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Errors of the submission limits.
var (
	// ErrSubmitLimited: a form or its user took its submissions of the
	// window (429 with Retry-After); see SubmitLimitError.
	ErrSubmitLimited = errors.New("too many submissions")
	// ErrBacklogFull: a form has MaxWaiting rows waiting to be written
	// (409 form_backlog_full); see BacklogFullError.
	ErrBacklogFull = errors.New("too many rows wait to be written")
)

// SubmitLimitError is a submission refused by a rate limit.
type SubmitLimitError struct {
	// Scope is "form" (the form's limit) or "user" (all the forms of the
	// form's user together).
	Scope  string
	Limit  int
	Window time.Duration
	// RetryAfter is when the oldest submission counted leaves the window.
	RetryAfter time.Duration
}

func (e *SubmitLimitError) Error() string {
	return fmt.Sprintf("sheets: %d submissions per %s per %s taken; retry in %s", e.Limit, e.Scope, e.Window, e.RetryAfter)
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

// submitLimiter counts accepted submissions per form and per user in a
// sliding window (a log of their times, at most the limit per key): a
// submission is taken only when both its form and its user have room, so
// no window of that length, at any offset, holds more than either limit.
// It lives in the process: the limits protect this process's disk and
// CPU, and a restart forgets at most one window.
type submitLimiter struct {
	perForm, perUser int
	window           time.Duration

	mu   sync.Mutex
	logs map[string][]time.Time
}

// maxSubmitKeys bounds the limiter's memory; past it, idle keys go.
const maxSubmitKeys = 100_000

func newSubmitLimiter(perForm, perUser int, window time.Duration) *submitLimiter {
	return &submitLimiter{perForm: perForm, perUser: perUser, window: window, logs: map[string][]time.Time{}}
}

// take counts one submission of formID by userID at now, or refuses with
// a *SubmitLimitError and counts nothing.
func (l *submitLimiter) take(formID, userID string, now time.Time) error {
	fk, uk := "form:"+formID, "user:"+userID
	l.mu.Lock()
	defer l.mu.Unlock()
	if wait := l.wait(fk, l.perForm, now); wait > 0 {
		return &SubmitLimitError{Scope: "form", Limit: l.perForm, Window: l.window, RetryAfter: wait}
	}
	if wait := l.wait(uk, l.perUser, now); wait > 0 {
		return &SubmitLimitError{Scope: "user", Limit: l.perUser, Window: l.window, RetryAfter: wait}
	}
	if len(l.logs) >= maxSubmitKeys {
		l.sweep(now)
	}
	l.logs[fk] = append(l.logs[fk], now)
	l.logs[uk] = append(l.logs[uk], now)
	return nil
}

// giveBack forgets a submission taken at now that was not stored after
// all (only accepted submissions count).
func (l *submitLimiter) giveBack(formID, userID string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range []string{"form:" + formID, "user:" + userID} {
		log := l.logs[k]
		for i := len(log) - 1; i >= 0; i-- {
			if log[i].Equal(at) {
				l.logs[k] = append(log[:i:i], log[i+1:]...)
				break
			}
		}
	}
}

// wait drops key's times older than the window and says how long until
// it has room under limit (zero: now).
func (l *submitLimiter) wait(key string, limit int, now time.Time) time.Duration {
	log := l.logs[key]
	i := 0
	for i < len(log) && !now.Before(log[i].Add(l.window)) {
		i++
	}
	log = log[i:]
	if len(log) == 0 {
		delete(l.logs, key)
		return 0
	}
	l.logs[key] = log
	if len(log) < limit {
		return 0
	}
	return max(log[len(log)-limit].Add(l.window).Sub(now), time.Millisecond)
}

// sweep forgets every key with nothing in the window.
func (l *submitLimiter) sweep(now time.Time) {
	for k, log := range l.logs {
		if len(log) == 0 || !now.Before(log[len(log)-1].Add(l.window)) {
			delete(l.logs, k)
		}
	}
}
