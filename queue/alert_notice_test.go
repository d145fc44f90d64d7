package queue_test

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
)

// TestAlertNoticesAreGrouped: notices (forms waiting for a person) are
// grouped like dead letters: notices within one interval make one message
// with their count and the newest, with a link to the Forms page.
func TestAlertNoticesAreGrouped(t *testing.T) {
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	// Three notices and a dead letter before Run: one message for all.
	alerts.Notice("sheets form", "f1", "gone")
	alerts.Notice("sheets form", "f2", "unshared")
	alerts.Notify("sheets:flush", "t1", "boom")
	alerts.Notice("sheets form", "f3", "The spreadsheet is full")
	if err := alerts.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = alerts.Stop(context.Background()); close(done) }()
	testkit.Eventually(t, 5*time.Second, "one message", func() bool { mu.Lock(); defer mu.Unlock(); return len(bodies) == 1 })
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("%d messages, want 1", len(bodies))
	}
	var msg struct{ Content, Text string }
	if err := json.Unmarshal([]byte(bodies[0]), &msg); err != nil || msg.Content != msg.Text {
		t.Fatalf("body %q", bodies[0])
	}
	for _, want := range []string{"1 task(s) moved to the dead-letter archive", "3 sheets form(s) need attention", "f3: `The spreadsheet is full`", "https://mail.example/admin/forms"} {
		if !strings.Contains(msg.Content, want) {
			t.Errorf("message %q lacks %q", msg.Content, want)
		}
	}
}
