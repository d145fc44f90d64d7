package web

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func demoMailboxSample(at time.Time) demoMailboxView {
	box := DemoMailbox{Email: "ann@example.com", Note: "the demo's <work> mailbox", Messages: 120, Unread: 7, Trashed: 2, HistoryID: 1000123, WatchExpires: at}
	return demoMailboxView{
		Mailboxes: []DemoMailbox{box, {Email: "bob@example.com", Messages: 3}},
		Current:   box,
		Messages: []DemoMessage{
			{ID: "m1", ThreadID: "m1", From: "GitHub <noreply@github.example>", Subject: "[mailroom] PR #1", Snippet: "merged",
				Labels: []DemoLabel{{Name: "INBOX"}, {Name: "GitHub", User: true}}, Unread: true, Date: at},
			{ID: "m2", ThreadID: "m1", From: "Ann", Subject: "Re: <script>", Trashed: true, Date: at},
		},
		Total: 120, Page: 2, Pages: 3, PrevURL: "/admin/demo/mailbox?page=1", NextURL: "/admin/demo/mailbox?page=3",
	}
}

func demoSheetsSample(at time.Time) demoSheetsView {
	return demoSheetsView{Shown: 25, Sheets: []DemoSheet{
		{SpreadsheetID: "1abc", Title: "Event sign-ups", Sheet: "Responses", Owner: "ann@example.com", Columns: []string{"name", "email"}, Rows: 2,
			Newest: []DemoRow{{Number: 2, Cells: []string{at.Format(time.RFC3339), "Ada", "ada@example.org", "s2"}}, {Number: 1, Cells: []string{"x", "y", "z", "s1"}}}},
		{SpreadsheetID: "1def", Title: "Feedback", Sheet: "Sheet1", Owner: "bob@example.com", Columns: []string{"rating"}, Error: "no such sheet"},
	}}
}

func demoAlertsSample(at time.Time) demoAlertsView {
	return demoAlertsView{Alerts: []DemoAlert{{At: at, Text: "mailroom: 1 task(s) moved to the dead-letter archive\n• gmail:message-added: 1"}},
		Receiver: DemoReceiver{URL: "http://127.0.0.1:9/mailroom-demo-receiver", WebhookID: "w1", Deliveries: 3, Verified: 41, Refused: 1, Last: at}}
}

// fakeDemo is a DemoSource with one mailbox of n messages.
type fakeDemo struct{ n int }

func (f fakeDemo) DemoMailboxes() []DemoMailbox {
	return []DemoMailbox{{Email: "ann@example.com", Messages: f.n}, {Email: "bob@example.com"}}
}

func (f fakeDemo) DemoMessages(email string, offset, limit int) ([]DemoMessage, int) {
	if email != "ann@example.com" {
		return nil, 0
	}
	var out []DemoMessage
	for i := offset; i < min(f.n, offset+limit); i++ {
		out = append(out, DemoMessage{ID: fmt.Sprint(i), Subject: fmt.Sprintf("message %d", f.n-i), Labels: []DemoLabel{{Name: "Receipts", User: true}}})
	}
	return out, f.n
}

func (f fakeDemo) DemoSheets(rows int) []DemoSheet {
	return []DemoSheet{{Title: "Event sign-ups", Sheet: "Responses", Rows: 1, Newest: []DemoRow{{Number: 1, Cells: []string{"t", "Ada <ada@example.org>", "s1"}}}}}
}

func (f fakeDemo) DemoReceiver() DemoReceiver { return DemoReceiver{} }

func (f fakeDemo) DemoAlerts() []DemoAlert {
	return []DemoAlert{{At: time.Now(), Text: "dead <letter>"}}
}

func TestDemoPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{deps: func(d *Deps) {
		d.Demo = true
		d.DemoSource = fakeDemo{n: 120}
	}})
	s := login(t, e.h)
	cases := []struct {
		path   string
		status int
		want   []string
	}{
		{"/admin/demo", 200, []string{"message 120", "Receipts", "Page 1 of 3", "data-demo-live", "Older →", "Demo mailbox", "Demo sheets", "/static/demo.js"}},
		{"/admin/demo/mailbox?account=ann@example.com&page=3", 200, []string{"message 20", "Page 3 of 3", "← Newer"}},
		{"/admin/demo/mailbox?account=bob@example.com", 200, []string{"No messages on this page"}},
		{"/admin/demo/mailbox?account=carol@example.com", 404, []string{"carol@example.com"}},
		{"/admin/demo/mailbox?page=0", 400, []string{"page"}},
		{"/admin/demo/sheets", 200, []string{"Event sign-ups", "Ada &lt;ada@example.org&gt;", "data-demo-live"}},
		{"/admin/demo/alerts", 200, []string{"dead &lt;letter&gt;"}},
	}
	for _, c := range cases {
		w := request(t, e.h, http.MethodGet, c.path, nil, s.headers())
		if w.Code != c.status {
			t.Errorf("GET %s: status %d, want %d", c.path, w.Code, c.status)
			continue
		}
		for _, want := range c.want {
			if !strings.Contains(w.Body.String(), want) {
				t.Errorf("GET %s: body lacks %q", c.path, want)
			}
		}
	}
	for path, active := range map[string]string{"/admin/demo/mailbox": "/admin/demo", "/admin/demo/alerts": "/admin/demo", "/admin/demo/sheets": "/admin/demo/sheets"} {
		w := request(t, e.h, http.MethodGet, path, nil, s.headers())
		if !strings.Contains(w.Body.String(), `<a href="`+active+`" class="active"`) {
			t.Errorf("GET %s: the nav entry %s is not the active one", path, active)
		}
	}
	if w := request(t, e.h, http.MethodGet, "/admin/demo/sheets", nil, nil); w.Code != http.StatusSeeOther && w.Code != http.StatusFound {
		t.Errorf("demo page without a session: status %d, want a redirect to the login", w.Code)
	}
	if w := request(t, e.h, http.MethodGet, "/static/demo.js", nil, nil); w.Code != http.StatusOK {
		t.Errorf("GET /static/demo.js: status %d", w.Code)
	}
}
