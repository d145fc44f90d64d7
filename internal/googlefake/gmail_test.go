package googlefake_test

import (
	"context"
	"encoding/base64"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/api/gmail/v1"

	"mailroom/internal/googlefake"
)

func TestGetProfile(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	id := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{From: "x@example.com", Subject: "one"}))
	must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{ThreadID: id, Subject: "Re: one"}))
	must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{Subject: "two"}))

	p, err := e.gmail.Users.GetProfile("me").Do()
	check(t, err)
	if p.EmailAddress != ann || p.MessagesTotal != 3 || p.ThreadsTotal != 2 || p.HistoryId != e.srv.Gmail.HistoryID(ann) {
		t.Fatalf("profile = %+v, want %s, 3 messages, 2 threads, history %d", p, ann, e.srv.Gmail.HistoryID(ann))
	}
	// The account's own address works as userId too; another one is denied.
	if _, err := e.gmail.Users.GetProfile(ann).Do(); err != nil {
		t.Fatal(err)
	}
	_, err = e.gmail.Users.GetProfile(bob).Do()
	if code, _ := apiCode(t, err); code != 403 {
		t.Fatalf("other user's profile: code %d, want 403", code)
	}
	if got := e.srv.Gmail.QuotaUnits(ann); got != 3 {
		t.Errorf("quota units = %d, want 3 (getProfile costs 1)", got)
	}
	if got := e.srv.Calls(googlefake.MethodGetProfile); got != 3 {
		t.Errorf("calls = %d, want 3", got)
	}
}

func TestMessagesListPaging(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	must[[]string](t)(e.srv.Gmail.Generate(ann, 260, 7))

	var want, wantUnread, wantAll []string
	msgs := e.srv.Gmail.Messages(ann)
	for i := len(msgs) - 1; i >= 0; i-- { // newest first
		m := msgs[i]
		wantAll = append(wantAll, m.ID)
		if slices.Contains(m.LabelIDs, googlefake.LabelSpam) || m.Trashed() {
			continue
		}
		want = append(want, m.ID)
		if m.Unread() {
			wantUnread = append(wantUnread, m.ID)
		}
	}
	list := func(call *gmail.UsersMessagesListCall) (ids []string, pages int) {
		t.Helper()
		err := call.MaxResults(100).Pages(context.Background(), func(r *gmail.ListMessagesResponse) error {
			pages++
			for _, m := range r.Messages {
				if m.ThreadId == "" {
					t.Errorf("message %s without threadId", m.Id)
				}
				ids = append(ids, m.Id)
			}
			return nil
		})
		check(t, err)
		return ids, pages
	}
	got, pages := list(e.gmail.Users.Messages.List("me"))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if pages != (len(want)+99)/100 {
		t.Errorf("pages = %d for %d messages", pages, len(want))
	}
	got, _ = list(e.gmail.Users.Messages.List("me").LabelIds(googlefake.LabelUnread))
	if diff := cmp.Diff(wantUnread, got); diff != "" {
		t.Errorf("unread list (-want +got):\n%s", diff)
	}
	got, _ = list(e.gmail.Users.Messages.List("me").IncludeSpamTrash(true))
	if diff := cmp.Diff(wantAll, got); diff != "" {
		t.Errorf("list with spam (-want +got):\n%s", diff)
	}
}

func TestMessagesGetFormats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	date := time.Date(2025, 3, 4, 5, 6, 7, 8_000_000, time.UTC)
	body := "Hello Ann,\n\nthe invoice is attached.\n\nBob"
	id := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{
		From: "Bob <bob@example.com>", To: ann, Cc: "carol@example.com", Subject: "Invoice",
		Body: body, Date: date,
	}))
	snap, _ := e.srv.Gmail.Message(ann, id)

	min, err := e.gmail.Users.Messages.Get("me", id).Format("minimal").Do()
	check(t, err)
	if min.Id != id || min.ThreadId != id || min.Payload != nil || min.InternalDate != date.UnixMilli() ||
		min.HistoryId != snap.HistoryID || !slices.Equal(min.LabelIds, []string{"INBOX", "UNREAD"}) ||
		min.Snippet != "Hello Ann, the invoice is attached. Bob" {
		t.Errorf("minimal = %+v", min)
	}

	meta, err := e.gmail.Users.Messages.Get("me", id).Format("metadata").MetadataHeaders("Subject", "from").Do()
	check(t, err)
	if meta.Payload == nil || meta.Payload.Body != nil {
		t.Fatalf("metadata payload = %+v", meta.Payload)
	}
	gotHeaders := map[string]string{}
	for _, h := range meta.Payload.Headers {
		gotHeaders[h.Name] = h.Value
	}
	if diff := cmp.Diff(map[string]string{"Subject": "Invoice", "From": "Bob <bob@example.com>"}, gotHeaders); diff != "" {
		t.Errorf("metadata headers (-want +got):\n%s", diff)
	}

	full, err := e.gmail.Users.Messages.Get("me", id).Format("full").Do()
	check(t, err)
	headers := map[string]string{}
	for _, h := range full.Payload.Headers {
		headers[h.Name] = h.Value
	}
	for name, want := range map[string]string{"From": "Bob <bob@example.com>", "To": ann, "Cc": "carol@example.com",
		"Subject": "Invoice", "Date": date.Format(time.RFC1123Z)} {
		if headers[name] != want {
			t.Errorf("full header %s = %q, want %q", name, headers[name], want)
		}
	}
	data, err := base64.URLEncoding.DecodeString(full.Payload.Body.Data)
	check(t, err)
	if string(data) != body || full.Payload.MimeType != "text/plain" {
		t.Errorf("full body = %q (%s), want %q", data, full.Payload.MimeType, body)
	}

	raw, err := e.gmail.Users.Messages.Get("me", id).Format("raw").Do()
	check(t, err)
	rawBytes, err := base64.URLEncoding.DecodeString(raw.Raw)
	check(t, err)
	if !strings.Contains(string(rawBytes), "Subject: Invoice\r\n") || !strings.Contains(string(rawBytes), "the invoice is attached.") || raw.Payload != nil {
		t.Errorf("raw = %q", rawBytes)
	}

	_, err = e.gmail.Users.Messages.Get("me", "ffffffffffffffff").Do()
	if code, reason := apiCode(t, err); code != 404 || reason != "notFound" {
		t.Errorf("unknown id: %d %s, want 404 notFound", code, reason)
	}
	_, err = e.gmail.Users.Messages.Get("me", id).Format("bogus").Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("bad format: %d, want 400", code)
	}
}

// historyOf lists every history record from start through all pages.
func historyOf(t *testing.T, e *env, start uint64, edit func(*gmail.UsersHistoryListCall)) ([]*gmail.History, uint64) {
	t.Helper()
	var out []*gmail.History
	var current uint64
	call := e.gmail.Users.History.List("me").StartHistoryId(start)
	if edit != nil {
		edit(call)
	}
	err := call.Pages(context.Background(), func(r *gmail.ListHistoryResponse) error {
		out = append(out, r.History...)
		current = r.HistoryId
		return nil
	})
	check(t, err)
	return out, current
}

// kindOf names the one change a history record carries.
func kindOf(h *gmail.History) string {
	var parts []string
	for _, a := range h.MessagesAdded {
		parts = append(parts, "added:"+a.Message.Id)
	}
	for _, d := range h.MessagesDeleted {
		parts = append(parts, "deleted:"+d.Message.Id)
	}
	for _, a := range h.LabelsAdded {
		parts = append(parts, "+"+strings.Join(a.LabelIds, ",")+":"+a.Message.Id)
	}
	for _, r := range h.LabelsRemoved {
		parts = append(parts, "-"+strings.Join(r.LabelIds, ",")+":"+r.Message.Id)
	}
	return strings.Join(parts, " ")
}

func TestHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	g := e.srv.Gmail
	start := g.HistoryID(ann)
	label := must[string](t)(g.CreateLabel(ann, "Receipts"))
	a := must[string](t)(g.AddMessage(ann, googlefake.Message{Subject: "a"}))
	b := must[string](t)(g.AddMessage(ann, googlefake.Message{Subject: "b", ThreadID: a}))
	check(t, g.MarkRead(ann, a))
	check(t, g.MarkRead(ann, a)) // no change, no record
	check(t, g.Trash(ann, b))
	check(t, g.Untrash(ann, b))
	check(t, g.AddLabels(ann, a, label))
	check(t, g.MarkUnread(ann, a))
	check(t, g.Modify(ann, b, []string{googlefake.LabelStarred}, []string{googlefake.LabelInbox}))
	check(t, g.Delete(ann, a))

	recs, current := historyOf(t, e, start, nil)
	var kinds []string
	last := start
	for _, h := range recs {
		if h.Id <= last {
			t.Errorf("history id %d not above %d", h.Id, last)
		}
		last = h.Id
		if len(h.Messages) != 1 {
			t.Errorf("record %d: messages = %v", h.Id, h.Messages)
		}
		kinds = append(kinds, kindOf(h))
	}
	want := []string{
		"added:" + a, "added:" + b, "-UNREAD:" + a, "+TRASH:" + b, "-TRASH:" + b,
		"+" + label + ":" + a, "+UNREAD:" + a, "+STARRED:" + b + " -INBOX:" + b, "deleted:" + a,
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Fatalf("history (-want +got):\n%s", diff)
	}
	if current != g.HistoryID(ann) || last != current {
		t.Errorf("historyId = %d, last record %d, mailbox %d", current, last, g.HistoryID(ann))
	}
	// The message's labels after each change ride along.
	if got := recs[3].LabelsAdded[0].Message.LabelIds; !slices.Equal(got, []string{"INBOX", "TRASH", "UNREAD"}) {
		t.Errorf("labels after trash = %v", got)
	}
	if snap, _ := g.Message(ann, b); snap.HistoryID != recs[7].Id {
		t.Errorf("message historyId = %d, want %d", snap.HistoryID, recs[7].Id)
	}

	// historyTypes and labelId filter; paging with a small page.
	recs, _ = historyOf(t, e, start, func(c *gmail.UsersHistoryListCall) { c.HistoryTypes("labelRemoved").MaxResults(1) })
	kinds = kinds[:0]
	for _, h := range recs {
		kinds = append(kinds, kindOf(h))
	}
	if diff := cmp.Diff([]string{"-UNREAD:" + a, "-TRASH:" + b, "-INBOX:" + b}, kinds); diff != "" {
		t.Errorf("labelRemoved only (-want +got):\n%s", diff)
	}
	recs, _ = historyOf(t, e, start, func(c *gmail.UsersHistoryListCall) { c.LabelId(googlefake.LabelTrash) })
	kinds = kinds[:0]
	for _, h := range recs {
		kinds = append(kinds, kindOf(h))
	}
	if diff := cmp.Diff([]string{"+TRASH:" + b, "-TRASH:" + b}, kinds); diff != "" {
		t.Errorf("labelId TRASH (-want +got):\n%s", diff)
	}

	// Up to date: no records, just the current id.
	resp, err := e.gmail.Users.History.List("me").StartHistoryId(current).Do()
	check(t, err)
	if len(resp.History) != 0 || resp.HistoryId != current || resp.NextPageToken != "" {
		t.Errorf("empty history = %+v", resp)
	}
}

func TestHistoryTooOld(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	// The access tokens outlive the jumps of the clock: x/oauth2 judges
	// expiry by the real clock.
	e := newEnv(t, googlefake.Options{Now: clk.Now, HistoryRetention: time.Hour, HistoryMaxRecords: 5, AccessTokenTTL: 24 * time.Hour})
	g := e.srv.Gmail
	start := g.HistoryID(ann)
	tooOld := func(from uint64) bool {
		t.Helper()
		_, err := e.gmail.Users.History.List("me").StartHistoryId(from).Do()
		if err == nil {
			return false
		}
		code, reason := apiCode(t, err)
		if code != 404 || reason != "notFound" {
			t.Fatalf("history from %d: %d %s, want 404 notFound", from, code, reason)
		}
		return true
	}

	for range 5 {
		must[string](t)(g.AddMessage(ann, googlefake.Message{}))
	}
	if tooOld(start) {
		t.Fatal("5 records with a limit of 5: start should still be valid")
	}
	must[string](t)(g.AddMessage(ann, googlefake.Message{}))
	if !tooOld(start) {
		t.Fatal("6 records with a limit of 5: start should be too old")
	}
	if tooOld(start + 1) {
		t.Fatal("start+1 is the oldest kept start")
	}

	// Age: records older than an hour go.
	mid := g.HistoryID(ann)
	clk.Advance(2 * time.Hour)
	if !tooOld(mid - 1) {
		t.Fatal("records older than the retention should be gone")
	}
	if tooOld(mid) {
		t.Fatal("the current id is never too old")
	}

	// ExpireHistory drops everything at once.
	clk.Advance(time.Minute)
	id := must[string](t)(g.AddMessage(ann, googlefake.Message{}))
	check(t, g.ExpireHistory(ann))
	if !tooOld(mid) {
		t.Fatal("expired history should answer 404")
	}
	now := g.HistoryID(ann)
	if tooOld(now) {
		t.Fatal("the current id stays valid after ExpireHistory")
	}
	check(t, g.MarkRead(ann, id))
	recs, _ := historyOf(t, e, now, nil)
	if len(recs) != 1 || kindOf(recs[0]) != "-UNREAD:"+id {
		t.Errorf("history after expiry = %v", recs)
	}
}

func TestLabels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	l, err := e.gmail.Users.Labels.Create("me", &gmail.Label{Name: "Receipts"}).Do()
	check(t, err)
	if l.Id != "Label_1" || l.Name != "Receipts" || l.Type != "user" {
		t.Errorf("created = %+v", l)
	}
	_, err = e.gmail.Users.Labels.Create("me", &gmail.Label{Name: "receipts"}).Do()
	if code, reason := apiCode(t, err); code != 409 || reason != "duplicate" {
		t.Errorf("duplicate: %d %s, want 409 duplicate", code, reason)
	}
	_, err = e.gmail.Users.Labels.Create("me", &gmail.Label{Name: "INBOX"}).Do()
	if code, _ := apiCode(t, err); code != 409 {
		t.Errorf("system name: %d, want 409", code)
	}
	list, err := e.gmail.Users.Labels.List("me").Do()
	check(t, err)
	names := map[string]string{}
	for _, l := range list.Labels {
		names[l.Id] = l.Name
	}
	if diff := cmp.Diff(e.srv.Gmail.LabelNames(ann), names); diff != "" {
		t.Errorf("labels (-go api +http):\n%s", diff)
	}
	if names["Label_1"] != "Receipts" || names["INBOX"] != "INBOX" || names["UNREAD"] != "UNREAD" {
		t.Errorf("labels = %v", names)
	}
	id := must[string](t)(e.srv.Gmail.AddMessage(ann, googlefake.Message{LabelIDs: []string{"INBOX", "UNREAD", "Label_1"}}))
	got, err := e.gmail.Users.Labels.Get("me", "Label_1").Do()
	check(t, err)
	if got.MessagesTotal != 1 || got.MessagesUnread != 1 {
		t.Errorf("label counts = %+v (message %s)", got, id)
	}
	if u := e.srv.Gmail.QuotaUnits(ann); u != 5+5+5+1+1 {
		t.Errorf("quota units = %d, want 17", u)
	}
}

func TestModifyAndBatchModifyAppendHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t, googlefake.Options{})
	g := e.srv.Gmail
	label := must[string](t)(g.CreateLabel(ann, "Dev"))
	ids := must[[]string](t)(g.Generate(ann, 5, 1))
	for _, id := range ids {
		check(t, g.Modify(ann, id, []string{googlefake.LabelUnread, googlefake.LabelInbox}, []string{googlefake.LabelSpam, googlefake.LabelSent}))
	}
	start := g.HistoryID(ann)

	m, err := e.gmail.Users.Messages.Modify("me", ids[0], &gmail.ModifyMessageRequest{
		AddLabelIds: []string{label}, RemoveLabelIds: []string{"UNREAD"},
	}).Do()
	check(t, err)
	if m.Id != ids[0] || !slices.Contains(m.LabelIds, label) || slices.Contains(m.LabelIds, "UNREAD") {
		t.Errorf("modify answer = %+v", m)
	}
	check(t, e.gmail.Users.Messages.BatchModify("me", &gmail.BatchModifyMessagesRequest{
		Ids: ids[1:4], AddLabelIds: []string{label},
	}).Do())

	recs, _ := historyOf(t, e, start, nil)
	var kinds []string
	for _, h := range recs {
		kinds = append(kinds, kindOf(h))
	}
	want := []string{
		"+" + label + ":" + ids[0] + " -UNREAD:" + ids[0],
		"+" + label + ":" + ids[1], "+" + label + ":" + ids[2], "+" + label + ":" + ids[3],
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("history (-want +got):\n%s", diff)
	}

	// Limits and bad input.
	tooMany := make([]string, 1001)
	for i := range tooMany {
		tooMany[i] = ids[0]
	}
	err = e.gmail.Users.Messages.BatchModify("me", &gmail.BatchModifyMessagesRequest{Ids: tooMany, AddLabelIds: []string{label}}).Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("1001 ids: %d, want 400", code)
	}
	_, err = e.gmail.Users.Messages.Modify("me", ids[0], &gmail.ModifyMessageRequest{AddLabelIds: []string{"Label_99"}}).Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("unknown label: %d, want 400", code)
	}
	_, err = e.gmail.Users.Messages.Modify("me", "0000000000000000", &gmail.ModifyMessageRequest{AddLabelIds: []string{label}}).Do()
	if code, _ := apiCode(t, err); code != 404 {
		t.Errorf("unknown message: %d, want 404", code)
	}
	if g.HistoryID(ann) != recs[len(recs)-1].Id {
		t.Errorf("failed calls changed the history id")
	}

	// Trash, untrash and delete through HTTP.
	_, err = e.gmail.Users.Messages.Trash("me", ids[4]).Do()
	check(t, err)
	if snap, _ := g.Message(ann, ids[4]); !snap.Trashed() {
		t.Error("trash did not add TRASH")
	}
	_, err = e.gmail.Users.Messages.Untrash("me", ids[4]).Do()
	check(t, err)
	check(t, e.gmail.Users.Messages.Delete("me", ids[4]).Do())
	if _, ok := g.Message(ann, ids[4]); ok {
		t.Error("deleted message still there")
	}
	// modify, batchModify ×2, history.list, modify ×2, trash (20 at the
	// default 2026 prices), untrash, delete.
	if u := g.QuotaUnits(ann); u != 5+50+50+2+5+5+20+5+10 {
		t.Errorf("quota units = %d, want 152", u)
	}
}

func TestWatchAndStop(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	e := newEnv(t, googlefake.Options{Now: clk.Now})
	_, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "nonsense"}).Do()
	if code, _ := apiCode(t, err); code != 400 {
		t.Errorf("bad topic: %d, want 400", code)
	}
	w, err := e.gmail.Users.Watch("me", &gmail.WatchRequest{TopicName: "projects/p/topics/gmail"}).Do()
	check(t, err)
	wantExp := clk.Now().Add(7 * 24 * time.Hour).UnixMilli()
	if w.HistoryId != e.srv.Gmail.HistoryID(ann) || w.Expiration != wantExp {
		t.Errorf("watch = %+v, want history %d expiration %d", w, e.srv.Gmail.HistoryID(ann), wantExp)
	}
	st, ok := e.srv.Gmail.WatchState(ann)
	if !ok || st.Topic != "projects/p/topics/gmail" || st.Expiration.UnixMilli() != wantExp {
		t.Errorf("watch state = %+v %v", st, ok)
	}
	check(t, e.gmail.Users.Stop("me").Do())
	if _, ok := e.srv.Gmail.WatchState(ann); ok {
		t.Error("watch still active after stop")
	}
	if u := e.srv.Gmail.QuotaUnits(ann); u != 100+100+50 {
		t.Errorf("quota units = %d, want 250", u)
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	t.Parallel()
	clk := newClock(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	a := googlefake.New(googlefake.Options{Now: clk.Now})
	b := googlefake.New(googlefake.Options{Now: clk.Now})
	defer a.Close()
	defer b.Close()
	a.AddAccount(ann)
	b.AddAccount(ann)
	must[[]string](t)(a.Gmail.Generate(ann, 300, 42))
	must[[]string](t)(b.Gmail.Generate(ann, 300, 42))
	ma, mb := a.Gmail.Messages(ann), b.Gmail.Messages(ann)
	if diff := cmp.Diff(ma, mb); diff != "" {
		t.Fatalf("same seed, different mail (-a +b):\n%s", diff)
	}
	threads := map[string]int{}
	senders := map[string]bool{}
	var sent, unread int
	for _, m := range ma {
		threads[m.ThreadID]++
		senders[m.From] = true
		if slices.Contains(m.LabelIDs, googlefake.LabelSent) {
			sent++
		}
		if m.Unread() {
			unread++
		}
		if m.Subject == "" || m.Body == "" || m.From == "" || m.Date.After(clk.Now()) {
			t.Fatalf("implausible message %+v", m)
		}
	}
	if len(threads) < 100 || len(threads) > 280 || len(senders) < 50 || sent == 0 || unread == 0 || unread == len(ma) {
		t.Errorf("300 messages: %d threads, %d senders, %d sent, %d unread", len(threads), len(senders), sent, unread)
	}
	c := googlefake.New(googlefake.Options{Now: clk.Now})
	defer c.Close()
	c.AddAccount(ann)
	must[[]string](t)(c.Gmail.Generate(ann, 300, 43))
	if cmp.Equal(ma[0].Subject+ma[1].Subject+ma[2].Subject, c.Gmail.Messages(ann)[0].Subject+c.Gmail.Messages(ann)[1].Subject+c.Gmail.Messages(ann)[2].Subject) {
		t.Error("different seeds gave the same mail")
	}
}
