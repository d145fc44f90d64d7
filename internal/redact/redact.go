// Package redact hides secrets in text before it is logged or shown: the
// values of secret settings (and the secret parts of those that are URLs:
// a webhook's path, a Redis URL's password), passwords in any URL's user
// info, and OAuth credentials in query strings and token answers.
// Redactor.String is the one function that does it; Error and Handler
// apply it to errors and to every log record.
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces what is hidden.
const Mask = "[redacted]"

// minSecretLen is the shortest value hidden by value: shorter ones would
// mask ordinary words (settings that short are refused or unsafe anyway).
const minSecretLen = 6

var (
	// scheme://user:password@ in any URL.
	userinfo = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@"']*):[^/\s@"']*@`)
	// OAuth and token parameters in query strings and form bodies.
	param = regexp.MustCompile(`(?i)\b((?:access_token|refresh_token|id_token|client_secret|code_verifier|code|token|password|secret|key|sig|signature)=)[^&\s"']+`)
	// The same as JSON fields of a token answer or request.
	jsonField = regexp.MustCompile(`(?i)("(?:access_token|refresh_token|id_token|client_secret|code_verifier|password)"\s*:\s*")[^"]*"`)
)

// Redactor hides a fixed set of secrets, and the generic ones above. The
// zero value and nil hide only the generic ones.
type Redactor struct {
	secrets []string // longest first
}

// New returns a Redactor of secrets (the values of secret settings; empty
// ones are skipped). Of a secret that is an absolute URL, the password,
// the path and the query are hidden (a webhook's secret is its path).
func New(secrets ...string) *Redactor {
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if len(s) >= minSecretLen && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, s := range secrets {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if u, err := url.Parse(s); err == nil && u.Scheme != "" && u.Host != "" {
			// The scheme and host stay visible, to say where a failure was.
			if p, ok := u.User.Password(); ok {
				add(p)
				add(url.QueryEscape(p))
			}
			if len(u.Path) > 1 {
				add(u.Path)
				add(u.EscapedPath())
			}
			add(u.RawQuery)
			continue
		}
		add(s)
		add(url.QueryEscape(s))
		add(url.PathEscape(s))
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return &Redactor{secrets: out}
}

// String returns s with every secret masked.
func (r *Redactor) String(s string) string {
	if r != nil {
		for _, secret := range r.secrets {
			if strings.Contains(s, secret) {
				s = strings.ReplaceAll(s, secret, Mask)
			}
		}
	}
	s = userinfo.ReplaceAllString(s, "${1}:"+Mask+"@")
	s = param.ReplaceAllString(s, "${1}"+Mask)
	return jsonField.ReplaceAllString(s, `${1}`+Mask+`"`)
}

// Error returns err with its message redacted; errors.Is and errors.As
// still see the original chain. Nil stays nil; an error with nothing to
// hide is returned as it is.
func (r *Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := r.String(msg)
	if clean == msg {
		return err
	}
	return &redacted{msg: clean, err: err}
}

type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// Handler wraps h so that every record's message and attributes are
// redacted before h sees them.
func (r *Redactor) Handler(h slog.Handler) slog.Handler {
	return &handler{r: r, next: h}
}

type handler struct {
	r    *Redactor
	next slog.Handler
}

func (h *handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = h.attr(a)
	}
	return &handler{r: h.r, next: h.next.WithAttrs(clean)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{r: h.r, next: h.next.WithGroup(name)}
}

func (h *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = h.attr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			return slog.String(a.Key, h.r.String(err.Error()))
		}
		s := fmt.Sprint(v.Any())
		if clean := h.r.String(s); clean != s {
			return slog.String(a.Key, clean)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
