package queue_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/testkit"
	"mailroom/queue"
)

// hostile is what a webhook receiver (or anyone whose words an error
// carries) writes to reach the admin through an alert.
const hostile = "500 @everyone <!channel> urgent: re-enter the admin password at https://phish.example/login"

// TestAlertsMentionNoOne: every kind of alert (a dead letter, a notice, a
// raised alert) quotes hostile text as a short code span, tells Discord to
// parse no mention, escapes Slack's <, > and &, and puts a zero-width
// space after the @ of @everyone, @here and @channel: the alert webhook
// receives exactly these bodies.
func TestAlertsMentionNoOne(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		send func(a *queue.Alerter)
		want string
	}{
		{
			name: "dead letter",
			send: func(a *queue.Alerter) { a.Notify("webhooks:deliver", "t1", "answered "+hostile+"\n@here `x` & more") },
			want: `{"content":"mailroom: 1 task(s) moved to the dead-letter archive\n• webhooks:deliver: 1\nNewest: webhooks:deliver t1: ` +
				"`answered 500 @\u200beveryone <!channel> urgent: re-enter the admin password at https://phish.example/login @\u200bhere 'x' & more`" +
				`\nhttps://mail.example/admin/deadletters","text":"mailroom: 1 task(s) moved to the dead-letter archive\n• webhooks:deliver: 1\nNewest: webhooks:deliver t1: ` +
				"`answered 500 @\u200beveryone &lt;!channel&gt; urgent: re-enter the admin password at https://phish.example/login @\u200bhere 'x' &amp; more`" +
				`\nhttps://mail.example/admin/deadletters","allowed_mentions":{"parse":[]}}`,
		},
		{
			name: "notice",
			send: func(a *queue.Alerter) { a.Notice("sheets form", "f1", hostile+" <@U024BE7LH> @Channel") },
			want: `{"content":"mailroom: 1 sheets form(s) need attention\nNewest: sheets form f1: ` +
				"`" + `500 @` + "\u200b" + `everyone <!channel> urgent: re-enter the admin password at https://phish.example/login <@U024BE7LH> @` + "\u200b" + "Channel`" +
				`\nhttps://mail.example/admin/forms","text":"mailroom: 1 sheets form(s) need attention\nNewest: sheets form f1: ` +
				"`" + `500 @` + "\u200b" + `everyone &lt;!channel&gt; urgent: re-enter the admin password at https://phish.example/login &lt;@U024BE7LH&gt; @` + "\u200b" + "Channel`" +
				`\nhttps://mail.example/admin/forms","allowed_mentions":{"parse":[]}}`,
		},
		{
			name: "raised, with a quote longer than 200 bytes",
			send: func(a *queue.Alerter) { a.Raise("a receiver said " + queue.Quote(hostile+strings.Repeat(" spam", 40))) },
			want: `{"content":"mailroom: a receiver said ` +
				"`500 @\u200beveryone <!channel> urgent: re-enter the admin password at https://phish.example/login" + strings.Repeat(" spam", 21) + " spa…`" +
				`","text":"mailroom: a receiver said ` +
				"`500 @\u200beveryone &lt;!channel&gt; urgent: re-enter the admin password at https://phish.example/login" + strings.Repeat(" spam", 21) + " spa…`" +
				`","allowed_mentions":{"parse":[]}}`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var bodies []string
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				raw, _ := io.ReadAll(r.Body)
				mu.Lock()
				bodies = append(bodies, string(raw))
				mu.Unlock()
				w.WriteHeader(http.StatusNoContent)
			}))
			defer hook.Close()
			alerts := queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL, Interval: time.Hour, PublicURL: "https://mail.example"})
			c.send(alerts)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			if err := alerts.Start(ctx); err != nil {
				t.Fatal(err)
			}
			go func() { <-ctx.Done(); _ = alerts.Stop(context.Background()); close(done) }()
			testkit.Eventually(t, 5*time.Second, "the alert", func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) == 1 })
			cancel()
			<-done
			mu.Lock()
			defer mu.Unlock()
			if diff := cmp.Diff(c.want, bodies[0]); diff != "" {
				t.Errorf("alert body (-want +got):\n%s", diff)
			}
		})
	}
}

// TestQuote: a quote is one line of at most 200 bytes, in a code span it
// cannot close, without control or bidi characters.
func TestQuote(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"":                         "(no text)",
		"plain":                    "`plain`",
		"two\nlines\r\n\tand tabs": "`two lines and tabs`",
		"close ` early":            "`close ' early`",
		"bidi \u202eevil\x00\x1b":  "`bidi evil`",
		"bad \xff byte":            "`bad byte`",
		strings.Repeat("é", 150):   "`" + strings.Repeat("é", 100) + "…`",
	} {
		if got := queue.Quote(in); got != want {
			t.Errorf("Quote(%q) = %q, want %q", in, got, want)
		}
	}
}
