package webhooks

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/store"
)

// deliveries reads a webhook's whole delivery log, newest first.
func (e *env) deliveries(id string) []store.Delivery {
	e.t.Helper()
	list, _, err := e.p.Deliveries(id, 0, 1000)
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

// TestDeliveryLogKeepsEveryAttempt: each attempt, failed or delivered, is
// in the webhook's log with its time, status, latency, the start of the
// answer (at most 1 KB), its error, its events and its number.
func TestDeliveryLogKeepsEveryAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	r := newReceiver(t)
	r.failBody = "upstream down: " + strings.Repeat("x", 3000)
	r.fail = func(n int) (int, string, time.Duration) {
		if n <= 2 {
			return http.StatusBadGateway, "", 0
		}
		return 0, "", 0
	}
	w := e.hook(r, CreateRequest{})
	start := time.Now()
	want := e.emit(7, "u1", store.EventFormState)
	waitFor(t, r, want)
	var log []store.Delivery
	testkit.Eventually(t, 10*time.Second, "three attempts in the log", func() bool {
		log = e.deliveries(w.ID)
		return len(log) == 3
	})
	for i, d := range log {
		if attempt := 3 - i; d.Attempt != attempt || d.Events != 7 || d.BatchID == "" || d.BatchID != log[0].BatchID || d.At.Before(start.Add(-time.Second)) || d.Latency <= 0 {
			t.Errorf("log[%d] = %+v, want attempt %d of the one batch of 7 events", i, d, attempt)
		}
	}
	if ok := log[0]; ok.Status != http.StatusNoContent || ok.Error != "" || ok.Response != "" {
		t.Errorf("the delivered attempt: %+v", ok)
	}
	for _, d := range log[1:] {
		if d.Status != http.StatusBadGateway || !strings.Contains(d.Error, "502") || len(d.Response) != store.DeliveryResponseMax || !strings.HasPrefix(d.Response, "upstream down: xxx") {
			t.Errorf("a failed attempt: status %d, error %q, %d bytes of answer", d.Status, d.Error, len(d.Response))
		}
	}
	if list, _, err := e.p.Deliveries("nope", 0, 10); !errors.Is(err, ErrNotFound) || len(list) != 0 {
		t.Errorf("the log of an unknown webhook: %v, %v", list, err)
	}
	// A deleted webhook's log goes with it.
	if err := e.p.Delete(w.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.db.View(func(tx *store.Tx) error {
		if list, _, err := tx.Deliveries(w.ID, 0, 10); err != nil || len(list) != 0 {
			t.Errorf("a deleted webhook's log: %v, %v", list, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestTestEventGoesToOneWebhook: a webhook.test event reaches the webhook
// it was sent to, whatever its types, signed and logged as any other, and
// no other webhook.
func TestTestEventGoesToOneWebhook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	r1, r2 := newReceiver(t), newReceiver(t)
	w1 := e.hook(r1, CreateRequest{Types: []string{store.EventFormState}})
	e.hook(r2, CreateRequest{})
	ev, err := e.p.SendTest(w1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != store.EventWebhookTest || string(ev.Data) != "{}" {
		t.Errorf("the test event: %+v", ev)
	}
	later := e.emit(1, "u1", store.EventFormState)
	waitFor(t, r1, append([]string{ev.ID()}, later...))
	waitFor(t, r2, later) // and not the test event before it
	if _, err := e.p.SendTest("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("a test to an unknown webhook: %v", err)
	}
	testkit.Eventually(t, 10*time.Second, "the test's delivery in the log", func() bool {
		log := e.deliveries(w1.ID)
		return len(log) > 0 && slices.ContainsFunc(log, func(d store.Delivery) bool { return d.Error == "" && d.Status == http.StatusNoContent })
	})
}

// TestReplaySince: a replay from a time delivers again the events since
// then; from before the oldest kept, every kept one.
func TestReplaySince(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowPrivate: true})
	r := newReceiver(t)
	w := e.hook(r, CreateRequest{})
	now := time.Now()
	var old, recent []string
	if err := e.db.Update(func(tx *store.Tx) error {
		for i := range 8 {
			at, ids := now.Add(-2*time.Hour), &old
			if i >= 5 {
				at, ids = now.Add(-time.Hour), &recent
			}
			ev, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u1", OccurredAt: at, Data: json.RawMessage(`{}`)})
			if err != nil {
				return err
			}
			*ids = append(*ids, ev.ID())
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(old), recent...)
	waitFor(t, r, all)
	if err := e.p.ReplaySince(w.ID, now.Add(-90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, append(slices.Clone(all), recent...))
	if err := e.p.ReplaySince(w.ID, now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, r, append(append(slices.Clone(all), recent...), all...))
	if err := e.p.ReplaySince("nope", now); !errors.Is(err, ErrNotFound) {
		t.Errorf("replay of an unknown webhook: %v", err)
	}
}
