package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/queue/broker/brokertest"
	"mailroom/store"
	"mailroom/store/storetest"
)

// TestAlertsAreKeptUntilDelivered: the alert of a dead letter commits with
// it, survives an alerter that never sent it (a crash) and a webhook that
// refuses, and is sent by the next alerter over the same store, once.
func TestAlertsAreKeptUntilDelivered(t *testing.T) {
	var refuse atomic.Bool
	var mu sync.Mutex
	var delivered []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if refuse.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var msg struct{ Content string }
		_ = json.Unmarshal(raw, &msg)
		mu.Lock()
		delivered = append(delivered, msg.Content)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	db := storetest.Open(t)
	pending := func() int {
		n := 0
		_ = db.View(func(tx *store.Tx) error {
			p, err := tx.PendingAlerts()
			for _, a := range p {
				n += a.Count
			}
			return err
		})
		return n
	}

	// First run: the alerter never runs (the process dies before it sends).
	first := queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL, DB: db, Interval: 100 * time.Millisecond, Retries: 1})
	h := newHarnessOn(t, db, brokertest.Embedded(t), queue.Config{Alerts: first}, func(context.Context, *queue.Task) error {
		return queue.Permanent(errors.New("the mailbox is gone"))
	})
	h.enqueue(t, 3, struct{}{})
	testkit.Eventually(t, 10*time.Second, "3 dead letters", func() bool { return len(deadLetters(t, db)) == 3 })
	if n := pending(); n != 3 {
		t.Fatalf("%d alerts pending in the store, want 3 (one per dead letter, committed with it)", n)
	}
	if err := h.q.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// Second run, the webhook refusing: nothing is lost.
	refuse.Store(true)
	second := queue.NewAlerter(queue.AlertConfig{WebhookURL: hook.URL, DB: db, Interval: 100 * time.Millisecond, Retries: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := second.Start(ctx); err != nil {
		t.Fatal(err)
	}
	go func() { <-ctx.Done(); _ = second.Stop(context.Background()); close(done) }()
	testkit.Eventually(t, 10*time.Second, "a failed delivery", func() bool { _, failed := second.Sent(); return failed >= 1 })
	if n := pending(); n != 3 {
		t.Fatalf("%d alerts pending after a refused delivery, want 3", n)
	}
	// The webhook is back: the retry delivers them, once.
	refuse.Store(false)
	testkit.Eventually(t, 10*time.Second, "the delivery", func() bool { sent, _ := second.Sent(); return sent == 1 })
	testkit.Eventually(t, 5*time.Second, "nothing pending", func() bool { return pending() == 0 })
	time.Sleep(300 * time.Millisecond)
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 1 || !strings.Contains(delivered[0], "3 task(s)") || !strings.Contains(delivered[0], "the mailbox is gone") {
		t.Fatalf("delivered %q, want one message announcing the 3 dead letters", delivered)
	}
}
