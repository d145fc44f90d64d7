package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Gmail's system label ids that carry the read and trash states.
const (
	LabelUnread = "UNREAD"
	LabelTrash  = "TRASH"
)

// Message is the mirror of one Gmail message of an account.
//
// Identity and content: ID and ThreadID are Gmail's; From, To, Cc and
// Subject are the header values as Gmail gives them, Snippet is Gmail's
// snippet, Date its internalDate. The body is never stored.
//
// State: LabelIDs holds every label id of the message as Gmail names them
// (system ids such as INBOX, UNREAD, TRASH, and user label ids such as
// Label_7; the account's label map gives user labels their names). Unread
// and trashed are the UNREAD and TRASH labels.
//
// Ordering: Gmail numbers every change with a history id, and the event
// tasks that carry changes may run in any order. A message remembers, per
// attribute, the history id of the last change it took: BaseHID for a whole
// snapshot fetched from Gmail (every label as of that id), LabelHIDs for
// single label changes after it (UNREAD is the read state, TRASH the trash
// state, the others the labels), DeletedHID for existence. A change applies
// only when its history id is above the one its attribute holds (ApplyLabel,
// ApplyDelete, MergeFetched), so an older event never overwrites a newer
// state, whatever order the queues run in.
//
// Lifecycle: a record may exist before its content is known (a state event
// ran before message-added fetched it): Fetched is false until a snapshot
// was merged, and such placeholders are not listed. A deleted message stays
// as a tombstone (Deleted, DeletedAt) so that late events for it do
// nothing, until TombstonesPrune takes it a retention later; tombstones are
// not listed either. Visible reports whether a message is listed.
type Message struct {
	ID       string    `json:"id"`
	ThreadID string    `json:"threadId"`
	From     string    `json:"from,omitempty"`
	To       string    `json:"to,omitempty"`
	Cc       string    `json:"cc,omitempty"`
	Subject  string    `json:"subject,omitempty"`
	Snippet  string    `json:"snippet,omitempty"`
	Date     time.Time `json:"date,omitzero"`
	// LabelIDs are sorted and unique.
	LabelIDs []string `json:"labelIds"`
	// HistoryID is the highest history id of a change the message took, as
	// Gmail's message historyId.
	HistoryID uint64 `json:"historyId,omitempty"`

	BaseHID    uint64            `json:"baseHid,omitempty"`
	LabelHIDs  map[string]uint64 `json:"labelHids,omitempty"`
	DeletedHID uint64            `json:"deletedHid,omitempty"`
	// DeletedAt is when the record became a tombstone (set by MessagePut);
	// tombstones are pruned a retention after it (TombstonesPrune).
	DeletedAt time.Time `json:"deletedAt,omitzero"`
	Fetched   bool      `json:"fetched,omitempty"`
	Deleted   bool      `json:"deleted,omitempty"`
	// BodyVerdicts are the verdicts of the rules that read bodies, taken
	// when a full sync read the message's body (the mirror keeps no
	// bodies): the rules' label pass uses a verdict of a rule's version
	// instead of reading the body again.
	BodyVerdicts []BodyVerdict `json:"bodyVerdicts,omitempty"`
}

// BodyVerdict is whether version Version of rule Rule matched a message,
// decided with its body.
type BodyVerdict struct {
	Rule    string `json:"rule"`
	Version int    `json:"version"`
	Match   bool   `json:"match,omitempty"`
}

// BodyVerdict returns the message's verdict of version version of rule
// rule, if one was taken.
func (m *Message) BodyVerdict(rule string, version int) (match, ok bool) {
	for _, v := range m.BodyVerdicts {
		if v.Rule == rule && v.Version == version {
			return v.Match, true
		}
	}
	return false, false
}

// Visible reports whether the message is listed: fetched and not deleted.
func (m *Message) Visible() bool { return m.Fetched && !m.Deleted }

// HasLabel reports whether the message carries label id l.
func (m *Message) HasLabel(l string) bool {
	_, found := slices.BinarySearch(m.LabelIDs, l)
	return found
}

// Unread reports whether the message has the UNREAD label.
func (m *Message) Unread() bool { return m.HasLabel(LabelUnread) }

// Trashed reports whether the message has the TRASH label.
func (m *Message) Trashed() bool { return m.HasLabel(LabelTrash) }

// LabelHID returns the history id of the last change the message took for
// label l (the snapshot's when no single change came after it).
func (m *Message) LabelHID(l string) uint64 { return max(m.BaseHID, m.LabelHIDs[l]) }

func (m *Message) setLabel(l string, present bool) {
	i, found := slices.BinarySearch(m.LabelIDs, l)
	switch {
	case present && !found:
		m.LabelIDs = slices.Insert(m.LabelIDs, i, l)
	case !present && found:
		m.LabelIDs = slices.Delete(m.LabelIDs, i, i+1)
	}
}

// ApplyLabel makes label l present or absent as of history id hid. It does
// nothing and returns false when the message is deleted or already took a
// change of l at hid or later.
func (m *Message) ApplyLabel(l string, present bool, hid uint64) bool {
	if m.Deleted || hid <= m.LabelHID(l) {
		return false
	}
	m.setLabel(l, present)
	if m.LabelHIDs == nil {
		m.LabelHIDs = map[string]uint64{}
	}
	m.LabelHIDs[l] = hid
	m.HistoryID = max(m.HistoryID, hid)
	return true
}

// ApplyDelete makes the message a tombstone as of history id hid. It
// returns false when it already is one.
func (m *Message) ApplyDelete(hid uint64) bool {
	if m.Deleted {
		return false
	}
	m.Deleted, m.DeletedHID = true, hid
	m.HistoryID = max(m.HistoryID, hid)
	return true
}

// MergeFetched merges f, a whole snapshot of the message fetched from Gmail
// as of history id f.HistoryID: the content is taken (and f's body
// verdicts, when it has some: the body they were taken on does not
// change), and each label takes the snapshot's state unless a newer
// single change was applied. It returns
// false when nothing changed (the message is deleted, or it already holds a
// snapshot at least as new).
func (m *Message) MergeFetched(f Message) bool {
	if m.Deleted {
		return false
	}
	changed := false
	if !m.Fetched {
		m.ThreadID, m.From, m.To, m.Cc, m.Subject, m.Snippet, m.Date = f.ThreadID, f.From, f.To, f.Cc, f.Subject, f.Snippet, f.Date
		m.Fetched, changed = true, true
	}
	if len(f.BodyVerdicts) > 0 && !slices.Equal(m.BodyVerdicts, f.BodyVerdicts) {
		m.BodyVerdicts, changed = slices.Clone(f.BodyVerdicts), true
	}
	if m.ID == "" {
		m.ID = f.ID
	}
	if f.HistoryID <= m.BaseHID {
		return changed
	}
	newer := map[string]bool{}
	for l, hid := range m.LabelHIDs {
		if hid > f.HistoryID {
			newer[l] = m.HasLabel(l)
		}
	}
	m.LabelIDs = slices.Clone(f.LabelIDs)
	slices.Sort(m.LabelIDs)
	m.LabelIDs = slices.Compact(m.LabelIDs)
	for l, present := range newer {
		m.setLabel(l, present)
	}
	m.BaseHID = f.HistoryID
	maps.DeleteFunc(m.LabelHIDs, func(_ string, hid uint64) bool { return hid <= m.BaseHID })
	if len(m.LabelHIDs) == 0 {
		m.LabelHIDs = nil
	}
	m.HistoryID = max(m.HistoryID, f.HistoryID)
	return true
}

// MessageCounts are an account's listed messages by state.
type MessageCounts struct {
	Total   int `json:"total"`
	Unread  int `json:"unread"`
	Trashed int `json:"trashed"`
}

func (c *MessageCounts) add(m *Message, sign int) {
	if m == nil || !m.Visible() {
		return
	}
	c.Total += sign
	if m.Unread() {
		c.Unread += sign
	}
	if m.Trashed() {
		c.Trashed += sign
	}
}

// MessageCounts returns the account's counts of listed messages.
func (tx *Tx) MessageCounts(accountID string) (MessageCounts, error) {
	var c MessageCounts
	data, err := tx.accountData(accountID, false)
	if data == nil || err != nil {
		return c, err
	}
	if raw := data.Get(keyCounts); raw != nil {
		err = json.Unmarshal(raw, &c)
	}
	return c, err
}

func threadKey(threadID, msgID string) []byte { return []byte(threadID + "\x00" + msgID) }

// MessageGet returns one message of an account (tombstones and
// placeholders included; check Visible); ErrNotFound when there is none.
func (tx *Tx) MessageGet(accountID, id string) (Message, error) {
	var m Message
	b, err := tx.accountSub(accountID, subMessages, false)
	if err != nil {
		return m, err
	}
	if b == nil {
		return m, fmt.Errorf("store: message %s: %w", id, ErrNotFound)
	}
	if err := getJSON(b, []byte(id), &m); err != nil {
		return m, fmt.Errorf("store: message %s: %w", id, err)
	}
	return m, nil
}

// MessagePut creates or replaces a message of an account, keeping the
// thread index and the counts. The caller checks the account exists.
func (tx *Tx) MessagePut(accountID string, m Message) error {
	if m.ID == "" {
		return fmt.Errorf("store: message needs an id")
	}
	data, err := tx.accountData(accountID, true)
	if err != nil {
		return err
	}
	b, threads := data.Bucket(subMessages), data.Bucket(subThreads)
	var old *Message
	if raw := b.Get([]byte(m.ID)); raw != nil {
		old = new(Message)
		if err := json.Unmarshal(raw, old); err != nil {
			return fmt.Errorf("store: decode message %s: %w", m.ID, err)
		}
	}
	if m.Deleted && (old == nil || !old.Deleted) {
		if err := indexTombstone(data, &m); err != nil {
			return err
		}
	}
	if err := putJSON(b, []byte(m.ID), m); err != nil {
		return fmt.Errorf("store: put message %s: %w", m.ID, err)
	}
	if err := tx.messageEvents(accountID, old, &m); err != nil {
		return fmt.Errorf("store: events of message %s: %w", m.ID, err)
	}
	if old != nil && old.ThreadID != "" && (old.ThreadID != m.ThreadID || !m.Visible()) {
		if err := threads.Delete(threadKey(old.ThreadID, m.ID)); err != nil {
			return err
		}
	}
	if m.Visible() && m.ThreadID != "" {
		if err := threads.Put(threadKey(m.ThreadID, m.ID), nil); err != nil {
			return err
		}
	}
	var c MessageCounts
	if raw := data.Get(keyCounts); raw != nil {
		if err := json.Unmarshal(raw, &c); err != nil {
			return err
		}
	}
	before := c
	c.add(old, -1)
	c.add(&m, +1)
	if c == before {
		return nil
	}
	return putJSON(data, keyCounts, c)
}

// MessageFilter selects messages of an account for Messages.
type MessageFilter struct {
	// LabelID keeps messages with that label id. Empty: any.
	LabelID string
	// Unread and Trashed, when set, keep messages in that state.
	Unread, Trashed *bool
	// Cursor continues a listing after the message with that id (the
	// previous page's next). Empty: from the newest.
	Cursor string
	// Limit is the page size. Zero or less: 50.
	Limit int
}

// Messages lists an account's visible messages matching f, newest first
// (by message id: Gmail's ids grow with time). next is the cursor of the
// following page, empty after the last.
func (tx *Tx) Messages(accountID string, f MessageFilter) (msgs []Message, next string, err error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	b, err := tx.accountSub(accountID, subMessages, false)
	if b == nil || err != nil {
		return nil, "", err
	}
	c := b.Cursor()
	var k, v []byte
	if f.Cursor == "" {
		k, v = c.Last()
	} else {
		k, _ = c.Seek([]byte(f.Cursor))
		if k == nil {
			k, v = c.Last()
		} else {
			k, v = c.Prev()
		}
		for k != nil && bytes.Compare(k, []byte(f.Cursor)) >= 0 {
			k, v = c.Prev()
		}
	}
	for ; k != nil; k, v = c.Prev() {
		var m Message
		if err := json.Unmarshal(v, &m); err != nil {
			return nil, "", fmt.Errorf("store: decode message %s: %w", k, err)
		}
		if !m.Visible() || (f.LabelID != "" && !m.HasLabel(f.LabelID)) ||
			(f.Unread != nil && m.Unread() != *f.Unread) || (f.Trashed != nil && m.Trashed() != *f.Trashed) {
			continue
		}
		if len(msgs) == f.Limit {
			return msgs, msgs[len(msgs)-1].ID, nil
		}
		msgs = append(msgs, m)
	}
	return msgs, "", nil
}

// EachMessage calls fn for every message record of an account (tombstones
// and placeholders included), in id order. fn must not write to the
// account's messages; collect and write after.
func (tx *Tx) EachMessage(accountID string, fn func(Message) error) error {
	b, err := tx.accountSub(accountID, subMessages, false)
	if b == nil || err != nil {
		return err
	}
	return b.ForEach(func(k, v []byte) error {
		var m Message
		if err := json.Unmarshal(v, &m); err != nil {
			return fmt.Errorf("store: decode message %s: %w", k, err)
		}
		return fn(m)
	})
}

// ThreadIDs lists the ids of an account's threads that have a visible
// message, in id order, starting after the thread id after (empty: from the
// first), at most limit of them (zero or less: all). next is the cursor of
// the following page, empty after the last.
func (tx *Tx) ThreadIDs(accountID, after string, limit int) (ids []string, next string, err error) {
	b, err := tx.accountSub(accountID, subThreads, false)
	if b == nil || err != nil {
		return nil, "", err
	}
	c := b.Cursor()
	var k []byte
	if after == "" {
		k, _ = c.First()
	} else {
		// Every key of thread `after` starts with after+"\x00"; the next
		// thread's keys sort after after+"\x01".
		k, _ = c.Seek([]byte(after + "\x01"))
	}
	for ; k != nil; k, _ = c.Next() {
		tid, _, _ := bytes.Cut(k, []byte{0})
		if len(ids) > 0 && ids[len(ids)-1] == string(tid) {
			continue
		}
		if limit > 0 && len(ids) == limit {
			return ids, ids[len(ids)-1], nil
		}
		ids = append(ids, string(tid))
	}
	return ids, "", nil
}

// ThreadMessages returns the visible messages of the threads, thread by
// thread in the order given, each thread's in id order.
func (tx *Tx) ThreadMessages(accountID string, threadIDs ...string) ([]Message, error) {
	data, err := tx.accountData(accountID, false)
	if data == nil || err != nil {
		return nil, err
	}
	msgs, c := data.Bucket(subMessages), data.Bucket(subThreads).Cursor()
	var out []Message
	for _, threadID := range threadIDs {
		prefix := []byte(threadID + "\x00")
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			var m Message
			if err := getJSON(msgs, k[len(prefix):], &m); err != nil {
				return nil, fmt.Errorf("store: message %s of thread %s: %w", k[len(prefix):], threadID, err)
			}
			out = append(out, m)
		}
	}
	return out, nil
}
