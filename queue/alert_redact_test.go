package queue_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
)

// TestAlertFailureHidesWebhookURL: a webhook that cannot be reached gives
// Go's client error, which quotes the URL whose path is the webhook's
// secret; neither the logged error nor the one the setup page shows holds it.
func TestAlertFailureHidesWebhookURL(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	const secret = "T000/B000/XXXXsecretXXXXwebhook"
	var logs testkit.Buffer
	alerts := queue.NewAlerter(queue.AlertConfig{
		WebhookURL: "http://" + addr + "/services/" + secret, Retries: 1, Interval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	err = alerts.Test(context.Background())
	if err == nil {
		t.Fatal("a post to a closed port succeeded")
	}
	if strings.Contains(err.Error(), "XXXXsecretXXXX") {
		t.Errorf("the setup page's error holds the webhook secret: %v", err)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("the error no longer says where it failed: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := alerts.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = alerts.Stop(context.Background()); close(done) }()
	alerts.Notify("debug:record", "dl-1", "boom")
	testkit.Eventually(t, 10*time.Second, "the failed alert to be logged", func() bool { return strings.Contains(logs.String(), "not delivered") })
	cancel()
	<-done
	if out := logs.String(); strings.Contains(out, "XXXXsecretXXXX") {
		t.Errorf("the log holds the webhook secret:\n%s", out)
	}
}
