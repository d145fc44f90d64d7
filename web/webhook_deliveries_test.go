package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"mailroom/store"
)

type deliveriesAnswer struct {
	Deliveries []struct {
		ID        string    `json:"id"`
		Attempt   int       `json:"attempt"`
		At        time.Time `json:"at"`
		Status    *int      `json:"status"`
		LatencyMs int64     `json:"latencyMs"`
		Events    int       `json:"events"`
		Response  string    `json:"response"`
		Error     string    `json:"error"`
	} `json:"deliveries"`
	Next string `json:"next"`
}

// TestWebhookDeliveriesAPI: the delivery log pages newest first, a test
// event goes to its webhook alone (in no feed), a replay takes after or
// since (one of them, a well-formed time), and a user token reaches only
// its user's webhooks (another's answers 404), every answer checked
// against the OpenAPI description.
func TestWebhookDeliveriesAPI(t *testing.T) {
	t.Parallel()
	se := newWebhooksEnv(t)
	admin, alice, bob := bearer(se.adminToken), bearer(se.alice.token), bearer(se.bob.token)
	w := request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": "https://93.184.216.34/hook"}, alice)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	hook := decode[webhookAnswer](t, w).ID
	path := "/api/v1/webhooks/" + hook

	// Five attempts, oldest first; the newest holds a long answer.
	at := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	if err := se.db.Update(func(tx *store.Tx) error {
		for i := range 5 {
			d := store.Delivery{WebhookID: hook, BatchID: "msg_1", Attempt: i + 1, At: at.Add(time.Duration(i) * time.Minute),
				Status: 503, Latency: 1500 * time.Millisecond, Events: 3, Response: "busy", Error: "answered 503"}
			if i == 4 {
				d.Status, d.Error, d.Response = 200, "", strings.Repeat("é", 1000)
			}
			if _, err := tx.DeliveryAppend(d); err != nil {
				return err
			}
		}
		// Another webhook's attempt is not in this one's log.
		_, err := tx.DeliveryAppend(store.Delivery{WebhookID: "other", Attempt: 1, At: at})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var attempts []int
	cursor := ""
	for page := 0; ; page++ {
		q := path + "/deliveries?limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		w := request(t, se.h, "GET", q, nil, alice)
		if w.Code != http.StatusOK {
			t.Fatalf("page %d: %d %s", page, w.Code, w.Body)
		}
		got := decode[deliveriesAnswer](t, w)
		for _, d := range got.Deliveries {
			attempts = append(attempts, d.Attempt)
		}
		if page == 0 {
			newest := got.Deliveries[0]
			if newest.Status == nil || *newest.Status != 200 || newest.Error != "" || newest.LatencyMs != 1500 || newest.Events != 3 || !newest.At.Equal(at.Add(4*time.Minute)) {
				t.Errorf("newest attempt: %+v", newest)
			}
			if len(newest.Response) > 1024 || !strings.HasPrefix(newest.Response, "éé") || strings.ContainsRune(newest.Response, '\uFFFD') {
				t.Errorf("response snippet: %d bytes, %q…", len(newest.Response), newest.Response[:10])
			}
		}
		if cursor = got.Next; cursor == "" {
			break
		}
	}
	if fmt.Sprint(attempts) != "[5 4 3 2 1]" {
		t.Errorf("attempts paged = %v, want [5 4 3 2 1]", attempts)
	}

	for _, c := range []struct {
		method, path string
		body         any
		code         int
		field        string
	}{
		{"GET", path + "/deliveries?limit=0", nil, 400, "limit"},
		{"GET", path + "/deliveries?limit=1001", nil, 400, "limit"},
		{"GET", path + "/deliveries?cursor=evt_1", nil, 400, "cursor"},
		{"POST", path + "/replay", map[string]any{}, 400, "since"},
		{"POST", path + "/replay", map[string]any{"after": store.EventCursor(0), "since": "2026-05-01T09:00:00Z"}, 400, "since"},
		{"POST", path + "/replay", map[string]any{"since": "yesterday"}, 400, "since"},
		{"POST", path + "/replay", map[string]any{"since": "2026-05-01"}, 400, "since"},
		{"POST", path + "/replay", map[string]any{"since": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, 400, "since"},
		{"POST", path + "/replay", map[string]any{"since": "2026-05-01T09:00:00+02:00"}, 202, ""},
		// Another user's webhook is not there for bob; for the admin it is.
		{"GET", path + "/deliveries", nil, 404, ""},
		{"POST", path + "/test", nil, 404, ""},
		{"POST", path + "/replay", map[string]any{"since": "2026-05-01T09:00:00Z"}, 404, ""},
		{"GET", "/api/v1/webhooks/nope/deliveries", nil, 404, ""},
		{"POST", "/api/v1/webhooks/nope/test", nil, 404, ""},
	} {
		who := alice
		if c.code == 404 {
			who = bob
		}
		w := request(t, se.h, c.method, c.path, c.body, who)
		if w.Code != c.code || (c.field != "" && apiError(t, w).Field != c.field) {
			t.Errorf("%s %s %v: %d %s, want %d naming %q", c.method, c.path, c.body, w.Code, w.Body, c.code, c.field)
		}
	}
	if w := request(t, se.h, "GET", path+"/deliveries", nil, admin); w.Code != http.StatusOK || len(decode[deliveriesAnswer](t, w).Deliveries) != 5 {
		t.Errorf("the admin's read: %d %s", w.Code, w.Body)
	}

	// A test event: 202, for this webhook only, in no feed.
	w = request(t, se.h, "POST", path+"/test", nil, alice)
	if w.Code != http.StatusAccepted {
		t.Fatalf("test: %d %s", w.Code, w.Body)
	}
	sent := decode[struct {
		EventID string `json:"eventId"`
	}](t, w).EventID
	var mine, other []store.Event
	if err := se.db.View(func(tx *store.Tx) error {
		hw, err := tx.WebhookGet(hook)
		if err != nil {
			return err
		}
		mine, _, err = tx.Events(hw.Query(hw.Cursor, 100))
		if err != nil {
			return err
		}
		everyone := store.Webhook{ID: "someone-else"}
		other, _, err = tx.Events(everyone.Query(0, 100))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var tests []store.Event
	for _, e := range mine {
		if e.Type == store.EventWebhookTest {
			tests = append(tests, e)
		}
	}
	if len(tests) != 1 || tests[0].ID() != sent || string(tests[0].Data) != "{}" || tests[0].UserID != se.alice.user {
		t.Errorf("the webhook's test events: %+v, want the one webhook.test %s", tests, sent)
	}
	for _, e := range other {
		if e.Type == store.EventWebhookTest {
			t.Errorf("another webhook takes the test event %s", e.ID())
		}
	}
	for _, who := range []map[string]string{admin, alice} {
		w := request(t, se.h, "GET", "/api/v1/events?limit=1000", nil, who)
		if w.Code != http.StatusOK || strings.Contains(w.Body.String(), store.EventWebhookTest) {
			t.Errorf("the feed shows the test event: %d %s", w.Code, w.Body)
		}
	}
}
