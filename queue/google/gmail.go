package google

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	gmailapi "google.golang.org/api/gmail/v1"
	"google.golang.org/api/option"
)

// Gmail is the Gmail API of one account. Its methods return classified
// errors (see Classify): a caller maps them to its task engine's classes
// (queue/googleerr), and checks them with errors.Is against ErrNotFound,
// ErrRevoked and ErrHistoryTooOld.
//
// When the Client has a Budget, every call first spends its units (Google's
// per-method cost) from the account's budget at the priority of its
// context (WithPriority), and a quota refusal from Google shrinks it.
type Gmail struct {
	c       *Client
	svc     *gmailapi.Service
	ts      *TokenSource
	account string
}

// Gmail returns the Gmail API of the account whose token source is ts;
// account keys its quota budget.
func (c *Client) Gmail(ctx context.Context, account string, ts *TokenSource) (*Gmail, error) {
	opts := []option.ClientOption{option.WithHTTPClient(c.httpClient(ts))}
	if c.cfg.APIURL != "" {
		opts = append(opts, option.WithEndpoint(c.cfg.APIURL))
	}
	svc, err := gmailapi.NewService(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("google: gmail service: %w", err)
	}
	return &Gmail{c: c, svc: svc, ts: ts, account: account}, nil
}

const me = "me"

// Prices returns the Gmail price list in force: the budget's, else
// Config.Prices, else DefaultPrices.
func (c *Client) Prices() Prices {
	switch {
	case c.cfg.Budget != nil:
		return c.cfg.Budget.Prices()
	case c.cfg.Prices.Name != "":
		return c.cfg.Prices
	}
	return MustPrices(DefaultPrices)
}

// MessageRef names a message.
type MessageRef struct {
	ID       string
	ThreadID string
}

// Message is a message as GetMessage returns it.
type Message struct {
	ID       string
	ThreadID string
	// LabelIDs are Gmail's label ids (INBOX, UNREAD, Label_7, ...).
	LabelIDs []string
	From     string
	To       string
	Cc       string
	Subject  string
	Snippet  string
	// Date is the internalDate.
	Date time.Time
	// HistoryID is the id of the last history record that changed it.
	HistoryID uint64
	// Body is the text/plain body, only when asked for.
	Body string
}

// LabelChange is one message's labels added or removed by a history record.
type LabelChange struct {
	Message  MessageRef
	LabelIDs []string
}

// HistoryRecord is one Gmail history record.
type HistoryRecord struct {
	ID            uint64
	Added         []MessageRef
	Deleted       []MessageRef
	LabelsAdded   []LabelChange
	LabelsRemoved []LabelChange
}

// HistoryPage is one page of history.list.
type HistoryPage struct {
	Records []HistoryRecord
	// HistoryID is the mailbox's current history id.
	HistoryID     uint64
	NextPageToken string
}

// Label is a Gmail label.
type Label struct {
	ID   string
	Name string
	// Type is "system" or "user".
	Type string
}

// call runs fn, a call costing units, with the shared auth and retry rules
// (see call) and classifies its error. Each attempt spends its units from
// the budget first and holds one of the account's in-flight slots.
func (g *Gmail) call(ctx context.Context, read bool, units int, fn func() error) error {
	b := g.c.cfg.Budget
	if b == nil {
		return Classify(call(ctx, g.c, g.ts, apiGmail, read, func() error {
			passed, err := g.passGate(ctx, read)
			if err != nil {
				return err
			}
			defer passed()
			return fn()
		}))
	}
	attempt := func() error {
		at, err := b.spend(ctx, g.account, units)
		if err != nil {
			return err
		}
		passed, err := g.passGate(ctx, read)
		if err != nil {
			return err
		}
		defer passed()
		release, err := b.acquire(ctx, g.account)
		if err != nil {
			return err
		}
		defer release()
		err = fn()
		if serr := b.Settle(context.WithoutCancel(ctx), g.account, units, at); serr != nil {
			g.c.cfg.Budget.log.Warn("settle a Gmail call's quota units", "account_id", g.account, "err", serr)
		}
		return err
	}
	// A call Google refused for quota did nothing there, so it is made again
	// (a few times) once the shrunk budget lets it: the refusal becomes a
	// wait in the task while the wait is short.
	for try := 0; ; try++ {
		err := Classify(call(ctx, g.c, g.ts, apiGmail, read, attempt))
		kind, wait := quotaRefusal(err)
		if kind == 0 {
			return err
		}
		if rerr := b.Refused(ctx, g.account, kind, wait); rerr != nil {
			return errors.Join(err, rerr)
		}
		if try == maxRefusedRetries || wait > b.cfg.MaxWait {
			return err
		}
	}
}

// passGate passes a write call's gate (WithWriteGate); reads pass none.
func (g *Gmail) passGate(ctx context.Context, read bool) (release func(), err error) {
	if read {
		return func() {}, nil
	}
	return pass(ctx)
}

// maxRefusedRetries is how many times a call Google refused for quota is
// made again in its task.
const maxRefusedRetries = 3

// Profile returns the account's address and current history id.
func (g *Gmail) Profile(ctx context.Context) (email string, historyID uint64, err error) {
	p, err := g.ProfileInfo(ctx)
	return p.Email, p.HistoryID, err
}

// Profile is users.getProfile's answer.
type Profile struct {
	Email     string
	HistoryID uint64
	// MessagesTotal is the number of messages in the mailbox.
	MessagesTotal int
}

// ProfileInfo returns the mailbox's address, history id and size.
func (g *Gmail) ProfileInfo(ctx context.Context) (Profile, error) {
	var p *gmailapi.Profile
	err := g.call(ctx, true, g.c.Prices().GetProfile, func() (err error) {
		p, err = g.svc.Users.GetProfile(me).Context(ctx).Do()
		return err
	})
	if err != nil {
		return Profile{}, fmt.Errorf("google: gmail profile: %w", err)
	}
	return Profile{Email: p.EmailAddress, HistoryID: p.HistoryId, MessagesTotal: int(p.MessagesTotal)}, nil
}

// ListMessages returns a page of every message id (spam and trash
// included), newest first. pageToken is empty for the first page.
func (g *Gmail) ListMessages(ctx context.Context, pageToken string, pageSize int) (refs []MessageRef, next string, err error) {
	var resp *gmailapi.ListMessagesResponse
	err = g.call(ctx, true, g.c.Prices().MessagesList, func() (err error) {
		call := g.svc.Users.Messages.List(me).IncludeSpamTrash(true).MaxResults(int64(pageSize)).Context(ctx)
		if pageToken != "" {
			call = call.PageToken(pageToken)
		}
		resp, err = call.Do()
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("google: gmail messages.list: %w", err)
	}
	for _, m := range resp.Messages {
		refs = append(refs, MessageRef{ID: m.Id, ThreadID: m.ThreadId})
	}
	return refs, resp.NextPageToken, nil
}

// metadataHeaders are the headers GetMessage asks for.
var metadataHeaders = []string{"From", "To", "Cc", "Subject"}

// GetMessage fetches a message: labels, headers and snippet (format
// metadata), and the text/plain body too when withBody is set (format
// full, dearer under the 2026 price list: see Prices). A message that no
// longer exists is a permanent ErrNotFound.
func (g *Gmail) GetMessage(ctx context.Context, id string, withBody bool) (Message, error) {
	var m *gmailapi.Message
	err := g.call(ctx, true, g.c.Prices().Get(withBody), func() (err error) {
		call := g.svc.Users.Messages.Get(me, id).Context(ctx)
		if withBody {
			call = call.Format("full")
		} else {
			call = call.Format("metadata").MetadataHeaders(metadataHeaders...)
		}
		m, err = call.Do()
		return err
	})
	if err != nil {
		return Message{}, fmt.Errorf("google: gmail messages.get %s: %w", id, err)
	}
	return messageOf(m, withBody), nil
}

// messageOf converts Gmail's message (format metadata, or full withBody).
func messageOf(m *gmailapi.Message, withBody bool) Message {
	out := Message{
		ID: m.Id, ThreadID: m.ThreadId, LabelIDs: m.LabelIds, Snippet: m.Snippet,
		Date: time.UnixMilli(m.InternalDate).UTC(), HistoryID: m.HistoryId,
	}
	if m.Payload != nil {
		for _, h := range m.Payload.Headers {
			switch strings.ToLower(h.Name) {
			case "from":
				out.From = h.Value
			case "to":
				out.To = h.Value
			case "cc":
				out.Cc = h.Value
			case "subject":
				out.Subject = h.Value
			}
		}
		if withBody {
			out.Body = plainBody(m.Payload)
		}
	}
	return out
}

// GetThread fetches every message of a thread as GetMessage does without
// the body (format metadata, the same headers), in one threads.get (its
// price against a messages.get's: Prices.UseThread). Its messages come as
// Gmail has them now, those that came after the caller learned of the
// thread among them. A thread that no longer exists (every message of it
// deleted) is a permanent ErrNotFound.
func (g *Gmail) GetThread(ctx context.Context, threadID string) ([]Message, error) {
	var th *gmailapi.Thread
	err := g.call(ctx, true, g.c.Prices().ThreadsGet, func() (err error) {
		th, err = g.svc.Users.Threads.Get(me, threadID).Format("metadata").MetadataHeaders(metadataHeaders...).Context(ctx).Do()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("google: gmail threads.get %s: %w", threadID, err)
	}
	out := make([]Message, 0, len(th.Messages))
	for _, m := range th.Messages {
		out = append(out, messageOf(m, false))
	}
	return out, nil
}

// plainBody returns the first text/plain part's decoded body.
func plainBody(p *gmailapi.MessagePart) string {
	if p == nil {
		return ""
	}
	if strings.HasPrefix(p.MimeType, "text/plain") && p.Body != nil && p.Body.Data != "" {
		data := strings.TrimRight(p.Body.Data, "=")
		if b, err := base64.RawURLEncoding.DecodeString(data); err == nil {
			return string(b)
		}
		if b, err := base64.RawStdEncoding.DecodeString(data); err == nil {
			return string(b)
		}
	}
	for _, part := range p.Parts {
		if body := plainBody(part); body != "" {
			return body
		}
	}
	return ""
}

// History returns a page of history records after startID (pageToken
// empty for the first page). A start id Gmail no longer has answers
// ErrHistoryTooOld (not a task error: the caller does a full sync).
func (g *Gmail) History(ctx context.Context, startID uint64, pageToken string, pageSize int) (HistoryPage, error) {
	var resp *gmailapi.ListHistoryResponse
	err := g.call(ctx, true, g.c.Prices().HistoryList, func() (err error) {
		call := g.svc.Users.History.List(me).StartHistoryId(startID).MaxResults(int64(pageSize)).Context(ctx)
		if pageToken != "" {
			call = call.PageToken(pageToken)
		}
		resp, err = call.Do()
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return HistoryPage{}, fmt.Errorf("google: gmail history.list from %d: %w", startID, ErrHistoryTooOld)
	}
	if err != nil {
		return HistoryPage{}, fmt.Errorf("google: gmail history.list from %d: %w", startID, err)
	}
	page := HistoryPage{HistoryID: resp.HistoryId, NextPageToken: resp.NextPageToken, Records: make([]HistoryRecord, 0, len(resp.History))}
	ref := func(m *gmailapi.Message) MessageRef {
		if m == nil {
			return MessageRef{}
		}
		return MessageRef{ID: m.Id, ThreadID: m.ThreadId}
	}
	for _, h := range resp.History {
		r := HistoryRecord{ID: h.Id}
		for _, a := range h.MessagesAdded {
			r.Added = append(r.Added, ref(a.Message))
		}
		for _, d := range h.MessagesDeleted {
			r.Deleted = append(r.Deleted, ref(d.Message))
		}
		for _, l := range h.LabelsAdded {
			r.LabelsAdded = append(r.LabelsAdded, LabelChange{Message: ref(l.Message), LabelIDs: l.LabelIds})
		}
		for _, l := range h.LabelsRemoved {
			r.LabelsRemoved = append(r.LabelsRemoved, LabelChange{Message: ref(l.Message), LabelIDs: l.LabelIds})
		}
		page.Records = append(page.Records, r)
	}
	return page, nil
}

// Labels lists the account's labels, system and user.
func (g *Gmail) Labels(ctx context.Context) ([]Label, error) {
	var resp *gmailapi.ListLabelsResponse
	err := g.call(ctx, true, g.c.Prices().LabelsList, func() (err error) {
		resp, err = g.svc.Users.Labels.List(me).Context(ctx).Do()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("google: gmail labels.list: %w", err)
	}
	out := make([]Label, 0, len(resp.Labels))
	for _, l := range resp.Labels {
		out = append(out, Label{ID: l.Id, Name: l.Name, Type: l.Type})
	}
	return out, nil
}

// CreateLabel creates a user label. A name that exists is a permanent
// error (409); list the labels first.
func (g *Gmail) CreateLabel(ctx context.Context, name string) (Label, error) {
	var l *gmailapi.Label
	err := g.call(ctx, false, g.c.Prices().LabelsCreate, func() (err error) {
		l, err = g.svc.Users.Labels.Create(me, &gmailapi.Label{
			Name: name, LabelListVisibility: "labelShow", MessageListVisibility: "show",
		}).Context(ctx).Do()
		return err
	})
	if err != nil {
		return Label{}, fmt.Errorf("google: gmail labels.create %q: %w", name, err)
	}
	return Label{ID: l.Id, Name: l.Name, Type: l.Type}, nil
}

// Modify adds and removes labels of one message (a set operation: safe to
// repeat). It returns the message's history id after the change: that of
// the last history record that changed the message.
func (g *Gmail) Modify(ctx context.Context, id string, add, remove []string) (historyID uint64, err error) {
	err = g.call(ctx, false, g.c.Prices().Modify, func() error {
		m, err := g.svc.Users.Messages.Modify(me, id, &gmailapi.ModifyMessageRequest{
			AddLabelIds: add, RemoveLabelIds: remove,
		}).Context(ctx).Do()
		if err == nil {
			historyID = m.HistoryId
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("google: gmail messages.modify %s: %w", id, err)
	}
	return historyID, nil
}

// MaxBatchModify is the most message ids one BatchModify takes.
const MaxBatchModify = 1000

// BatchModify adds and removes labels of up to MaxBatchModify messages in
// one call (a set operation: safe to repeat).
func (g *Gmail) BatchModify(ctx context.Context, ids, add, remove []string) error {
	if len(ids) > MaxBatchModify {
		return fmt.Errorf("google: gmail messages.batchModify: %d ids, at most %d", len(ids), MaxBatchModify)
	}
	err := g.call(ctx, false, g.c.Prices().BatchModify, func() error {
		return g.svc.Users.Messages.BatchModify(me, &gmailapi.BatchModifyMessagesRequest{
			Ids: ids, AddLabelIds: add, RemoveLabelIds: remove,
		}).Context(ctx).Do()
	})
	if err != nil {
		return fmt.Errorf("google: gmail messages.batchModify (%d ids): %w", len(ids), err)
	}
	return nil
}

// Watch starts (or renews) push notifications of the mailbox to a Pub/Sub
// topic; it returns the history id then and when the watch expires.
func (g *Gmail) Watch(ctx context.Context, topic string) (historyID uint64, expiration time.Time, err error) {
	var resp *gmailapi.WatchResponse
	err = g.call(ctx, false, g.c.Prices().Watch, func() (err error) {
		resp, err = g.svc.Users.Watch(me, &gmailapi.WatchRequest{TopicName: topic}).Context(ctx).Do()
		return err
	})
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("google: gmail watch: %w", err)
	}
	return resp.HistoryId, time.UnixMilli(resp.Expiration).UTC(), nil
}

// Stop ends push notifications of the mailbox.
func (g *Gmail) Stop(ctx context.Context) error {
	err := g.call(ctx, false, g.c.Prices().Stop, func() error {
		return g.svc.Users.Stop(me).Context(ctx).Do()
	})
	if err != nil {
		return fmt.Errorf("google: gmail stop: %w", err)
	}
	return nil
}
