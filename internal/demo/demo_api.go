package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"time"
)

// demoRequestKey marks the requests the demo serves in process (its own
// API calls and the emulator's pushes); see demoLogHandler.
type demoRequestKey struct{}

func isDemoRequest(ctx context.Context) bool {
	v, _ := ctx.Value(demoRequestKey{}).(bool)
	return v
}

// demoInProcess is an http.RoundTripper that serves each request with the
// app's own handler, without a socket. The demo drives the API through it,
// and the emulator delivers its pushes through it, so the demo works
// whatever the listener's port or the public URL (a TLS proxy's name, a
// port chosen at start).
type demoInProcess struct {
	handler func() http.Handler
}

func (t demoInProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		defer r.Body.Close()
	}
	h := t.handler()
	if h == nil {
		return nil, errors.New("demo: the web handler is not built yet")
	}
	in := r.Clone(context.WithValue(r.Context(), demoRequestKey{}, true))
	if in.Body == nil {
		in.Body = http.NoBody
	}
	in.RequestURI = r.URL.RequestURI()
	in.RemoteAddr = "127.0.0.1:0"
	if in.Host == "" {
		in.Host = r.URL.Host
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, in)
	resp := rec.Result()
	resp.Request = r
	return resp, nil
}

// demoAPI calls mailroom's JSON API (CONTRACT.md) as any client would, but
// in process. Seeding through the API keeps the demo independent of the
// pipelines' internals and exercises every endpoint it uses.
type demoAPI struct {
	client *http.Client
	token  string
}

// demoAPIError is an answer outside 2xx, in the contract's error shape.
type demoAPIError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

func (e *demoAPIError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// demoStatusOf returns the HTTP status of an demoAPIError, or 0.
func demoStatusOf(err error) int {
	var e *demoAPIError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// do sends in (JSON, unless nil) and decodes a 2xx answer into out (unless
// nil). Any other answer is an *demoAPIError.
func (api *demoAPI) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("demo: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://mailroom.demo"+path, body)
	if err != nil {
		return fmt.Errorf("demo: %s %s: %w", method, path, err)
	}
	req.Header.Set("Authorization", "Bearer "+api.token)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := api.client.Do(req)
	if err != nil {
		return fmt.Errorf("demo: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("demo: %s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var shape struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		e := &demoAPIError{Status: resp.StatusCode, Code: "http_error", Message: http.StatusText(resp.StatusCode)}
		if json.Unmarshal(raw, &shape) == nil && shape.Error.Code != "" {
			e.Code, e.Message = shape.Error.Code, shape.Error.Message
		}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
		return fmt.Errorf("demo: %s %s: %w", method, path, e)
	}
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("demo: %s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// demoLogHandler logs what happens while serving the demo's own in-process
// requests one level lower (info becomes debug), so that the traffic
// generator does not flood the log; warnings and errors stay as they are.
type demoLogHandler struct{ next slog.Handler }

func (h demoLogHandler) level(ctx context.Context, l slog.Level) slog.Level {
	if l < slog.LevelWarn && isDemoRequest(ctx) {
		return slog.LevelDebug
	}
	return l
}

func (h demoLogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.next.Enabled(ctx, h.level(ctx, l))
}

func (h demoLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if l := h.level(ctx, r.Level); l != r.Level {
		if !h.next.Enabled(ctx, l) {
			return nil
		}
		r.Level = l
	}
	return h.next.Handle(ctx, r)
}

func (h demoLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return demoLogHandler{h.next.WithAttrs(attrs)}
}

func (h demoLogHandler) WithGroup(name string) slog.Handler {
	return demoLogHandler{h.next.WithGroup(name)}
}

// demoWebhook catches the dead-letter alerts in process when no
// MAILROOM_ALERT_WEBHOOK_URL is set, so the demo page can show them.
type demoWebhook struct {
	now  func() time.Time
	log  *slog.Logger
	mu   sync.Mutex
	seen []demoAlert // oldest first, at most demoWebhookKeep
}

type demoAlert struct {
	At   time.Time
	Text string
}

const demoWebhookKeep = 100

// demoWebhookURL is where the alerter posts in demo mode; demoWebhook
// answers it without any network.
const demoWebhookURL = "http://alerts.mailroom.demo/webhook"

func (w *demoWebhook) RoundTrip(r *http.Request) (*http.Response, error) {
	var msg struct {
		Content string `json:"content"`
		Text    string `json:"text"`
	}
	if r.Body != nil {
		raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
		r.Body.Close()
		_ = json.Unmarshal(raw, &msg)
	}
	text := msg.Content
	if text == "" {
		text = msg.Text
	}
	w.log.Info("demo: the alert webhook received a message (see /admin/demo/alerts)", "text", text)
	w.mu.Lock()
	w.seen = append(w.seen, demoAlert{At: w.now(), Text: text})
	if len(w.seen) > demoWebhookKeep {
		w.seen = w.seen[len(w.seen)-demoWebhookKeep:]
	}
	w.mu.Unlock()
	return &http.Response{
		StatusCode: http.StatusNoContent, Status: "204 No Content", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{}, Body: http.NoBody, Request: r,
	}, nil
}

// alerts returns what the webhook received, newest first.
func (w *demoWebhook) alerts() []demoAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]demoAlert, len(w.seen))
	for i, a := range w.seen {
		out[len(w.seen)-1-i] = a
	}
	return out
}
