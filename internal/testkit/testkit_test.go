package testkit

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	r := &recorder{TB: t}
	Eventually(r, 5*time.Second, "three calls", func() bool { return n.Add(1) >= 3 })
	if r.failed != "" || n.Load() != 3 {
		t.Fatalf("failed %q after %d calls, want no failure after 3", r.failed, n.Load())
	}
}

func TestEventuallyFailsAfterTheDeadline(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	start := time.Now()
	Eventually(r, 50*time.Millisecond, "never", func() bool { return false })
	if elapsed := time.Since(start); elapsed < 50*time.Millisecond {
		t.Errorf("gave up after %s, before the 50ms deadline", elapsed)
	}
	if want := "timed out after 50ms waiting for never"; r.failed != want {
		t.Errorf("message %q, want %q", r.failed, want)
	}
}

func TestEventuallyNilSaysWhatItLastSaw(t *testing.T) {
	t.Parallel()
	r := &recorder{TB: t}
	EventuallyNil(r, 20*time.Millisecond, "the count", func() error { return errors.New("count 2, want 3") })
	if want := "timed out after 20ms waiting for the count: count 2, want 3"; r.failed != want {
		t.Errorf("message %q, want %q", r.failed, want)
	}
	r = &recorder{TB: t}
	EventuallyNil(r, time.Second, "nothing", func() error { return nil })
	if r.failed != "" {
		t.Errorf("failed %q on a condition that holds", r.failed)
	}
}

type logRecorder struct {
	testing.TB
	lines []string
}

func (r *logRecorder) Log(args ...any) { r.lines = append(r.lines, fmt.Sprint(args...)) }

func TestLogWriterDropsTheTrailingNewline(t *testing.T) {
	t.Parallel()
	r := &logRecorder{TB: t}
	n, err := LogWriter(r).Write([]byte("level=WARN msg=hi\n"))
	if err != nil || n != 18 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got := strings.Join(r.lines, "|"); got != "level=WARN msg=hi" {
		t.Errorf("logged %q", got)
	}
}
