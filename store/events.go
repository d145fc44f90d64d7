package store

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The event log: every change the store records for the service that runs
// mailroom (CONTRACT.md, "Events"), appended in the transaction of the
// change itself, so that an accepted change always has its event and an
// event always its change, across a kill -9.
//
// Events are numbered by the events bucket's sequence, which bbolt keeps in
// the file: the numbers, and the cursors made of them, survive restarts and
// backups. A user index lets a user token read its own events without
// walking everyone else's.
var (
	bucketEvents     = []byte("events")      // u64(seq) -> Event
	bucketUserEvents = []byte("user_events") // user id \x00 u64(seq) -> nil
	bucketEventsMeta = []byte("events_meta") // keyEventsPruned -> u64(last pruned seq)

	keyEventsPruned = []byte("pruned_through")
)

// Event types (CONTRACT.md, "Events": types and their data).
const (
	EventMessageAdded        = "message.added"
	EventMessageRead         = "message.read"
	EventMessageUnread       = "message.unread"
	EventMessageTrashed      = "message.trashed"
	EventMessageRestored     = "message.restored"
	EventMessageDeleted      = "message.deleted"
	EventMessageLabeled      = "message.labeled"
	EventAccountStatus       = "account.status"
	EventReclassifyDone      = "reclassify.done"
	EventFormRowsWritten     = "form.rows_written"
	EventFormState           = "form.state"
	EventFormCreated         = "form.created"
	EventFormDeleted         = "form.deleted"
	EventDeadLetterAdded     = "deadletter.added"
	EventDeadLetterRedone    = "deadletter.redriven"
	EventDeadLetterDiscarded = "deadletter.discarded"
	// EventWebhookTest is sent to one webhook only (ForWebhook), when
	// asked: no feed and no other webhook sees it.
	EventWebhookTest = "webhook.test"
)

// EventTypes are every event type, in the contract's order.
func EventTypes() []string {
	return []string{
		EventMessageAdded, EventMessageRead, EventMessageUnread, EventMessageTrashed,
		EventMessageRestored, EventMessageDeleted, EventMessageLabeled, EventAccountStatus,
		EventReclassifyDone, EventFormRowsWritten, EventFormState, EventFormCreated,
		EventFormDeleted, EventDeadLetterAdded, EventDeadLetterRedone, EventDeadLetterDiscarded,
		EventWebhookTest,
	}
}

// ErrCursorExpired: the events after a cursor were pruned (older than the
// retention), so a reader following it would miss some.
var ErrCursorExpired = errors.New("store: the events after this cursor are no longer kept")

// ErrCursorAhead: a cursor past the newest event, which this file never
// gave out (made up, or from a newer copy of the data).
var ErrCursorAhead = errors.New("store: the cursor is past the newest event")

// Event is one recorded change. Seq orders every event of the file; ID is
// its stable public name.
type Event struct {
	Seq        uint64    `json:"-"`
	Type       string    `json:"type"`
	OccurredAt time.Time `json:"occurredAt"`
	// UserID is the user the change belongs to (for a dead letter, the
	// user whose work failed); empty only for the changes of no user's
	// (a webhook of no user, a debug task), which only admin tokens read.
	UserID    string          `json:"userId"`
	AccountID string          `json:"accountId,omitempty"`
	FormID    string          `json:"formId,omitempty"`
	Data      json.RawMessage `json:"data"`
	// ForWebhook, when set, is the one webhook that receives the event (a
	// webhook.test): no feed and no other webhook reads it. It is stored,
	// never shown.
	ForWebhook string `json:"forWebhook,omitempty"`
}

// ID is the event's public id: evt_ and its number, fixed width.
func (e Event) ID() string { return fmt.Sprintf("evt_%016x", e.Seq) }

// MarshalJSON gives the contract's shape, with the id.
func (e Event) MarshalJSON() ([]byte, error) {
	e.ForWebhook = ""
	return e.record()
}

// record is the event as stored: the contract's shape, and the webhook it
// is for when it is for one.
func (e Event) record() ([]byte, error) {
	type plain Event
	return json.Marshal(struct {
		ID string `json:"id"`
		plain
	}{e.ID(), plain(e)})
}

// cursorPrefix makes a cursor recognisable; what follows is opaque.
const cursorPrefix = "cur_"

// EventCursor is the opaque cursor of the position after event seq (0:
// before the first event).
func EventCursor(seq uint64) string { return seqCursor(cursorPrefix, seq) }

// ParseEventCursor reads a cursor EventCursor made.
func ParseEventCursor(s string) (uint64, bool) { return parseSeqCursor(cursorPrefix, s) }

// seqCursor is an opaque cursor of a sequence number: prefix, then the
// number's 8 bytes in unpadded URL-safe base64.
func seqCursor(prefix string, seq uint64) string {
	return prefix + base64.RawURLEncoding.EncodeToString(u64(seq))
}

// parseSeqCursor reads a cursor seqCursor made with prefix.
func parseSeqCursor(prefix, s string) (uint64, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(raw), true
}

// eventSignal wakes the readers waiting for new events (long polls, the
// webhook deliverer) once a transaction that appended some commits: the
// readers of every event on any commit, a user's readers only on a commit
// with an event of that user (a user's long poll is not woken by others').
type eventSignal struct {
	mu     sync.Mutex
	all    chan struct{}            // closed on any commit of events
	users  map[string]chan struct{} // user id -> closed on a commit with an event of theirs
	counts map[string]uint64        // events committed since the process started, by type
}

// appendedEvent is what the signal needs of an event a transaction
// appended.
type appendedEvent struct{ typ, userID string }

// maxUserSignals bounds the users with a channel at once. Past it every
// user channel is closed and forgotten: their readers wake, find nothing
// new and take a fresh one, so the map cannot grow without end.
const maxUserSignals = 4096

func (s *eventSignal) wait(userID string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if userID == "" {
		if s.all == nil {
			s.all = make(chan struct{})
		}
		return s.all
	}
	if len(s.users) >= maxUserSignals {
		for id, ch := range s.users {
			close(ch)
			delete(s.users, id)
		}
	}
	if s.users == nil {
		s.users = map[string]chan struct{}{}
	}
	ch := s.users[userID]
	if ch == nil {
		ch = make(chan struct{})
		s.users[userID] = ch
	}
	return ch
}

func (s *eventSignal) committed(appended []appendedEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]uint64{}
	}
	for _, e := range appended {
		s.counts[e.typ]++
		if ch, ok := s.users[e.userID]; ok {
			close(ch)
			delete(s.users, e.userID)
		}
	}
	if s.all != nil {
		close(s.all)
		s.all = nil
	}
}

// EventsChanged returns a channel closed when a transaction that appended
// events commits; take a new one after each wake.
func (db *DB) EventsChanged() <-chan struct{} { return db.events.wait("") }

// EventsChangedFor is EventsChanged for the readers of one user's events:
// its channel is closed only by a commit with an event of that user (""
// is every user's: EventsChanged).
func (db *DB) EventsChangedFor(userID string) <-chan struct{} { return db.events.wait(userID) }

// EventCounts returns how many events of each type were committed since
// the process started (for the metrics).
func (db *DB) EventCounts() map[string]uint64 {
	db.events.mu.Lock()
	defer db.events.mu.Unlock()
	out := make(map[string]uint64, len(db.events.counts))
	for k, v := range db.events.counts {
		out[k] = v
	}
	return out
}

// EventAppend records e in this transaction and returns it numbered.
// OccurredAt defaults to now; a user is required.
func (tx *Tx) EventAppend(e Event) (Event, error) {
	if e.Type == "" {
		return e, fmt.Errorf("store: an event needs a type")
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = time.Now().UTC()
	}
	if len(e.Data) == 0 {
		e.Data = json.RawMessage("{}")
	}
	b := tx.tx.Bucket(bucketEvents)
	seq, err := b.NextSequence()
	if err != nil {
		return e, err
	}
	e.Seq = seq
	raw, err := e.record()
	if err != nil {
		return e, fmt.Errorf("store: encode event: %w", err)
	}
	if err := b.Put(u64(seq), raw); err != nil {
		return e, fmt.Errorf("store: put event: %w", err)
	}
	if e.UserID != "" {
		if err := tx.tx.Bucket(bucketUserEvents).Put(userEventKey(e.UserID, seq), nil); err != nil {
			return e, err
		}
	}
	if tx.appended == nil {
		tx.OnCommit(func() { tx.db.events.committed(tx.appended) })
	}
	tx.appended = append(tx.appended, appendedEvent{e.Type, e.UserID})
	return e, nil
}

// eventAppendJSON appends an event whose data is v as JSON.
func (tx *Tx) eventAppendJSON(typ, userID, accountID, formID string, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = tx.EventAppend(Event{Type: typ, UserID: userID, AccountID: accountID, FormID: formID, Data: raw})
	return err
}

func userEventKey(userID string, seq uint64) []byte {
	k := make([]byte, 0, len(userID)+9)
	k = append(k, userID...)
	k = append(k, 0)
	return append(k, u64(seq)...)
}

// EventQuery selects events for Events.
type EventQuery struct {
	// After is the position to read after (0: from the oldest kept).
	After uint64
	// UserID keeps one user's events. Empty: every user's.
	UserID string
	// Types keeps events of these types. Empty: every type.
	Types map[string]bool
	// Limit is the most events returned (at least 1).
	Limit int
	// Scan bounds how many events are looked at when filtering by type
	// (0: no bound); the answer's next says where the scan stopped.
	Scan int
	// Webhook is the webhook reading, if one is: it alone sees the events
	// for it (ForWebhook), whatever its types. Empty (a feed): none of them.
	Webhook string
}

// Events returns the events after q.After that q selects, oldest first,
// and the position to continue from: the last event looked at, which may
// be past the last one returned when a filter skipped some. It returns
// ErrCursorExpired when events after q.After were pruned, and
// ErrCursorAhead when q.After is past the newest event.
func (tx *Tx) Events(q EventQuery) (events []Event, next uint64, err error) {
	if q.Limit < 1 {
		q.Limit = 1
	}
	next = q.After
	if err := tx.EventCursorCheck(q.After); err != nil {
		return nil, next, err
	}
	if q.After == math.MaxUint64 {
		return []Event{}, next, nil // nothing after; After+1 would wrap to the first
	}
	events = []Event{}
	b := tx.tx.Bucket(bucketEvents)
	scanned := 0
	take := func(seq uint64, raw []byte) (bool, error) {
		next = seq
		scanned++
		var e Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return false, fmt.Errorf("store: decode event %d: %w", seq, err)
		}
		e.Seq = seq
		switch {
		case e.ForWebhook != "":
			if e.ForWebhook == q.Webhook {
				events = append(events, e)
			}
		case len(q.Types) == 0 || q.Types[e.Type]:
			events = append(events, e)
		}
		return len(events) >= q.Limit || (q.Scan > 0 && scanned >= q.Scan), nil
	}
	if q.UserID == "" {
		c := b.Cursor()
		for k, v := c.Seek(u64(q.After + 1)); k != nil; k, v = c.Next() {
			if done, err := take(binary.BigEndian.Uint64(k), v); err != nil || done {
				return events, next, err
			}
		}
		return events, next, nil
	}
	prefix := append([]byte(q.UserID), 0)
	c := tx.tx.Bucket(bucketUserEvents).Cursor()
	for k, _ := c.Seek(userEventKey(q.UserID, q.After+1)); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		seq := binary.BigEndian.Uint64(k[len(prefix):])
		raw := b.Get(u64(seq))
		if raw == nil {
			continue // pruned between the index and the log: never in one transaction
		}
		if done, err := take(seq, raw); err != nil || done {
			return events, next, err
		}
	}
	// Nothing more for this user: later positions hold none of theirs.
	if head := tx.EventsHead(); head > next {
		next = head
	}
	return events, next, nil
}

// EventCursorCheck says whether position after names a kept place in the
// log: nil for 0 (before the oldest kept) and from the newest pruned event
// to the newest event; ErrCursorExpired before, ErrCursorAhead past it. A
// position that passes can be read after without its number wrapping.
func (tx *Tx) EventCursorCheck(after uint64) error {
	switch {
	case after > tx.EventsHead():
		return ErrCursorAhead
	case after > 0 && after < tx.EventsPruned():
		return ErrCursorExpired
	}
	return nil
}

// EventsHead is the number of the newest event (0 when none was ever
// recorded): the cursor "now" stands after it.
func (tx *Tx) EventsHead() uint64 { return tx.tx.Bucket(bucketEvents).Sequence() }

// EventsPruned is the number of the newest event pruned (0: none).
func (tx *Tx) EventsPruned() uint64 {
	raw := tx.tx.Bucket(bucketEventsMeta).Get(keyEventsPruned)
	if len(raw) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(raw)
}

// EventsPrune deletes up to max of the oldest events that occurred before
// cutoff, in one short transaction, and returns how many it deleted; call
// it again while it deletes max.
func (db *DB) EventsPrune(cutoff time.Time, max int) (int, error) {
	n := 0
	err := db.Update(func(tx *Tx) error {
		n = 0
		b, users := tx.tx.Bucket(bucketEvents), tx.tx.Bucket(bucketUserEvents)
		// Keys are gathered first: a bbolt cursor may skip keys when
		// deleted from while it walks.
		type doomed struct {
			seq  uint64
			user string
		}
		var gone []doomed
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(gone) < max; k, v = c.Next() {
			var e Event
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("store: decode event: %w", err)
			}
			if !e.OccurredAt.Before(cutoff) {
				break
			}
			gone = append(gone, doomed{binary.BigEndian.Uint64(k), e.UserID})
		}
		for _, d := range gone {
			if err := b.Delete(u64(d.seq)); err != nil {
				return err
			}
			if d.user == "" {
				continue
			}
			if err := users.Delete(userEventKey(d.user, d.seq)); err != nil {
				return err
			}
		}
		if n = len(gone); n == 0 {
			return nil
		}
		return tx.tx.Bucket(bucketEventsMeta).Put(keyEventsPruned, u64(gone[n-1].seq))
	})
	return n, err
}

// EventsSize is how many events are kept and their bytes in the file.
func (tx *Tx) EventsSize() (count int, bytes int64) {
	_ = tx.tx.Bucket(bucketEvents).ForEach(func(k, v []byte) error {
		count++
		bytes += int64(len(k) + len(v))
		return nil
	})
	return count, bytes
}

func createEventBuckets(tx *bolt.Tx) error {
	return createBuckets(tx, bucketEvents, bucketUserEvents, bucketEventsMeta, bucketWebhooks)
}

// EventsLatest returns up to n of the newest events, newest first (not
// those sent to one webhook only).
func (tx *Tx) EventsLatest(n int) ([]Event, error) {
	out := []Event{}
	c := tx.tx.Bucket(bucketEvents).Cursor()
	for k, v := c.Last(); k != nil && len(out) < n; k, v = c.Prev() {
		var e Event
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, fmt.Errorf("store: decode event: %w", err)
		}
		if e.ForWebhook != "" {
			continue
		}
		e.Seq = binary.BigEndian.Uint64(k)
		out = append(out, e)
	}
	return out, nil
}

// EventsBefore returns the position just before the first kept event that
// occurred at or after t: a cursor from which a reader gets the events
// since t (from the oldest kept when t is older). Events are numbered in
// the order they commit, and their times follow that order, so it
// searches by halves.
func (tx *Tx) EventsBefore(t time.Time) (uint64, error) {
	c := tx.tx.Bucket(bucketEvents).Cursor()
	lo, hi := tx.EventsPruned()+1, tx.EventsHead()+1 // the answer+1 is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo)/2
		k, v := c.Seek(u64(mid))
		if k == nil {
			hi = mid
			continue
		}
		var e struct {
			OccurredAt time.Time `json:"occurredAt"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return 0, fmt.Errorf("store: decode event: %w", err)
		}
		if e.OccurredAt.Before(t) {
			lo = binary.BigEndian.Uint64(k) + 1
		} else {
			hi = mid
		}
	}
	return lo - 1, nil
}
