package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue"
	"mailroom/queue/rules"
	"mailroom/store"
)

// httpError is an answer that is not a success, in the contract's shape:
// {"error":{"code","message","field"}} with Status. Handlers pass it (or any
// error) to fail.
type httpError struct {
	Status  int
	Code    string // snake_case
	Message string // a human sentence
	Field   string // the offending input, as a JSON path; optional
	// RetryAfter, when positive, is sent as Retry-After (whole seconds,
	// rounded up): with 429 and 503.
	RetryAfter time.Duration
	// Err is the cause: logged for 5xx, never shown.
	Err error
}

func (e *httpError) Error() string {
	msg := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *httpError) Unwrap() error { return e.Err }

// invalid is a 400 "invalid" naming the field.
func invalid(field, message string) *httpError {
	return &httpError{Status: http.StatusBadRequest, Code: "invalid", Message: message, Field: field}
}

// notFound is a 404 "not_found".
func notFound(message string) *httpError {
	return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: message}
}

// conflict is a 409 "conflict".
func conflict(field, message string) *httpError {
	return &httpError{Status: http.StatusConflict, Code: "conflict", Message: message, Field: field}
}

// unavailable is a 503 "not_ready".
func unavailable(message string) *httpError {
	return &httpError{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: message}
}

// abortError answers with the contract's error shape (JSON, or the HTML
// error page under /admin) and stops the handler chain.
func (s *server) abortError(c *gin.Context, status int, code, message, field string) {
	s.fail(c, &httpError{Status: status, Code: code, Message: message, Field: field})
}

// fail answers err and stops the handler chain. *httpError answers as itself;
// the pipelines' errors are mapped next (mapGmailError, mapRulesError,
// mapFormsError); then store.ErrNotFound is 404,
// store.ErrConflict 409, a queue rate limit 429 with Retry-After, an
// oversized body 413; anything else is a logged 500.
func (s *server) fail(c *gin.Context, err error) {
	e := s.mapError(err)
	if e.Status == http.StatusInternalServerError {
		s.logger().Error("request failed", "method", c.Request.Method, "path", c.Request.URL.Path, "status", e.Status, "err", err)
	}
	_ = c.Error(err)
	c.Abort()
	if c.Writer.Written() {
		return
	}
	if e.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if wantsHTML(c) {
		s.renderError(c, e)
		return
	}
	s.writeError(c, e)
}

func (s *server) logger() *slog.Logger {
	if s == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.log
}

func (s *server) mapError(err error) *httpError {
	var e *httpError
	if errors.As(err, &e) {
		if e.Status < 400 || e.Status > 599 || e.Code == "" {
			return &httpError{Status: http.StatusInternalServerError, Code: "internal", Message: "Something went wrong on our side; the error is logged.", Err: err}
		}
		return e
	}
	if e := mapGmailError(err); e != nil {
		return e
	}
	if e := mapConnectError(err); e != nil {
		return e
	}
	if e := mapFormsError(err); e != nil {
		return e
	}
	if e := mapWebhooksError(err); e != nil {
		return e
	}
	var rulesCfg rules.Config
	if s != nil && s.deps.Rules != nil {
		rulesCfg = s.deps.Rules.Config()
	}
	if e := mapRulesError(rulesCfg, err); e != nil {
		return e
	}
	var tooBig *http.MaxBytesError
	var limited *queue.RateLimitedError
	switch {
	case errors.As(err, &tooBig):
		return tooLarge(tooBig.Limit)
	case errors.As(err, &limited):
		return &httpError{Status: http.StatusTooManyRequests, Code: "rate_limited", Message: "Too many requests; retry after the time in Retry-After.", RetryAfter: limited.After, Err: err}
	case errors.Is(err, store.ErrCursorAhead):
		return &httpError{Status: http.StatusBadRequest, Code: "invalid_cursor", Field: "after", Err: err,
			Message: `after is past the newest event, so it is no cursor this server gave out (an events answer's "next").`}
	case errors.Is(err, store.ErrNotFound):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "No such item.", Err: err}
	case errors.Is(err, store.ErrMoved):
		return &httpError{Status: http.StatusConflict, Code: "user_moved", Message: "This user was moved to another mailroom of the fleet; send its requests there.", Err: err}
	case errors.Is(err, store.ErrConflict):
		return &httpError{Status: http.StatusConflict, Code: "conflict", Message: "It already exists.", Err: err}
	case errors.Is(err, store.ErrUnavailable):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "store_unavailable", Message: "mailroom cannot write to its data file now (disk full or I/O error); nothing of this request was stored. Try again later.", RetryAfter: 10 * time.Second, Err: err}
	case errors.Is(err, queue.ErrBrokerUnavailable):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "broker_unavailable", Message: "The task broker (Redis) does not answer; work already accepted is kept and resumes when it returns. Try again shortly.", RetryAfter: 5 * time.Second, Err: err}
	case errors.Is(err, context.DeadlineExceeded):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "The server took too long to answer; try again.", RetryAfter: time.Second, Err: err}
	}
	return &httpError{Status: http.StatusInternalServerError, Code: "internal", Message: "Something went wrong on our side; the error is logged.", Err: err}
}

func tooLarge(limit int64) *httpError {
	return &httpError{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: fmt.Sprintf("The request body is larger than the limit of %s.", humanBytes(limit))}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (s *server) writeError(c *gin.Context, e *httpError) {
	s.writeJSON(c, e.Status, errorBody{errorDetail{Code: e.Code, Message: e.Message, Field: e.Field}})
}

// writeJSON writes v as the JSON answer with status. It encodes before
// writing, so an encoding failure is a clean 500, never half a body.
func (s *server) writeJSON(c *gin.Context, status int, v any) {
	raw, err := json.Marshal(v)
	if err != nil {
		s.logger().Error("encode JSON answer", "path", c.Request.URL.Path, "err", err)
		status = http.StatusInternalServerError
		raw = []byte(`{"error":{"code":"internal","message":"Something went wrong on our side; the error is logged."}}`)
	}
	c.Data(status, "application/json; charset=utf-8", raw)
}

// wantsHTML reports whether the answer should be a page: admin routes, but
// not their .json endpoints.
func wantsHTML(c *gin.Context) bool {
	p := c.Request.URL.Path
	return (p == "/admin" || strings.HasPrefix(p, "/admin/")) && !strings.HasSuffix(p, ".json")
}

func (s *server) notFound(c *gin.Context) {
	s.fail(c, notFound("There is no such page or route: "+c.Request.Method+" "+c.Request.URL.Path+"."))
}

func (s *server) methodNotAllowed(c *gin.Context) {
	s.fail(c, &httpError{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
		Message: fmt.Sprintf("%s is not allowed on %s; allowed: %s.", c.Request.Method, c.Request.URL.Path, c.Writer.Header().Get("Allow"))})
}

// recovery turns a panic into the contract's 500 and logs the stack. We aim
// for none: every input has an answer.
func (s *server) recovery(c *gin.Context) {
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if r == http.ErrAbortHandler {
			panic(r)
		}
		s.log.Error("panic in handler", "method", c.Request.Method, "path", c.Request.URL.Path, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		if c.Writer.Written() {
			c.Abort()
			return
		}
		s.fail(c, &httpError{Status: http.StatusInternalServerError, Code: "internal", Message: "Something went wrong on our side; the error is logged.", Err: fmt.Errorf("panic: %v", r)})
	}()
	c.Next()
}
