package demo

import (
	"slices"

	"mailroom/internal/googlefake"
	"mailroom/web"
)

// demoSource shows the emulator on the demo pages.
type demoSource struct{ d *demo }

var _ web.DemoSource = demoSource{}

// mailboxOrder is the demo accounts first, then any other account the
// emulator knows (made by the consent flow, for instance).
func (s demoSource) mailboxOrder() ([]string, map[string]string) {
	var emails []string
	notes := map[string]string{}
	for _, a := range demoAccounts {
		emails = append(emails, a.Email)
		notes[a.Email] = a.Note
	}
	for _, e := range s.d.fake.Accounts() {
		if !slices.Contains(emails, e) {
			emails = append(emails, e)
		}
	}
	return emails, notes
}

func (s demoSource) DemoMailboxes() []web.DemoMailbox {
	g := s.d.fake.Gmail
	emails, notes := s.mailboxOrder()
	now := s.d.now()
	out := make([]web.DemoMailbox, 0, len(emails))
	for _, e := range emails {
		b := web.DemoMailbox{Email: e, Note: notes[e], HistoryID: g.HistoryID(e)}
		for _, m := range g.Messages(e) {
			b.Messages++
			if m.Unread() {
				b.Unread++
			}
			if m.Trashed() {
				b.Trashed++
			}
		}
		if w, ok := g.WatchState(e); ok && w.Expiration.After(now) {
			b.WatchExpires = w.Expiration
		}
		out = append(out, b)
	}
	return out
}

func (s demoSource) DemoMessages(email string, offset, limit int) ([]web.DemoMessage, int) {
	g := s.d.fake.Gmail
	msgs := g.Messages(email) // oldest first
	total := len(msgs)
	if offset < 0 || offset >= total || limit <= 0 {
		return nil, total
	}
	names := g.LabelNames(email)
	system := map[string]bool{}
	for _, l := range googlefake.SystemLabels() {
		system[l] = true
	}
	end := min(total, offset+limit)
	out := make([]web.DemoMessage, 0, end-offset)
	for i := offset; i < end; i++ {
		m := msgs[total-1-i]
		dm := web.DemoMessage{
			ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Subject: m.Subject, Snippet: m.Snippet,
			Unread: m.Unread(), Trashed: m.Trashed(), Date: m.Date,
		}
		for _, id := range m.LabelIDs {
			name := names[id]
			if name == "" {
				name = id
			}
			dm.Labels = append(dm.Labels, web.DemoLabel{Name: name, User: !system[id]})
		}
		out = append(out, dm)
	}
	return out, total
}

func (s demoSource) DemoSheets(rows int) []web.DemoSheet {
	out := make([]web.DemoSheet, 0, len(demoSheets))
	for i, sh := range demoSheets {
		v := web.DemoSheet{
			SpreadsheetID: s.d.sheetIDs[i], Title: sh.Title, Sheet: sh.Sheet,
			Owner: demoAccounts[sh.Owner].Email, Columns: sh.Columns,
		}
		all, err := s.d.fake.Sheets.Rows(v.SpreadsheetID, sh.Sheet)
		if err != nil {
			v.Error = err.Error()
		}
		// Newest (lowest) rows first; empty rows (a gap left by an
		// earlier run's rows, which the emulator forgot) are skipped.
		for n := len(all) - 1; n >= 0; n-- {
			if !slices.ContainsFunc(all[n], func(c string) bool { return c != "" }) {
				continue
			}
			v.Rows++
			if len(v.Newest) < rows {
				v.Newest = append(v.Newest, web.DemoRow{Number: n + 1, Cells: all[n]})
			}
		}
		out = append(out, v)
	}
	return out
}

func (s demoSource) DemoAlerts() []web.DemoAlert {
	if s.d.webhook == nil {
		return nil
	}
	seen := s.d.webhook.alerts()
	out := make([]web.DemoAlert, len(seen))
	for i, a := range seen {
		out[i] = web.DemoAlert{At: a.At, Text: a.Text}
	}
	return out
}

func (s demoSource) DemoReceiver() web.DemoReceiver {
	if s.d.receiver == nil {
		return web.DemoReceiver{}
	}
	return s.d.receiver.Stats()
}
