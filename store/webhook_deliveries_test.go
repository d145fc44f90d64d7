package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mailroom/store"
	"mailroom/store/storetest"
)

// TestEventsBefore: the position before the first event at or after a
// time, found by halves; from the oldest kept once older ones are pruned.
func TestEventsBefore(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	t0 := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	if err := db.Update(func(tx *store.Tx) error {
		for i := range 10 {
			if _, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "u1", OccurredAt: t0.Add(time.Duration(i) * time.Minute)}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := func(at time.Time) uint64 {
		t.Helper()
		var pos uint64
		if err := db.View(func(tx *store.Tx) (err error) { pos, err = tx.EventsBefore(at); return err }); err != nil {
			t.Fatal(err)
		}
		return pos
	}
	for _, c := range []struct {
		at   time.Time
		want uint64
	}{
		{t0.Add(-time.Hour), 0}, {t0, 0}, {t0.Add(time.Second), 1}, {t0.Add(5 * time.Minute), 5},
		{t0.Add(5*time.Minute + 30*time.Second), 6}, {t0.Add(9 * time.Minute), 9}, {t0.Add(time.Hour), 10},
	} {
		if got := before(c.at); got != c.want {
			t.Errorf("EventsBefore(%s) = %d, want %d", c.at.Format(time.Kitchen), got, c.want)
		}
	}
	if _, err := db.EventsPrune(t0.Add(3*time.Minute), 100); err != nil {
		t.Fatal(err)
	}
	if got := before(t0.Add(-time.Hour)); got != 3 {
		t.Errorf("after pruning three, EventsBefore(long ago) = %d, want 3", got)
	}
	if got := before(t0.Add(5 * time.Minute)); got != 5 {
		t.Errorf("after pruning, EventsBefore(t0+5m) = %d, want 5", got)
	}
}

// TestDeliveryLog: attempts page newest first per webhook, their answer
// is cut to 1 KB of whole characters, and they are pruned by time.
func TestDeliveryLog(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	t0 := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	if err := db.Update(func(tx *store.Tx) error {
		for i := range 7 {
			for _, hook := range []string{"w1", "w2"} {
				d := store.Delivery{WebhookID: hook, Attempt: i + 1, At: t0.Add(time.Duration(i) * time.Minute), Response: strings.Repeat("€", 500)}
				if _, err := tx.DeliveryAppend(d); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pages := func(hook string, limit int) [][]int {
		t.Helper()
		var out [][]int
		var before uint64
		for {
			var list []store.Delivery
			var next uint64
			if err := db.View(func(tx *store.Tx) (err error) { list, next, err = tx.Deliveries(hook, before, limit); return err }); err != nil {
				t.Fatal(err)
			}
			var page []int
			for _, d := range list {
				page = append(page, d.Attempt)
				if d.WebhookID != hook || len(d.Response) > store.DeliveryResponseMax || len(d.Response) < store.DeliveryResponseMax-2 || strings.ContainsRune(d.Response, '\uFFFD') {
					t.Errorf("attempt %d of %s: webhook %s, %d bytes of answer", d.Attempt, hook, d.WebhookID, len(d.Response))
				}
			}
			out = append(out, page)
			if next == 0 {
				return out
			}
			seq, ok := store.ParseDeliveryCursor(store.DeliveryCursor(next))
			if !ok || seq != next {
				t.Fatalf("cursor of %d reads %d, %v", next, seq, ok)
			}
			before = next
		}
	}
	for _, hook := range []string{"w1", "w2"} {
		if got := pages(hook, 3); len(got) != 3 || !equalInts(got[0], 7, 6, 5) || !equalInts(got[1], 4, 3, 2) || !equalInts(got[2], 1) {
			t.Errorf("%s by threes: %v, want [7 6 5] [4 3 2] [1]", hook, got)
		}
	}
	if got := pages("w3", 3); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("a webhook with no attempts: %v", got)
	}
	// Pruned by time, a few per call.
	total := 0
	for {
		n, err := db.DeliveriesPrune(t0.Add(4*time.Minute), 3)
		if err != nil {
			t.Fatal(err)
		}
		if total += n; n < 3 {
			break
		}
	}
	if total != 8 {
		t.Errorf("pruned %d attempts, want the 8 before 09:04", total)
	}
	if got := pages("w1", 10); len(got) != 1 || !equalInts(got[0], 7, 6, 5) {
		t.Errorf("w1 after pruning: %v, want [7 6 5]", got)
	}
	if _, err := store.ParseDeliveryCursor("evt_x"); err {
		t.Error("a foreign cursor was read")
	}
}

func equalInts(got []int, want ...int) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// TestEventForOneWebhookHidesItsTarget: the webhook an event is for is
// stored, but not in the event's public JSON.
func TestEventForOneWebhookHidesItsTarget(t *testing.T) {
	t.Parallel()
	db := storetest.Open(t)
	var e store.Event
	if err := db.Update(func(tx *store.Tx) (err error) {
		e, err = tx.EventAppend(store.Event{Type: store.EventWebhookTest, ForWebhook: "w1"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(e)
	if err != nil || strings.Contains(string(raw), "w1") || !strings.Contains(string(raw), `"data":{}`) {
		t.Errorf("public JSON %s, %v", raw, err)
	}
	w1, w2 := store.Webhook{ID: "w1"}, store.Webhook{ID: "w2"}
	if err := db.View(func(tx *store.Tx) error {
		for _, c := range []struct {
			q    store.EventQuery
			want int
		}{{w1.Query(0, 10), 1}, {w2.Query(0, 10), 0}, {store.EventQuery{Limit: 10}, 0}} {
			got, _, err := tx.Events(c.q)
			if err != nil || len(got) != c.want {
				t.Errorf("query for %q: %d events, %v; want %d", c.q.Webhook, len(got), err, c.want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
