package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

type feedEvent struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	UserID    string          `json:"userId"`
	AccountID string          `json:"accountId"`
	FormID    string          `json:"formId"`
	Data      json.RawMessage `json:"data"`
}

// hookReceiver is a real HTTP receiver of webhooks that verifies every
// delivery's signature (Standard Webhooks' own library) and keeps the
// events in the order it took them.
type hookReceiver struct {
	t      *testing.T
	srv    *httptest.Server
	mu     sync.Mutex
	secret string
	events []feedEvent
	seen   map[string]bool // webhook-ids taken: a redelivered batch is taken once, as receivers dedupe
}

func newHookReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{t: t, seen: map[string]bool{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		wh, err := standardwebhooks.NewWebhook(r.secret)
		if err == nil {
			err = wh.Verify(body, req.Header)
		}
		if err != nil {
			r.t.Errorf("a delivery does not verify: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var b struct{ Events []feedEvent }
		if err := json.Unmarshal(body, &b); err != nil || len(b.Events) == 0 || len(b.Events) > 100 {
			r.t.Errorf("a delivery of %d events: %v", len(b.Events), err)
		}
		if id := req.Header.Get("webhook-id"); !r.seen[id] {
			r.seen[id] = true
			r.events = append(r.events, b.Events...)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *hookReceiver) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.ID)
	}
	return out
}

// feed reads every event of the query through GET /api/v1/events.
func feed(ta *apptest.App, query string) []feedEvent {
	ta.T().Helper()
	return feedAfter(ta, "", query)
}

// feedAfter reads every event of the query after the cursor after.
func feedAfter(ta *apptest.App, after, query string) []feedEvent {
	ta.T().Helper()
	var out []feedEvent
	for {
		var page struct {
			Events []feedEvent `json:"events"`
			Next   string      `json:"next"`
		}
		ta.JSON(http.MethodGet, "/api/v1/events?limit=1000&after="+url.QueryEscape(after)+query, nil, http.StatusOK, &page)
		out = append(out, page.Events...)
		if len(page.Events) == 0 {
			return out
		}
		after = page.Next
	}
}

func eventIDs(evs []feedEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ID)
	}
	return out
}

// TestEventsEndToEnd: a mailbox synced in full and then changed gives,
// over the feed and over a signed webhook alike, exactly its events in
// order: one message.added per message mirrored, and one event for each
// read, unread, trash, restore, delete and label change; the account's
// status changes too. Another user's token sees none of them.
func TestEventsEndToEnd(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, func(c *app.Config) { c.WebhookAllowPrivate = true }))
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 40, 7); err != nil {
		t.Fatal(err)
	}
	userID := createUser(ta, "owner@example.com")
	otherID := createUser(ta, "other@example.com")

	r := newHookReceiver(t)
	var hook struct{ ID, Secret string }
	ta.JSON(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": r.srv.URL + "/hook", "userId": userID}, http.StatusCreated, &hook)
	r.mu.Lock()
	r.secret = hook.Secret
	r.mu.Unlock()

	acc := connectAccount(ta, fake, userID, gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)

	// One of each change, on messages of the mailbox, then one push.
	msgs := fake.Gmail.Messages(gmailAddr)
	var unread, read []googlefake.Message
	for _, m := range msgs {
		if m.Trashed() {
			continue
		}
		if m.Unread() {
			unread = append(unread, m)
		} else {
			read = append(read, m)
		}
	}
	if len(unread) < 1 || len(read) < 4 {
		t.Fatalf("the mailbox has %d unread and %d read messages", len(unread), len(read))
	}
	g := fake.Gmail
	added, err := g.AddMessage(gmailAddr, googlefake.Message{From: "a@example.com", To: gmailAddr, Subject: "new one", LabelIDs: []string{googlefake.LabelInbox, googlefake.LabelUnread}})
	if err != nil {
		t.Fatal(err)
	}
	label, err := g.CreateLabel(gmailAddr, "Receipts")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		typ, msg string
		do       func(id string) error
	}{
		{"message.read", unread[0].ID, func(id string) error { return g.MarkRead(gmailAddr, id) }},
		{"message.unread", read[0].ID, func(id string) error { return g.MarkUnread(gmailAddr, id) }},
		{"message.trashed", read[1].ID, func(id string) error { return g.Trash(gmailAddr, id) }},
		{"message.deleted", read[2].ID, func(id string) error { return g.Delete(gmailAddr, id) }},
		{"message.labeled", read[3].ID, func(id string) error { return g.AddLabels(gmailAddr, id, label) }},
		// A later push: within one, the queues may run the restore before
		// the trash, and the mirror (whose changes the events are) would
		// never show the message trashed.
		{"message.restored", read[1].ID, func(id string) error { return g.Untrash(gmailAddr, id) }},
	}
	for i, s := range steps {
		if err := s.do(s.msg); err != nil {
			t.Fatal(err)
		}
		if i == len(steps)-2 || i == len(steps)-1 {
			if st := push(ta, fake, gmailAddr, g.HistoryID(gmailAddr)); st != http.StatusNoContent {
				t.Fatalf("push: %d", st)
			}
			waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)
		}
	}

	all := feed(ta, "&userId="+userID)
	// The mirror's messages each came once as message.added.
	addedIDs := map[string]int{}
	changes := map[string][]string{} // message id -> types of its other events, in order
	for _, e := range all {
		if e.UserID != userID {
			t.Errorf("event %s of user %s in user %s's feed", e.ID, e.UserID, userID)
		}
		var d struct {
			ID, MessageID string
			Added         []string
			By            string
		}
		_ = json.Unmarshal(e.Data, &d)
		switch e.Type {
		case "message.added":
			addedIDs[d.ID]++
		case "account.status":
		default:
			changes[d.MessageID] = append(changes[d.MessageID], e.Type)
			if e.Type == "message.labeled" && (!slices.Equal(d.Added, []string{"Receipts"}) || d.By != "gmail") {
				t.Errorf("message.labeled data %s", e.Data)
			}
		}
	}
	if len(addedIDs) != 40+1 || addedIDs[added] != 1 {
		t.Errorf("message.added for %d messages (the new one %d times), want each of 41 once", len(addedIDs), addedIDs[added])
	}
	for id, n := range addedIDs {
		if n != 1 {
			t.Errorf("message %s added %d times", id, n)
		}
	}
	want := map[string][]string{}
	for _, s := range steps {
		want[s.msg] = append(want[s.msg], s.typ)
	}
	for id, types := range want {
		if !slices.Equal(changes[id], types) {
			t.Errorf("message %s: events %v, want %v", id, changes[id], types)
		}
	}
	if len(changes) != len(want) {
		t.Errorf("events for %d messages changed, want %d: %v", len(changes), len(want), changes)
	}
	var statuses []string
	for _, e := range feed(ta, "&types=account.status&userId="+userID) {
		var d struct{ Status string }
		_ = json.Unmarshal(e.Data, &d)
		statuses = append(statuses, d.Status)
	}
	if !slices.Equal(statuses, []string{"syncing", "ready"}) {
		t.Errorf("account.status events %v, want syncing then ready", statuses)
	}

	// The webhook took the same events, in the same order.
	wantIDs := eventIDs(all)
	testkit.Eventually(t, 30*time.Second, fmt.Sprintf("the webhook to take %d events", len(wantIDs)), func() bool { return len(r.ids()) >= len(wantIDs) })
	if got := r.ids(); !slices.Equal(got, wantIDs) {
		t.Errorf("the webhook took %d events, the feed has %d; first difference at %d", len(got), len(wantIDs), firstDiff(got, wantIDs))
	}

	// Another user's token sees none of them, and not the webhook.
	var tok struct{ Token string }
	ta.JSON(http.MethodPost, "/api/v1/tokens", map[string]string{"name": "other", "userId": otherID}, http.StatusCreated, &tok)
	st, body := ta.DoWithToken(tok.Token, http.MethodGet, "/api/v1/events", nil)
	var page struct{ Events []feedEvent }
	if err := json.Unmarshal(body, &page); st != http.StatusOK || err != nil || len(page.Events) != 0 {
		t.Errorf("the other user's feed: %d %s", st, body)
	}
	if st, _ := ta.DoWithToken(tok.Token, http.MethodGet, "/api/v1/webhooks/"+hook.ID, nil); st != http.StatusNotFound {
		t.Errorf("the other user reading the webhook: %d, want 404", st)
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestEventsFormsAndDeadLetters: a form made, its rows written, its sheet
// deleted and replaced, a dead letter redriven and discarded, and the form
// deleted give exactly their events, in order, over the feed and over a webhook of every type and user.
func TestEventsFormsAndDeadLetters(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta, userID, accountID, book := sheetsApp(t, fake, func(cfg *app.Config) {
		cfg.SheetsRecheckMax = 2 * time.Second
		cfg.WebhookAllowPrivate = true
		cfg.DebugTasks = true
	})
	// The account's own sync done, only this test's changes follow.
	testkit.Eventually(t, 30*time.Second, "the account ready", func() bool { return account(ta, accountID).Status == "ready" })
	r := newHookReceiver(t)
	var hook struct{ Secret string }
	ta.JSON(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": r.srv.URL + "/hook"}, http.StatusCreated, &hook)
	r.mu.Lock()
	r.secret = hook.Secret
	r.mu.Unlock()
	var head struct{ Next string }
	ta.JSON(http.MethodGet, "/api/v1/events?after=now", nil, http.StatusOK, &head)

	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name"},
	}, http.StatusCreated, &f)
	submit := func(n int) []string {
		var ids []string
		for i := range n {
			var s struct{ ID string }
			ta.JSON(http.MethodPost, "/api/v1/forms/"+f.ID+"/submissions", map[string]any{"answers": map[string]any{"name": fmt.Sprint("n", i)}}, http.StatusAccepted, &s)
			ids = append(ids, s.ID)
		}
		return ids
	}
	first := submit(3)
	testkit.Eventually(t, 10*time.Second, "the first rows written", func() bool { return getForm(ta, f.ID).RowsWritten == 3 })
	if err := fake.Sheets.DeleteSpreadsheet(book); err != nil {
		t.Fatal(err)
	}
	second := submit(2)
	testkit.Eventually(t, 10*time.Second, "the form in error", func() bool { return getForm(ta, f.ID).State == "error" })
	fresh, err := fake.Sheets.CreateSpreadsheet("forms@example.com", "Fresh", "Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	ta.JSON(http.MethodPut, "/api/v1/forms/"+f.ID, map[string]any{"spreadsheetId": fresh, "sheet": "Sheet1"}, http.StatusOK, nil)
	testkit.Eventually(t, 10*time.Second, "the rows in the new sheet", func() bool { return getForm(ta, f.ID).RowsWritten == 5 })

	ta.JSON(http.MethodPost, "/api/v1/debug/tasks", map[string]any{"count": 1, "fail": "permanent"}, http.StatusAccepted, nil)
	var dead struct{ Deadletters []struct{ ID string } }
	testkit.Eventually(t, 10*time.Second, "a dead letter", func() bool {
		ta.JSON(http.MethodGet, "/api/v1/deadletters", nil, http.StatusOK, &dead)
		return len(dead.Deadletters) == 1
	})
	was := dead.Deadletters[0].ID
	ta.JSON(http.MethodPost, "/api/v1/deadletters/"+was+"/redrive", nil, http.StatusAccepted, nil)
	testkit.Eventually(t, 10*time.Second, "the redriven task dead again", func() bool {
		ta.JSON(http.MethodGet, "/api/v1/deadletters", nil, http.StatusOK, &dead)
		return len(dead.Deadletters) == 1 && dead.Deadletters[0].ID != was
	})
	ta.JSON(http.MethodDelete, "/api/v1/deadletters/"+dead.Deadletters[0].ID, nil, http.StatusNoContent, nil)
	ta.JSON(http.MethodDelete, "/api/v1/forms/"+f.ID, nil, http.StatusNoContent, nil)

	evs := feedAfter(ta, head.Next, "")
	var got []string
	var rowsOf [][]string // the submission ids of each entry of got (rows_written)
	for _, e := range evs {
		var d struct {
			ID, Type, State string
			SubmissionIDs   []string
			FirstRow        int
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case "form.rows_written":
			// Rows written in a row are one step, however many flushes
			// they took (a slow submit can straddle the flush delay).
			ids := d.SubmissionIDs
			if n := len(got); n > 0 && len(rowsOf[n-1]) > 0 {
				ids = slices.Concat(rowsOf[n-1], ids)
				got, rowsOf = got[:n-1], rowsOf[:n-1]
			}
			got = append(got, fmt.Sprintf("%s %v", e.Type, ids))
			rowsOf = append(rowsOf, ids)
		case "form.state":
			got = append(got, e.Type+" "+d.State)
			rowsOf = append(rowsOf, nil)
		case "form.created", "form.deleted":
			got = append(got, e.Type)
			rowsOf = append(rowsOf, nil)
		case "deadletter.added", "deadletter.redriven", "deadletter.discarded":
			got = append(got, e.Type+" "+d.Type)
			rowsOf = append(rowsOf, nil)
		}
		// The debug task's dead letters are work of no user's.
		if !strings.HasPrefix(e.Type, "deadletter.") && (e.UserID != userID || e.FormID != f.ID) {
			t.Errorf("event %s %s: user %q form %q", e.ID, e.Type, e.UserID, e.FormID)
		}
	}
	want := []string{
		"form.created",
		fmt.Sprintf("form.rows_written %v", first),
		"form.state error",
		"form.state ok",
		fmt.Sprintf("form.rows_written %v", second),
		"deadletter.added debug:record",
		"deadletter.redriven debug:record",
		"deadletter.added debug:record",
		"deadletter.discarded debug:record",
		"form.deleted",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n got %q\nwant %q", got, want)
	}
	wantIDs := eventIDs(evs)
	testkit.Eventually(t, 30*time.Second, "the webhook to take the feed's events", func() bool { return len(r.ids()) >= len(wantIDs) })
	if ids := r.ids(); !slices.Equal(ids, wantIDs) {
		t.Errorf("the webhook took %d events, the feed has %d; first difference at %d", len(ids), len(wantIDs), firstDiff(ids, wantIDs))
	}
}
