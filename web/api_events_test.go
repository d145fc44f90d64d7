package web

import (
	"net/http"
	"testing"
	"time"

	"mailroom/store"
)

type eventsAnswer struct {
	Events []struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		UserID    string `json:"userId"`
		AccountID string `json:"accountId"`
	} `json:"events"`
	Next string `json:"next"`
}

// TestEventsFeed: the feed's answers, its filters, a user token's reach,
// its bad inputs, the long poll and an expired cursor.
func TestEventsFeed(t *testing.T) {
	t.Parallel()
	se := newSecEnv(t, nil)
	admin, alice := bearer(se.adminToken), bearer(se.alice.token)
	get := func(path string, headers map[string]string) eventsAnswer {
		t.Helper()
		w := request(t, se.h, "GET", path, nil, headers)
		if w.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, w.Code, w.Body)
		}
		return decode[eventsAnswer](t, w)
	}

	// Each tenant's account, message and form are events of theirs.
	all := get("/api/v1/events", admin)
	if len(all.Events) < 6 {
		t.Fatalf("the admin sees %d events, want each tenant's account.status, message.added and form.created", len(all.Events))
	}
	mine := get("/api/v1/events", alice)
	if len(mine.Events) != 3 {
		t.Fatalf("alice sees %d events, want 3: %+v", len(mine.Events), mine.Events)
	}
	for _, e := range mine.Events {
		if e.UserID != se.alice.user {
			t.Errorf("alice sees an event of user %s", e.UserID)
		}
	}
	if got := get("/api/v1/events?types=message.added&userId="+se.bob.user, admin); len(got.Events) != 1 || got.Events[0].AccountID != se.bob.account {
		t.Errorf("bob's message.added: %+v", got.Events)
	}
	// A page of one continues where it stopped.
	first := get("/api/v1/events?limit=1", admin)
	second := get("/api/v1/events?limit=1&after="+first.Next, admin)
	if len(first.Events) != 1 || len(second.Events) != 1 || first.Events[0].ID == second.Events[0].ID || second.Events[0].ID != all.Events[1].ID {
		t.Errorf("pages of one: %+v then %+v", first.Events, second.Events)
	}

	for _, c := range []struct{ path, field string }{
		{"/api/v1/events?after=evt_1", "after"},
		{"/api/v1/events?types=message.added,message.nope", "types"},
		{"/api/v1/events?limit=0", "limit"},
		{"/api/v1/events?limit=1001", "limit"},
		{"/api/v1/events?wait=31s", "wait"},
		{"/api/v1/events?wait=soon", "wait"},
	} {
		w := request(t, se.h, "GET", c.path, nil, admin)
		if e := apiError(t, w); w.Code != http.StatusBadRequest || e.Field != c.field {
			t.Errorf("GET %s: %d %+v, want 400 naming %s", c.path, w.Code, e, c.field)
		}
	}
	if w := request(t, se.h, "GET", "/api/v1/events?userId="+se.bob.user, nil, alice); w.Code != http.StatusNotFound {
		t.Errorf("alice asking for bob's events: %d, want 404", w.Code)
	}

	// The long poll answers when an event arrives, with it.
	now := get("/api/v1/events?after=now&wait=0s", alice)
	if len(now.Events) != 0 {
		t.Fatalf("after=now gave %d events", len(now.Events))
	}
	go func() {
		time.Sleep(200 * time.Millisecond) // the request below is waiting by then
		_ = se.db.Update(func(tx *store.Tx) error {
			a, err := tx.AccountGet(se.alice.account)
			if err != nil {
				return err
			}
			a.Status, a.StatusReason = store.AccountError, "test"
			return tx.AccountPut(a)
		})
	}()
	start := time.Now()
	woke := get("/api/v1/events?wait=20s&after="+now.Next, alice)
	if len(woke.Events) != 1 || woke.Events[0].Type != store.EventAccountStatus {
		t.Fatalf("the long poll answered %+v, want alice's account.status", woke.Events)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the long poll took %s to answer an event made after 200ms", took)
	}
	if empty := get("/api/v1/events?wait=100ms&after="+woke.Next, alice); len(empty.Events) != 0 || empty.Next != woke.Next {
		t.Errorf("a wait with nothing new: %+v", empty)
	}

	// Pruned past the cursor: 410.
	if _, err := se.db.EventsPrune(time.Now().Add(time.Hour), 3); err != nil {
		t.Fatal(err)
	}
	w := request(t, se.h, "GET", "/api/v1/events?after="+first.Next, nil, admin)
	if e := apiError(t, w); w.Code != http.StatusGone || e.Code != "cursor_expired" {
		t.Errorf("an expired cursor: %d %+v, want 410 cursor_expired", w.Code, e)
	}
}
