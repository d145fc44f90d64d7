package app_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/testkit"
)

// feedOf reads a process's feed of one user, every page.
func (p *proc) feedOf(userID string) []feedEvent {
	p.t.Helper()
	var out []feedEvent
	after := ""
	for {
		var page struct {
			Events []feedEvent `json:"events"`
			Next   string      `json:"next"`
		}
		p.call(http.MethodGet, "/api/v1/events?limit=1000&userId="+userID+"&after="+url.QueryEscape(after), nil, http.StatusOK, &page)
		out = append(out, page.Events...)
		if len(page.Events) == 0 {
			return out
		}
		after = page.Next
	}
}

// replayed is a message's state as its events tell it.
type replayed struct {
	added, deleted  int
	unread, trashed bool
}

// replay folds the message events of a feed into each message's state.
func replay(t *testing.T, evs []feedEvent) map[string]*replayed {
	t.Helper()
	out := map[string]*replayed{}
	get := func(id string) *replayed {
		if out[id] == nil {
			out[id] = &replayed{}
		}
		return out[id]
	}
	for _, e := range evs {
		var d struct {
			ID, MessageID   string
			Unread, Trashed bool
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatalf("event %s: %v", e.ID, err)
		}
		switch e.Type {
		case "message.added":
			m := get(d.ID)
			m.added++
			m.unread, m.trashed = d.Unread, d.Trashed
		case "message.read":
			get(d.MessageID).unread = false
		case "message.unread":
			get(d.MessageID).unread = true
		case "message.trashed":
			get(d.MessageID).trashed = true
		case "message.restored":
			get(d.MessageID).trashed = false
		case "message.deleted":
			get(d.MessageID).deleted++
		}
	}
	return out
}

// TestEventsSurviveKill9 kills the binary with SIGKILL while it syncs
// 2,000 history records and delivers their events to a webhook, restarts
// it, and checks, once the mirror has converged, that the events tell the
// mirror exactly (no change without its event, no event without its
// change: each message added once, its read and trash state as the events
// leave it, each deleted one deleted once) and that the webhook received
// the feed's events, every one, in the feed's order.
func TestEventsSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	t.Parallel()
	r := newHookReceiver(t)
	k := killMidSync(t, []string{"MAILROOM_WEBHOOK_ALLOW_PRIVATE=true"}, 2000, 400, func(p *proc, userID string) {
		var hook struct{ Secret string }
		p.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": r.srv.URL + "/hook", "userId": userID}, http.StatusCreated, &hook)
		r.mu.Lock()
		r.secret = hook.Secret
		r.mu.Unlock()
	})
	fake, acc, to := k.fake, k.acc, k.to
	t.Logf("%d events delivered at the kill", len(r.ids()))

	fake.ClearFaults()
	p := startProc(t, k.dir, k.env...)
	testkit.EventuallyNil(t, 60*time.Second, "the mirror to converge", func() error {
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &a)
		if diff := cmp.Diff(mailbox(fake, gmailAddr), p.mirror(acc.ID)); diff != "" || a.HistoryID != strconv.FormatUint(to, 10) {
			return fmt.Errorf("watermark %s of %d", a.HistoryID, to)
		}
		return nil
	})

	evs := p.feedOf(k.userID)
	state := replay(t, evs)
	mirror := p.mirror(acc.ID)
	for id, m := range mirror {
		s := state[id]
		if s == nil || s.added != 1 || s.deleted != 0 || s.unread != m.Unread || s.trashed != m.Trashed {
			t.Errorf("message %s (unread %v, trashed %v): its events say %+v", id, m.Unread, m.Trashed, s)
		}
	}
	for id, s := range state {
		if _, listed := mirror[id]; !listed && (s.added != 1 || s.deleted != 1) {
			t.Errorf("message %s is not in the mirror; its events say %+v", id, s)
		}
	}
	want := eventIDs(evs)
	testkit.Eventually(t, 60*time.Second, fmt.Sprintf("the webhook to take the feed's %d events", len(want)), func() bool { return len(r.ids()) >= len(want) })
	if got := r.ids(); !slices.Equal(got, want) {
		t.Errorf("the webhook took %d events, the feed has %d; first difference at %d", len(got), len(want), firstDiff(got, want))
	}
}
