package web

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"mailroom/queue/webhooks"
)

func newWebhooksEnv(t *testing.T) *secEnv {
	t.Helper()
	return newSecEnv(t, func(d *Deps) {
		p, err := webhooks.New(webhooks.Config{}, webhooks.Deps{DB: d.DB, Queue: d.Queue})
		if err != nil {
			t.Fatal(err)
		}
		d.Webhooks = p
	})
}

type webhookAnswer struct {
	ID     string  `json:"id"`
	URL    string  `json:"url"`
	UserID *string `json:"userId"`
	Secret string  `json:"secret"`
}

// TestWebhooksAPI: registering, listing, reading, replaying and deleting
// webhooks, with a user token's reach and the bad inputs naming their
// field (every answer checked against the OpenAPI description).
func TestWebhooksAPI(t *testing.T) {
	t.Parallel()
	se := newWebhooksEnv(t)
	admin, alice, bob := bearer(se.adminToken), bearer(se.alice.token), bearer(se.bob.token)
	// Literal public addresses: no lookup, and not private.
	const url = "https://93.184.216.34/hook"

	w := request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": url, "types": []string{"message.added"}, "userId": se.alice.user}, admin)
	if w.Code != http.StatusCreated {
		t.Fatalf("admin create: %d %s", w.Code, w.Body)
	}
	made := decode[webhookAnswer](t, w)
	if !strings.HasPrefix(made.Secret, "whsec_") || made.UserID == nil || *made.UserID != se.alice.user {
		t.Errorf("created %+v", made)
	}
	// A user token's webhook is its own user's, whatever it names.
	w = request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": url + "2"}, alice)
	if w.Code != http.StatusCreated {
		t.Fatalf("alice create: %d %s", w.Code, w.Body)
	}
	if got := decode[webhookAnswer](t, w); got.UserID == nil || *got.UserID != se.alice.user {
		t.Errorf("alice's webhook belongs to %v", got.UserID)
	}
	if w := request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": url, "userId": se.bob.user}, alice); w.Code != http.StatusNotFound {
		t.Errorf("alice making bob's webhook: %d", w.Code)
	}
	for _, c := range []struct {
		body  map[string]any
		field string
	}{
		{map[string]any{"url": "http://93.184.216.34/hook"}, "url"},
		{map[string]any{"url": "https://10.0.0.8/hook"}, "url"},
		{map[string]any{"url": ""}, "url"},
		{map[string]any{"url": url, "types": []string{"message.added", "nope"}}, "types[1]"},
		{map[string]any{"url": url, "secret": "mine"}, "secret"},
	} {
		w := request(t, se.h, "POST", "/api/v1/webhooks", c.body, admin)
		if e := apiError(t, w); w.Code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("create %v: %d %+v, want 400 naming %s", c.body, w.Code, e, c.field)
		}
	}

	type list struct{ Webhooks []webhookAnswer }
	if got := decode[list](t, request(t, se.h, "GET", "/api/v1/webhooks", nil, alice)); len(got.Webhooks) != 2 || got.Webhooks[0].Secret != "" {
		t.Errorf("alice's list: %+v", got)
	}
	if got := decode[list](t, request(t, se.h, "GET", "/api/v1/webhooks", nil, bob)); len(got.Webhooks) != 0 {
		t.Errorf("bob's list: %+v", got)
	}
	if w := request(t, se.h, "GET", "/api/v1/webhooks/"+made.ID, nil, bob); w.Code != http.StatusNotFound {
		t.Errorf("bob reading alice's webhook: %d", w.Code)
	}
	if w := request(t, se.h, "GET", "/api/v1/webhooks/"+made.ID, nil, alice); w.Code != http.StatusOK {
		t.Errorf("alice reading hers: %d", w.Code)
	}
	if w := request(t, se.h, "POST", "/api/v1/webhooks/"+made.ID+"/replay", map[string]any{"after": "evt_1"}, alice); w.Code != http.StatusBadRequest || apiError(t, w).Field != "after" {
		t.Errorf("replay from a bad cursor: %d %s", w.Code, w.Body)
	}
	if w := request(t, se.h, "POST", "/api/v1/webhooks/"+made.ID+"/replay", map[string]any{"since": "2020-01-01T00:00:00Z"}, alice); w.Code != http.StatusAccepted {
		t.Errorf("replay: %d %s", w.Code, w.Body)
	}
	if w := request(t, se.h, "DELETE", "/api/v1/webhooks/"+made.ID, nil, bob); w.Code != http.StatusNotFound {
		t.Errorf("bob deleting alice's: %d", w.Code)
	}
	if w := request(t, se.h, "DELETE", "/api/v1/webhooks/"+made.ID, nil, alice); w.Code != http.StatusNoContent {
		t.Errorf("delete: %d", w.Code)
	}
	if w := request(t, se.h, "GET", "/api/v1/webhooks/"+made.ID, nil, admin); w.Code != http.StatusNotFound {
		t.Errorf("a deleted webhook: %d", w.Code)
	}

	// The admin page lists the one left, with its test button and a link
	// to its own page, which has the replay and the delivery log.
	s := login(t, se.h)
	w = request(t, se.h, "GET", "/admin/webhooks", nil, s.headers())
	if body := w.Body.String(); w.Code != http.StatusOK || !strings.Contains(body, url+"2") || !strings.Contains(body, "/test") || !strings.Contains(body, `href="/admin/webhooks/`) {
		t.Errorf("the Webhooks page: %d\n%s", w.Code, body)
	}

	// The forms' and dead letters' newer events are types a webhook takes.
	newer := []string{"form.created", "form.deleted", "deadletter.discarded"}
	w = request(t, se.h, "POST", "/api/v1/webhooks", map[string]any{"url": url + "3", "types": newer}, admin)
	if got := decode[struct{ Types []string }](t, w); w.Code != http.StatusCreated || !slices.Equal(got.Types, newer) {
		t.Errorf("a webhook of %v: %d %s", newer, w.Code, w.Body)
	}
}
