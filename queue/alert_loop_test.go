package queue_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
)

// The alerter is a loop: Stop returns only once what was pending is
// posted, so the dead letters of a shutdown are announced before the
// process ends, and a post under way when it stops is not cut.
func TestAlerterLoopPostsPendingBeforeStopReturns(t *testing.T) {
	t.Parallel()
	var posts atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A slow webhook that has the alert before it answers: Stop must
		// neither return before the answer nor cut a post under way.
		posts.Add(1)
		time.Sleep(100 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	alerts := queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL, Interval: time.Hour})
	if err := alerts.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A second Start does nothing and leaves the running loop alone.
	if err := alerts.Start(context.Background()); err != nil {
		t.Fatalf("second Start: %v, want nil", err)
	}
	alerts.Notify(typeRecord, "1", "first")
	testkit.Eventually(t, 5*time.Second, "the first alert", func() bool { return posts.Load() == 1 })
	// Within the interval: held back until the loop stops.
	alerts.Notify(typeRecord, "2", "second")
	if err := alerts.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := posts.Load(); n != 2 {
		t.Fatalf("%d alerts posted when Stop returned, want 2 (the pending one flushed)", n)
	}
	if sent, failed := alerts.Sent(); sent != 2 || failed != 0 {
		t.Fatalf("sent %d, failed %d; want 2, 0", sent, failed)
	}
	if err := alerts.Stop(context.Background()); err != nil { // a second Stop is a no-op
		t.Fatal(err)
	}
}
