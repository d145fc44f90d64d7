// Package testkit holds what the tests of every package share: one wait for
// an event (a deadline, a poll interval, a message that says what was awaited)
// and a writer that sends a test's logs to t.Log.
//
// It imports nothing of ours, so the tests of any package (store included)
// may use it without an import cycle. Non-test code must not import it.
package testkit

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"
)

// Poll is how often Eventually checks its condition.
const Poll = 10 * time.Millisecond

// Eventually checks cond at once and then every Poll until it holds, and
// fails the test if it still does not after d:
// "timed out after 5s waiting for <what>".
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	wait(t, d, what, func() (bool, error) { return cond(), nil })
}

// EventuallyNil is Eventually for a condition that says why it does not hold
// yet: cond returns nil once the event happened, or an error describing what
// it saw, and the last such error ends the failure message.
func EventuallyNil(t testing.TB, d time.Duration, what string, cond func() error) {
	t.Helper()
	wait(t, d, what, func() (bool, error) { err := cond(); return err == nil, err })
}

func wait(t testing.TB, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("timed out after %s waiting for %s: %v", d, what, err)
			} else {
				t.Fatalf("timed out after %s waiting for %s", d, what)
			}
			return // Fatalf has ended the goroutine; a stand-in TB may not
		}
		time.Sleep(Poll)
	}
}

// LogWriter returns a writer that logs each write through t.Log, without its
// trailing newline: hand it to a slog handler to see a test's logs under it.
func LogWriter(t testing.TB) LogTo { return LogTo{t} }

// LogTo is the writer LogWriter returns.
type LogTo struct{ t testing.TB }

func (w LogTo) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Buffer is a bytes.Buffer safe for concurrent writers (a logger's or a
// child process's output) and a reader.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Clock is a clock for tests: time.Now moved by Advance (safe for
// concurrent use). Pass its Now where a component takes a clock.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is time.Now plus every Advance so far.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}
