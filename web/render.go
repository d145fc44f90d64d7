package web

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// layoutPage is what every template receives: the layout's needs, and the
// handler's data in Data.
type layoutPage struct {
	// Name is the template's name.
	Name string
	// Active is the nav entry the request falls under.
	Active string
	Nav    []navItem
	// CSRF is the session's token; every state-changing form carries it
	// ({{template "csrf" .}}).
	CSRF      string
	LoggedIn  bool
	Demo      bool
	PublicURL string
	Flash     *flashNote
	Now       time.Time
	Data      any
}

// flashNote is a one-time notice shown on the next page.
type flashNote struct {
	Kind string // "ok" or "error"
	Text string
}

// render writes the page template name (templates/NAME.html) with data in
// the shared layout, with status.
func (s *server) render(c *gin.Context, status int, name string, data any) {
	t, ok := s.pages[name]
	if !ok {
		s.log.Error("render: no such template", "template", name)
		c.Data(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("no such page template: "+name))
		c.Abort()
		return
	}
	p := layoutPage{
		Name:      name,
		Active:    s.active(c.Request.URL.Path),
		Nav:       s.nav,
		Demo:      s.deps.Demo,
		PublicURL: s.deps.PublicURL,
		Flash:     s.takeFlash(c),
		Now:       s.now(),
		Data:      data,
	}
	if sess, ok := sessionOf(c); ok {
		p.LoggedIn, p.CSRF = true, sess.CSRF
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", p); err != nil {
		s.log.Error("render template", "template", name, "err", err)
		c.Data(http.StatusInternalServerError, "text/plain; charset=utf-8", []byte("The page could not be drawn; the error is logged."))
		c.Abort()
		return
	}
	c.Header("Cache-Control", "no-store")
	c.Data(status, "text/html; charset=utf-8", buf.Bytes())
}

// renderError draws the error page for e.
func (s *server) renderError(c *gin.Context, e *httpError) {
	s.render(c, e.Status, "error", e)
}

// active returns the longest nav path the request path falls under.
func (s *server) active(path string) string {
	best := ""
	for _, n := range s.nav {
		if (path == n.Path || strings.HasPrefix(path, n.Path+"/")) && len(n.Path) > len(best) {
			best = n.Path
		}
	}
	return best
}

// setFlash shows text once on the next admin page (kind "ok" or "error").
// The cookie is signed with the server's key, so a flash that another site
// or a sibling subdomain planted is never shown.
func (s *server) setFlash(c *gin.Context, kind, text string) {
	raw, _ := json.Marshal(flashNote{Kind: kind, Text: text})
	v := base64.RawURLEncoding.EncodeToString(raw)
	http.SetCookie(c.Writer, s.cookie(s.cookies.flash, v+"."+s.keys.sign("flash", v), 60))
}

// redirect answers 303 See Other (after a form post).
func redirect(c *gin.Context, location string) {
	c.Redirect(http.StatusSeeOther, location)
	c.Abort()
}

func (s *server) takeFlash(c *gin.Context) *flashNote {
	ck, err := c.Request.Cookie(s.cookies.flash)
	if err != nil {
		return nil
	}
	http.SetCookie(c.Writer, s.cookie(s.cookies.flash, "", -1))
	v, mac, _ := strings.Cut(ck.Value, ".")
	if !s.keys.verify("flash", v, mac) {
		return nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil
	}
	var f flashNote
	if json.Unmarshal(raw, &f) != nil || f.Text == "" {
		return nil
	}
	if f.Kind != "error" {
		f.Kind = "ok"
	}
	return &f
}

// funcs are the template functions, bound to this server.
func (s *server) funcs() template.FuncMap {
	return template.FuncMap{
		"asset":    s.static.url,
		"ago":      func(t time.Time) string { return ago(s.now(), t) },
		"datetime": datetime,
		"rfc3339":  func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"dur":      humanDuration,
		"msdur":    func(ms int64) string { return humanDuration(time.Duration(ms) * time.Millisecond) },
		"opwords":  opWords,
		"span":     timeSpan,
		"inc":      func(n int) int { return n + 1 },
		"dec":      func(n int) int { return n - 1 },
		"pretty":   prettyJSON,
		"plural":   plural,
		"num":      num,
		"mib":      func(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) },
		"truncate": truncateText,
		"dict":     dict,
		"iszero":   func(v any) bool { return num(v) == "0" },
	}
}

func datetime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < 5*time.Second:
		return "just now"
	case d < time.Minute:
		s = plural(int(d.Seconds()), "second", "seconds")
	case d < time.Hour:
		s = plural(int(d.Minutes()), "minute", "minutes")
	case d < 48*time.Hour:
		s = plural(int(d.Hours()), "hour", "hours")
	default:
		s = plural(int(d.Hours()/24), "day", "days")
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// humanDuration says a duration as people do: "250 ms", "1.5 seconds",
// "10 seconds", "1 minute", "2 minutes 30 seconds", "1 hour 5 minutes",
// "3 days"; never Go's "1m0s" or "10.00s".
func humanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Round(time.Millisecond).Milliseconds())
	case d < 10*time.Second && d%time.Second != 0:
		tenths := d.Round(100 * time.Millisecond)
		if tenths%time.Second != 0 {
			return fmt.Sprintf("%.1f seconds", tenths.Seconds())
		}
		d = tenths
	}
	d = d.Round(time.Second)
	two := func(n int, unit string, m int, sub string) string {
		s := plural(n, unit, unit+"s")
		if m > 0 {
			s += " " + plural(m, sub, sub+"s")
		}
		return s
	}
	switch {
	case d < time.Minute:
		return plural(int(d/time.Second), "second", "seconds")
	case d < time.Hour:
		return two(int(d/time.Minute), "minute", int(d%time.Minute/time.Second), "second")
	case d < 48*time.Hour:
		return two(int(d/time.Hour), "hour", int(d%time.Hour/time.Minute), "minute")
	}
	return two(int(d/(24*time.Hour)), "day", int(d%(24*time.Hour)/time.Hour), "hour")
}

// timeSpan says a duration after "per" or "last": "minute" for one
// minute, "10 seconds" otherwise ("per minute", "last 10 seconds").
func timeSpan(d time.Duration) string {
	return strings.TrimPrefix(humanDuration(d), "1 ")
}

// prettyJSON indents a JSON document; anything else is returned as is.
func prettyJSON(raw []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// num formats a count with thousands separators.
func num(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	default:
		return fmt.Sprint(v)
	}
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// truncateText cuts s to at most n runes, marking the cut.
func truncateText(n int, s string) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:n])) + "…"
}

// dict builds a map from key, value pairs, to pass several values to a
// partial: {{template "empty" dict "Title" "..." "Text" "..."}}.
func dict(kv ...any) (map[string]any, error) {
	if len(kv)%2 != 0 {
		return nil, fmt.Errorf("dict: odd number of arguments")
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		k, ok := kv[i].(string)
		if !ok {
			return nil, fmt.Errorf("dict: key %v is not a string", kv[i])
		}
		m[k] = kv[i+1]
	}
	return m, nil
}
