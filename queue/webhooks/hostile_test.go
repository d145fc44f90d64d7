package webhooks

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/store"
)

// hostileStatus is a receiver's answer written to reach the admin through
// mailroom's alert: its status line's text mentions everyone and links a
// phishing page.
const hostileStatus = "500 @everyone <!channel> urgent: re-enter the admin password at https://phish.example/login"

// hostileReceiver answers every request with the status line it is given,
// written raw, as a receiver can.
func hostileReceiver(t *testing.T, status string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 " + status + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		_ = buf.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv
}

// alertInbox is an alert webhook (a Slack or Discord stand-in) that keeps
// the bodies it receives.
type alertInbox struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
}

func newAlertInbox(t *testing.T) *alertInbox {
	in := &alertInbox{}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		in.mu.Lock()
		in.bodies = append(in.bodies, string(raw))
		in.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(in.srv.Close)
	return in
}

func (in *alertInbox) received() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.bodies...)
}

// TestHostileReceiverReachesNoAlert: a receiver whose answer mentions
// @everyone and <!channel> and links a phishing page, failing for an
// hour, raises an alert in which its text is a short quoted snippet that
// mentions no one: Discord is told to parse no mention, Slack's text has
// its <, > and & escaped, and @everyone has a zero-width space. The
// webhook's lastError holds the answer, short and plain.
func TestHostileReceiverReachesNoAlert(t *testing.T) {
	t.Parallel()
	inbox := newAlertInbox(t)
	alerts := queue.NewAlerter(queue.AlertConfig{WebhookURL: inbox.srv.URL, Interval: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := alerts.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = alerts.Stop(context.Background()); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	clock := &testkit.Clock{}
	e := newEnv(t, Config{AllowPrivate: true, Now: clock.Now, Alert: alerts.Raise})
	srv := hostileReceiver(t, hostileStatus)
	w, _, err := e.p.Create(context.Background(), CreateRequest{URL: srv.URL + "/hook", Types: []string{store.EventFormState}})
	if err != nil {
		t.Fatal(err)
	}
	e.emit(1, "u1", store.EventFormState)
	lastError := func() string {
		got, err := e.p.Webhook(w.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.LastError
	}
	testkit.Eventually(t, 10*time.Second, "the first failure noted", func() bool { return lastError() != "" })
	wantErr := `webhooks: ` + srv.URL + `/hook answered "` + hostileStatus + `"`
	if got := lastError(); got != wantErr {
		t.Errorf("lastError:\n got %s\nwant %s", got, wantErr)
	}
	clock.Advance(61 * time.Minute)
	testkit.Eventually(t, 10*time.Second, "the alert", func() bool { return len(inbox.received()) > 0 })

	snippet := "`webhooks: " + srv.URL + `/hook answered "500 @` + "\u200b" + `everyone <!channel> urgent: re-enter the admin password at https://phish.example/login"` + "`"
	discord := "mailroom: webhook " + w.ID + " `" + srv.URL + "/hook` has failed for an hour: " + snippet
	slack := strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(discord)
	want := `{"content":"` + strings.ReplaceAll(discord, `"`, `\"`) + `","text":"` + strings.ReplaceAll(slack, `"`, `\"`) + `","allowed_mentions":{"parse":[]}}`
	if got := inbox.received()[0]; got != want {
		t.Errorf("alert body:\n got %s\nwant %s", got, want)
	}
	// Spelled out: no mention is left to fire in either chat's field.
	var msg struct{ Content, Text string }
	if err := json.Unmarshal([]byte(inbox.received()[0]), &msg); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(msg.Content+msg.Text, "@everyone") || strings.Contains(msg.Text, "<!channel>") {
		t.Errorf("a mention is left: %+v", msg)
	}
}

// TestLastErrorIsCapped: a receiver's long status text with control
// characters is stored in lastError short and plain.
func TestLastErrorIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	srv := hostileReceiver(t, "502 "+strings.Repeat("spam\x1b[31m\x7f\u202e ", 500))
	w, _, err := e.p.Create(context.Background(), CreateRequest{URL: srv.URL + "/hook", Types: []string{store.EventFormState}})
	if err != nil {
		t.Fatal(err)
	}
	e.emit(1, "u1", store.EventFormState)
	var got string
	testkit.Eventually(t, 10*time.Second, "the first failure noted", func() bool {
		hook, err := e.p.Webhook(w.ID)
		if err != nil {
			t.Fatal(err)
		}
		got = hook.LastError
		return got != ""
	})
	if len(got) > maxLastError+len("…") || strings.ContainsAny(got, "\x1b\x7f\u202e") || !strings.Contains(got, "spam […") {
		t.Errorf("lastError (%d bytes) %q: want at most %d bytes, no control characters, cut", len(got), got, maxLastError)
	}
}
