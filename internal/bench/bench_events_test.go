package bench

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"mailroom/internal/googlefake"
)

// TestBenchEventsQuick runs the events scenario in its quick form, so it
// never rots, and checks that it measured a capacity on each broker with
// every POST verified and no event counted twice.
func TestBenchEventsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the events scenario")
	}
	s, err := Choose([]string{"events"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s[0].Run(context.Background(), Options{Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	capacities := 0
	for _, m := range r.Metrics {
		t.Logf("%s = %.1f %s", m.Name, m.Value, m.Unit)
		switch {
		case strings.HasPrefix(m.Name, "duplicate"), strings.HasPrefix(m.Name, "Google quota refusals"):
			continue // zero is the good answer
		case strings.HasPrefix(m.Name, "most events/s"):
			capacities++
		}
		if m.Value <= 0 {
			t.Errorf("%s = %v: nothing measured", m.Name, m.Value)
		}
	}
	if capacities < 2 {
		t.Errorf("%d capacity figures, want at least the embedded broker's two phases", capacities)
	}
	for _, n := range r.Notes {
		t.Log(n)
	}
}

// signedPost is a delivery of body to path, signed with secret as mailroom
// signs one.
func signedPost(t *testing.T, secret, path, msgID string, body []byte) *http.Request {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sig, err := wh.Sign(msgID, now, body)
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	return req
}

// TestHookReceiverAccounting checks the receiver's honesty: an event a
// webhook receives twice counts once (and once as a duplicate), the same
// event at another webhook counts for that one, and a POST whose
// signature does not verify is refused and fails the run's check.
func TestHookReceiverAccounting(t *testing.T) {
	const secret, other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGhlIG90aGVyIHdlYmhvb2sncyBzZWNyZXQ="
	h := newHookReceiver()
	for name, s := range map[string]string{"a": secret, "b": other} {
		if err := h.register(name, func() (string, error) { return s, nil }); err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(`{"events":[{"id":"evt_1","type":"message.added","occurredAt":"2026-01-02T03:04:05Z","userId":"u","accountId":"acc","data":{"id":"m1"}}]}`)
	for i, req := range []*http.Request{
		signedPost(t, secret, "/hook/a", "msg_1", body),
		signedPost(t, secret, "/hook/a", "msg_1", body), // a retry of the same batch
		signedPost(t, other, "/hook/b", "msg_2", body),
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusNoContent {
			t.Fatalf("POST %d: %d %s, want 204", i, w.Code, w.Body)
		}
	}
	got, dups, posts := h.deliveries()
	if len(got) != 2 || dups != 1 || posts != 3 {
		t.Fatalf("%d deliveries, %d duplicates, %d POSTs; want 2 (one per webhook), 1, 3", len(got), dups, posts)
	}
	if keys := changeKeys(got[0]); len(keys) != 1 || keys[0] != "added/acc/m1" {
		t.Errorf("keys %q, want [added/acc/m1]", keys)
	}
	if err := h.check(); err != nil {
		t.Fatalf("check after good POSTs: %v", err)
	}

	// Signed with another webhook's secret: refused, and the run fails.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, signedPost(t, other, "/hook/a", "msg_3", body))
	if w.Code != http.StatusUnauthorized {
		t.Errorf("mis-signed POST: %d, want 401", w.Code)
	}
	// A body changed after signing: refused too.
	req := signedPost(t, secret, "/hook/a", "msg_4", body)
	req.Body = http.NoBody
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if w.Code != http.StatusUnauthorized {
		t.Errorf("tampered POST: %d, want 401", w.Code)
	}
	if got, _, _ := h.deliveries(); len(got) != 2 {
		t.Errorf("%d deliveries after refused POSTs, want still 2", len(got))
	}
	if err := h.check(); err == nil || !strings.Contains(err.Error(), "2 POSTs") {
		t.Errorf("check after bad signatures: %v, want an error naming 2 refused POSTs", err)
	}
}

// TestEventsTallyCountsOnce checks the tally over a receiver: a change
// counts complete once every webhook that takes it has it, a duplicate
// does not complete it, and a step is late until then.
func TestEventsTallyCountsOnce(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	h := newHookReceiver()
	for _, name := range []string{"a", "b"} {
		if err := h.register(name, func() (string, error) { return secret, nil }); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	log := &changeLog{byKey: map[string]eventChange{}}
	log.add("added/acc/m1", eventChange{at: start, step: 0})
	tally := newEventsTally(h, log, func(string, time.Time) int { return 2 }, func(time.Time) int { return 0 })
	step := eventsStep{id: 0, from: start, to: start.Add(time.Second), changes: 1}
	body := []byte(`{"events":[{"id":"evt_1","type":"message.added","occurredAt":"2026-01-02T03:04:05Z","userId":"u","accountId":"acc","data":{"id":"m1"}}]}`)
	for range 2 { // webhook a twice: a duplicate, not webhook b's copy
		h.ServeHTTP(httptest.NewRecorder(), signedPost(t, secret, "/hook/a", "msg_1", body))
	}
	tally.judge(&step)
	if step.ok || step.delivered != 0 || tally.drained() {
		t.Fatalf("one webhook of two (and a duplicate): step ok %v, delivered %v, drained %v; want late, 0, not drained", step.ok, step.delivered, tally.drained())
	}
	h.ServeHTTP(httptest.NewRecorder(), signedPost(t, secret, "/hook/b", "msg_2", body))
	tally.judge(&step)
	if !step.ok || step.delivered != 1 || !tally.drained() {
		t.Fatalf("both webhooks: step ok %v, delivered %v/s, drained %v; want ok, 1/s, drained", step.ok, step.delivered, tally.drained())
	}
}

// TestRampWithoutALateStepIsAFloor: a ramp whose steps all kept up has not
// found the capacity, and says so; one that ended on a late step has.
func TestRampWithoutALateStepIsAFloor(t *testing.T) {
	var kept eventsPhase
	kept.add(eventsStep{asked: 100, offered: 100, delivered: 100, ok: true})
	kept.add(eventsStep{asked: 150, offered: 150, delivered: 150, ok: true})
	if !kept.unbounded || kept.best != 150 {
		t.Errorf("all steps kept up: unbounded %v, best %v; want a floor of 150", kept.unbounded, kept.best)
	}
	var late eventsPhase
	late.add(eventsStep{asked: 100, offered: 100, delivered: 100, ok: true})
	late.add(eventsStep{asked: 150, offered: 150, ok: false})
	if late.unbounded || late.best != 100 {
		t.Errorf("a late last step: unbounded %v, best %v; want the capacity 100", late.unbounded, late.best)
	}
}

// TestHookReceiverTakeForgets: deliveries taken are no longer held by
// the receiver (it runs in the measured process), and an event taken
// still counts as a duplicate when it comes again.
func TestHookReceiverTakeForgets(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	h := newHookReceiver()
	if err := h.register("a", func() (string, error) { return secret, nil }); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"events":[{"id":"evt_1","type":"message.added","occurredAt":"2026-01-02T03:04:05Z","userId":"u","accountId":"acc","data":{"id":"m1"}}]}`)
	post := func(msgID string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, signedPost(t, secret, "/hook/a", msgID, body))
		if w.Code != http.StatusNoContent {
			t.Fatalf("POST: %d %s, want 204", w.Code, w.Body)
		}
	}
	post("msg_1")
	if got := h.take(); len(got) != 1 || got[0].id != "evt_1" {
		t.Fatalf("take: %v, want evt_1", got)
	}
	if got, _, _ := h.deliveries(); len(got) != 0 {
		t.Errorf("the receiver still holds %d deliveries after take", len(got))
	}
	post("msg_2") // the same event again
	if got, dups, _ := h.deliveries(); len(got) != 0 || dups != 1 {
		t.Errorf("%d deliveries, %d duplicates after a repeat, want 0 and 1", len(got), dups)
	}
}

// TestMailboxChangerLabelsOnlyTheFirstMailbox: the label rounds go over
// the messages the mailbox had when the changer was made, never one it
// added since (whose label would be reported in its message.added, not
// under its own key), so every change keeps an event of its own.
func TestMailboxChangerLabelsOnlyTheFirstMailbox(t *testing.T) {
	fake := googlefake.StartForTest(t, googlefake.Options{})
	const email = "ann@example.com"
	fake.AddAccount(email)
	gen := googlefake.NewGenerator(1, time.Time{})
	if _, err := gen.Add(fake.Gmail, email, 10); err != nil {
		t.Fatal(err)
	}
	m, err := newMailboxChanger(fake.Gmail, email, 20)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]bool{}
	for _, msg := range fake.Gmail.Messages(email) {
		first[msg.ID] = true
	}
	log := &changeLog{byKey: map[string]eventChange{}}
	for range 120 { // two new messages, past a round's end more than once
		if err := m.change(fake.Gmail, gen, log, 0); err != nil {
			t.Fatal(err)
		}
	}
	added := 0
	for key := range log.byKey {
		parts := strings.Split(key, "/")
		switch parts[0] {
		case "added":
			added++
		case "labeled":
			if !first[parts[2]] {
				t.Errorf("change %s labels a message the changer added", key)
			}
		}
	}
	if added != 2 {
		t.Errorf("%d new messages, want 2", added)
	}
}
