package soak_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// trace keeps, when SOAK_TRACE_DIR is set, what a failed soak needs to be
// understood: each life's log, and a timeline of the Gmail label writes
// the emulator answered and the rule saves the load made. Without it, it
// does nothing.
type trace struct {
	dir    string // "" when off
	prefix string // the broker's name

	mu    sync.Mutex
	lives int
	f     *os.File
}

func newTrace(name string) (*trace, error) {
	dir := os.Getenv("SOAK_TRACE_DIR")
	tr := &trace{dir: dir, prefix: strings.ReplaceAll(name, "/", "-")}
	if dir == "" {
		return tr, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, tr.prefix+"-timeline.log"))
	tr.f = f
	return tr, err
}

// event adds a line to the timeline.
func (tr *trace) event(format string, args ...any) {
	if tr.f == nil {
		return
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	fmt.Fprintf(tr.f, "%s %s\n", time.Now().UTC().Format("15:04:05.000000"), fmt.Sprintf(format, args...))
}

// life writes one life's log.
func (tr *trace) life(out string) {
	if tr.dir == "" {
		return
	}
	tr.mu.Lock()
	tr.lives++
	n := tr.lives
	tr.mu.Unlock()
	tr.event("life %d ends (log %s-life-%02d.log)", n, tr.prefix, n)
	_ = os.WriteFile(filepath.Join(tr.dir, fmt.Sprintf("%s-life-%02d.log", tr.prefix, n)), []byte(out), 0o644)
}

// gmailWrites wraps the emulator's handler: every Gmail label write
// (messages.modify and batchModify) goes to the timeline with its body and
// the status of its answer.
func (tr *trace) gmailWrites(h http.Handler) http.Handler {
	if tr.f == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, "/modify") && !strings.HasSuffix(r.URL.Path, "/batchModify") {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		start := time.Now()
		h.ServeHTTP(rec, r)
		tr.event("gmail %s -> %d (%s) %s", r.URL.Path, rec.status, time.Since(start).Round(time.Millisecond), body)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
