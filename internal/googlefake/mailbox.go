package googlefake

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
)

// System label ids, as Gmail names them.
const (
	LabelInbox              = "INBOX"
	LabelUnread             = "UNREAD"
	LabelTrash              = "TRASH"
	LabelSpam               = "SPAM"
	LabelStarred            = "STARRED"
	LabelImportant          = "IMPORTANT"
	LabelSent               = "SENT"
	LabelDraft              = "DRAFT"
	LabelChat               = "CHAT"
	LabelCategoryPersonal   = "CATEGORY_PERSONAL"
	LabelCategorySocial     = "CATEGORY_SOCIAL"
	LabelCategoryPromotions = "CATEGORY_PROMOTIONS"
	LabelCategoryUpdates    = "CATEGORY_UPDATES"
	LabelCategoryForums     = "CATEGORY_FORUMS"
)

// SystemLabels returns Gmail's system label ids.
func SystemLabels() []string {
	return []string{
		LabelInbox, LabelSent, LabelDraft, LabelSpam, LabelTrash, LabelUnread, LabelStarred,
		LabelImportant, LabelChat, LabelCategoryPersonal, LabelCategorySocial,
		LabelCategoryPromotions, LabelCategoryUpdates, LabelCategoryForums,
	}
}

func isSystemLabel(id string) bool {
	switch id {
	case LabelInbox, LabelSent, LabelDraft, LabelSpam, LabelTrash, LabelUnread, LabelStarred,
		LabelImportant, LabelChat, LabelCategoryPersonal, LabelCategorySocial,
		LabelCategoryPromotions, LabelCategoryUpdates, LabelCategoryForums:
		return true
	}
	return false
}

// Errors of the Go API.
var (
	ErrUnknownAccount     = errors.New("googlefake: unknown account")
	ErrUnknownMessage     = errors.New("googlefake: unknown message")
	ErrUnknownThread      = errors.New("googlefake: unknown thread")
	ErrUnknownLabel       = errors.New("googlefake: unknown label")
	ErrLabelExists        = errors.New("googlefake: label name exists or conflicts")
	ErrLabelConflict      = errors.New("googlefake: label both added and removed")
	ErrUnknownSpreadsheet = errors.New("googlefake: unknown spreadsheet")
	ErrUnknownSheet       = errors.New("googlefake: unknown sheet")
)

// labelError is ErrUnknownLabel naming the label.
type labelError struct{ id string }

func (e labelError) Error() string        { return ErrUnknownLabel.Error() + ": " + e.id }
func (e labelError) Is(target error) bool { return target == ErrUnknownLabel }

// Message is a Gmail message as the emulator holds it. As input to
// AddMessage, ID and HistoryID are ignored; an empty ThreadID starts a new
// thread; nil LabelIDs mean INBOX and UNREAD; a zero Date means now; an empty
// Snippet is taken from Body.
type Message struct {
	ID       string
	ThreadID string
	// LabelIDs are sorted: system ids (INBOX, UNREAD, ...) and user label
	// ids (Label_1, ...).
	LabelIDs []string
	From     string
	To       string
	Cc       string
	Subject  string
	// Body is the text/plain body.
	Body    string
	Snippet string
	// Date is the internalDate (millisecond precision).
	Date time.Time
	// HistoryID is the id of the last history record that changed it.
	HistoryID uint64
}

// Unread reports whether the message has the UNREAD label.
func (m Message) Unread() bool { return slices.Contains(m.LabelIDs, LabelUnread) }

// Trashed reports whether the message has the TRASH label.
func (m Message) Trashed() bool { return slices.Contains(m.LabelIDs, LabelTrash) }

// Watch is the state of a mailbox's users.watch.
type Watch struct {
	Topic      string
	LabelIDs   []string
	Behavior   string // "include" or "exclude"
	Expiration time.Time
	HistoryID  uint64 // the history id when the watch was made
}

// Gmail holds the mailboxes, one per account.
type Gmail struct {
	s *Server

	eps map[string]*endpoint // by method, built once

	mu     sync.RWMutex
	boxes  map[string]*mailbox
	nboxes uint64
	quota  *gmailQuota
}

func newGmail(s *Server) *Gmail {
	g := &Gmail{s: s, eps: make(map[string]*endpoint), boxes: make(map[string]*mailbox), quota: newGmailQuota(s.opts)}
	for _, m := range gmailMethods() {
		g.eps[m] = g.newEndpoint(m)
	}
	return g
}

type mailbox struct {
	mu          sync.Mutex
	email       string
	historyID   uint64 // the current history id
	floor       uint64 // a startHistoryId below it is too old (404)
	history     []record
	msgs        map[string]*message
	order       []*message            // by (date, seq), oldest first
	threads     map[string][]*message // thread id → its messages, by (date, seq)
	labels      map[string]*userLabel // user labels by id
	labelByName map[string]string     // lower-case name → id
	nextLabel   int
	watch       *Watch
}

type userLabel struct {
	id, name                      string
	listVisibility, msgVisibility string
}

type message struct {
	id, threadID string
	seq          uint64
	// labels is sorted and never changed in place: history records share it.
	labels                               []string
	from, to, cc, subject, body, snippet string
	date                                 time.Time
	historyID                            uint64
}

func (m *message) less(date time.Time, seq uint64) bool {
	if !m.date.Equal(date) {
		return m.date.Before(date)
	}
	return m.seq < seq
}

type recordKind uint8

const (
	recAdded recordKind = iota + 1
	recDeleted
	recLabels
)

// record is one history record; it touches one message.
type record struct {
	id              uint64
	at              time.Time
	kind            recordKind
	msgID, threadID string
	labels          []string // the message's labels after the change
	added, removed  []string // for recLabels
}

func (m *message) snapshot() Message {
	return Message{
		ID: m.id, ThreadID: m.threadID, LabelIDs: slices.Clone(m.labels),
		From: m.from, To: m.to, Cc: m.cc, Subject: m.subject, Body: m.body,
		Snippet: m.snip(), Date: m.date, HistoryID: m.historyID,
	}
}

// ensureMailbox returns the mailbox of email, creating it.
func (g *Gmail) ensureMailbox(email string) *mailbox {
	e := normEmail(email)
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.boxes[e]; b != nil {
		return b
	}
	g.nboxes++
	base := g.s.opts.HistoryStart + g.nboxes*1_000_000
	b := &mailbox{
		email: e, historyID: base, floor: base,
		msgs: make(map[string]*message), threads: make(map[string][]*message),
		labels: make(map[string]*userLabel), labelByName: make(map[string]string),
		nextLabel: 1,
	}
	g.boxes[e] = b
	return b
}

func (g *Gmail) box(email string) (*mailbox, error) {
	g.mu.RLock()
	b := g.boxes[normEmail(email)]
	g.mu.RUnlock()
	if b == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownAccount, email)
	}
	return b, nil
}

func (g *Gmail) accounts() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]string, 0, len(g.boxes))
	for e := range g.boxes {
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

// mutate runs fn on the locked mailbox of email, then notifies the push
// publisher when fn appended history that the mailbox's watch covers.
func (g *Gmail) mutate(email string, fn func(b *mailbox, now time.Time) error) error {
	b, err := g.box(email)
	if err != nil {
		return err
	}
	now := g.s.now()
	b.mu.Lock()
	before := b.historyID
	err = fn(b, now)
	push := b.historyID != before && b.watchCovers(now, b.historyID-before)
	hid := b.historyID
	b.mu.Unlock()
	if push {
		g.s.pusher.notify(b.email, hid)
	}
	return err
}

// watchCovers reports whether the last n history records concern the
// active watch.
func (b *mailbox) watchCovers(now time.Time, n uint64) bool {
	w := b.watch
	if w == nil || !now.Before(w.Expiration) {
		return false
	}
	if len(w.LabelIDs) == 0 {
		return true
	}
	recs := b.history[max(0, len(b.history)-int(n)):]
	for _, r := range recs {
		has := false
		for _, l := range w.LabelIDs {
			if slices.Contains(r.labels, l) || slices.Contains(r.added, l) || slices.Contains(r.removed, l) {
				has = true
				break
			}
		}
		if has != (w.Behavior == "exclude") {
			return true
		}
	}
	return false
}

// appendRecord gives r the next history id, stores it and prunes old ones.
func (b *mailbox) appendRecord(now time.Time, opts *Options, r record) uint64 {
	b.historyID++
	r.id, r.at = b.historyID, now
	b.history = append(b.history, r)
	b.prune(now, opts)
	return r.id
}

// prune drops the records beyond the retention limits.
func (b *mailbox) prune(now time.Time, opts *Options) {
	drop := 0
	if opts.HistoryMaxRecords > 0 && len(b.history) > opts.HistoryMaxRecords {
		drop = len(b.history) - opts.HistoryMaxRecords
	}
	if opts.HistoryRetention > 0 {
		cutoff := now.Add(-opts.HistoryRetention)
		for drop < len(b.history) && b.history[drop].at.Before(cutoff) {
			drop++
		}
	}
	if drop > 0 {
		b.floor = b.history[drop-1].id
		b.history = b.history[drop:]
	}
}

// validLabel reports whether id names a system label or a user label.
func (b *mailbox) validLabel(id string) bool {
	if isSystemLabel(id) {
		return true
	}
	_, ok := b.labels[id]
	return ok
}

func (b *mailbox) insert(m *message) {
	n := len(b.order)
	if n == 0 || b.order[n-1].less(m.date, m.seq) {
		b.order = append(b.order, m)
	} else {
		i := sort.Search(n, func(i int) bool { return !b.order[i].less(m.date, m.seq) })
		b.order = slices.Insert(b.order, i, m)
	}
	b.msgs[m.id] = m
	th := b.threads[m.threadID]
	j := sort.Search(len(th), func(j int) bool { return !th[j].less(m.date, m.seq) })
	b.threads[m.threadID] = slices.Insert(th, j, m)
}

func (b *mailbox) remove(m *message) {
	i := sort.Search(len(b.order), func(i int) bool { return !b.order[i].less(m.date, m.seq) })
	if i < len(b.order) && b.order[i] == m {
		b.order = slices.Delete(b.order, i, i+1)
	}
	delete(b.msgs, m.id)
	th := slices.DeleteFunc(b.threads[m.threadID], func(o *message) bool { return o == m })
	if len(th) == 0 {
		delete(b.threads, m.threadID)
	} else {
		b.threads[m.threadID] = th
	}
}

// snip returns the message's snippet: the one given, else one made from
// the body (made on demand to keep big mailboxes small).
func (m *message) snip() string {
	if m.snippet != "" {
		return m.snippet
	}
	return makeSnippet(m.body)
}

func makeSnippet(body string) string {
	const max = 140
	var sb strings.Builder
	space := false
	n := 0
	for _, r := range body {
		if unicode.IsSpace(r) {
			space = sb.Len() > 0
			continue
		}
		if space {
			sb.WriteByte(' ')
			n++
			space = false
		}
		if n >= max {
			break
		}
		sb.WriteRune(r)
		n++
	}
	return sb.String()
}

func messageID(n uint64) string { return fmt.Sprintf("%016x", 0x18c0_0000_0000_0000+n*0x3b9) }

// AddMessage delivers a message to the mailbox of email (a messagesAdded
// history record) and returns its id.
func (g *Gmail) AddMessage(email string, m Message) (string, error) {
	var id string
	err := g.mutate(email, func(b *mailbox, now time.Time) error {
		var err error
		id, err = b.add(g.s, now, m)
		return err
	})
	return id, err
}

func (b *mailbox) add(s *Server, now time.Time, in Message) (string, error) {
	labels := in.LabelIDs
	if labels == nil {
		labels = []string{LabelInbox, LabelUnread}
	}
	labels = slices.Clone(labels)
	slices.Sort(labels)
	labels = slices.Compact(labels)
	for _, l := range labels {
		if !b.validLabel(l) {
			return "", labelError{l}
		}
	}
	if in.ThreadID != "" {
		if _, ok := b.threads[in.ThreadID]; !ok {
			return "", fmt.Errorf("%w: %s", ErrUnknownThread, in.ThreadID)
		}
	}
	seq := s.newID()
	m := &message{
		id: messageID(seq), threadID: in.ThreadID, seq: seq, labels: labels,
		from: in.From, to: in.To, cc: in.Cc, subject: in.Subject, body: in.Body,
		snippet: in.Snippet, date: in.Date.Truncate(time.Millisecond),
	}
	if m.threadID == "" {
		m.threadID = m.id
	}
	if in.Date.IsZero() {
		m.date = now.Truncate(time.Millisecond)
	}
	b.insert(m)
	m.historyID = b.appendRecord(now, &s.opts, record{kind: recAdded, msgID: m.id, threadID: m.threadID, labels: m.labels})
	return m.id, nil
}

// modify adds and removes labels of one message, appending one history
// record (with labelsAdded and/or labelsRemoved) when anything changed.
func (b *mailbox) modify(s *Server, now time.Time, id string, add, remove []string) error {
	m := b.msgs[id]
	if m == nil {
		return fmt.Errorf("%w: %s", ErrUnknownMessage, id)
	}
	for _, l := range add {
		if !b.validLabel(l) {
			return labelError{l}
		}
		if slices.Contains(remove, l) {
			return fmt.Errorf("%w: %s", ErrLabelConflict, l)
		}
	}
	for _, l := range remove {
		if !b.validLabel(l) {
			return labelError{l}
		}
	}
	var added, removed []string
	for _, l := range add {
		if !slices.Contains(m.labels, l) && !slices.Contains(added, l) {
			added = append(added, l)
		}
	}
	for _, l := range remove {
		if slices.Contains(m.labels, l) && !slices.Contains(removed, l) {
			removed = append(removed, l)
		}
	}
	if len(added) == 0 && len(removed) == 0 {
		return nil
	}
	labels := make([]string, 0, len(m.labels)+len(added))
	for _, l := range m.labels {
		if !slices.Contains(removed, l) {
			labels = append(labels, l)
		}
	}
	labels = append(labels, added...)
	slices.Sort(labels)
	m.labels = labels
	m.historyID = b.appendRecord(now, &s.opts, record{
		kind: recLabels, msgID: m.id, threadID: m.threadID, labels: labels, added: added, removed: removed,
	})
	return nil
}

func (b *mailbox) deleteMessage(s *Server, now time.Time, id string) error {
	m := b.msgs[id]
	if m == nil {
		return fmt.Errorf("%w: %s", ErrUnknownMessage, id)
	}
	b.remove(m)
	b.appendRecord(now, &s.opts, record{kind: recDeleted, msgID: m.id, threadID: m.threadID, labels: m.labels})
	return nil
}

// Modify adds and removes labels of a message in one change, as
// messages.modify does (one history record with labelsAdded and
// labelsRemoved). Nothing is recorded when nothing changes.
func (g *Gmail) Modify(email, id string, add, remove []string) error {
	return g.mutate(email, func(b *mailbox, now time.Time) error {
		return b.modify(g.s, now, id, add, remove)
	})
}

// AddLabels adds labels to a message (a labelsAdded record).
func (g *Gmail) AddLabels(email, id string, labelIDs ...string) error {
	return g.Modify(email, id, labelIDs, nil)
}

// RemoveLabels removes labels from a message (a labelsRemoved record).
func (g *Gmail) RemoveLabels(email, id string, labelIDs ...string) error {
	return g.Modify(email, id, nil, labelIDs)
}

// MarkRead removes UNREAD (a labelsRemoved record).
func (g *Gmail) MarkRead(email, id string) error { return g.RemoveLabels(email, id, LabelUnread) }

// MarkUnread adds UNREAD (a labelsAdded record).
func (g *Gmail) MarkUnread(email, id string) error { return g.AddLabels(email, id, LabelUnread) }

// Trash adds TRASH (a labelsAdded record); the other labels stay.
func (g *Gmail) Trash(email, id string) error { return g.AddLabels(email, id, LabelTrash) }

// Untrash removes TRASH (a labelsRemoved record).
func (g *Gmail) Untrash(email, id string) error { return g.RemoveLabels(email, id, LabelTrash) }

// Delete deletes a message permanently (a messagesDeleted record).
func (g *Gmail) Delete(email, id string) error {
	return g.mutate(email, func(b *mailbox, now time.Time) error {
		return b.deleteMessage(g.s, now, id)
	})
}

// CreateLabel creates a user label and returns its id ("Label_N").
func (g *Gmail) CreateLabel(email, name string) (string, error) {
	var id string
	err := g.mutate(email, func(b *mailbox, _ time.Time) error {
		l, err := b.createLabel(name, "", "")
		if err == nil {
			id = l.id
		}
		return err
	})
	return id, err
}

func (b *mailbox) createLabel(name, listVis, msgVis string) (*userLabel, error) {
	name = strings.TrimSpace(name)
	key := strings.ToLower(name)
	if _, dup := b.labelByName[key]; dup || isSystemLabel(strings.ToUpper(name)) {
		return nil, fmt.Errorf("%w: %s", ErrLabelExists, name)
	}
	if listVis == "" {
		listVis = "labelShow"
	}
	if msgVis == "" {
		msgVis = "show"
	}
	l := &userLabel{id: "Label_" + strconv.Itoa(b.nextLabel), name: name, listVisibility: listVis, msgVisibility: msgVis}
	b.nextLabel++
	b.labels[l.id] = l
	b.labelByName[key] = l.id
	return l, nil
}

// LabelNames returns the mailbox's labels, id → name (system labels are
// named by their id). Nil for an unknown account.
func (g *Gmail) LabelNames(email string) map[string]string {
	b, err := g.box(email)
	if err != nil {
		return nil
	}
	out := make(map[string]string)
	for _, id := range SystemLabels() {
		out[id] = id
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, l := range b.labels {
		out[id] = l.name
	}
	return out
}

// LabelID returns the id of the user label named name (any case).
func (g *Gmail) LabelID(email, name string) (string, bool) {
	b, err := g.box(email)
	if err != nil {
		return "", false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	id, ok := b.labelByName[strings.ToLower(strings.TrimSpace(name))]
	return id, ok
}

// Message returns a snapshot of one message.
func (g *Gmail) Message(email, id string) (Message, bool) {
	b, err := g.box(email)
	if err != nil {
		return Message{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.msgs[id]
	if m == nil {
		return Message{}, false
	}
	return m.snapshot(), true
}

// Messages returns snapshots of every message of the mailbox, oldest first
// (by date). Nil for an unknown account.
func (g *Gmail) Messages(email string) []Message {
	b, err := g.box(email)
	if err != nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Message, len(b.order))
	for i, m := range b.order {
		out[i] = m.snapshot()
	}
	return out
}

// MessageCount returns the number of messages in the mailbox.
func (g *Gmail) MessageCount(email string) int {
	b, err := g.box(email)
	if err != nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.order)
}

// HistoryID returns the mailbox's current history id (0 for an unknown
// account).
func (g *Gmail) HistoryID(email string) uint64 {
	b, err := g.box(email)
	if err != nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.historyID
}

// HistoryRecords returns the number of history records kept and the oldest
// valid startHistoryId (older ones answer 404).
func (g *Gmail) HistoryRecords(email string) (kept int, oldestStart uint64) {
	b, err := g.box(email)
	if err != nil {
		return 0, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.prune(g.s.now(), &g.s.opts)
	return len(b.history), b.floor
}

// ExpireHistory drops every history record of the mailbox, as Gmail does
// after about a week: a history.list from any older id then answers 404.
func (g *Gmail) ExpireHistory(email string) error {
	b, err := g.box(email)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.history = nil
	b.floor = b.historyID
	return nil
}

// WatchState returns the mailbox's watch, if one was made and not stopped
// (it may have expired: compare Expiration).
func (g *Gmail) WatchState(email string) (Watch, bool) {
	b, err := g.box(email)
	if err != nil {
		return Watch{}, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.watch == nil {
		return Watch{}, false
	}
	w := *b.watch
	w.LabelIDs = slices.Clone(w.LabelIDs)
	return w, true
}
