package gmail

import (
	"mailroom/queue/google"
	"mailroom/store"
)

// Event is the payload of the seven message event types.
type Event struct {
	AccountID string `json:"accountId"`
	MessageID string `json:"messageId"`
	ThreadID  string `json:"threadId,omitempty"`
	// HistoryID is the id of the history record of the change; for a
	// labeled event, the newest of its label changes.
	HistoryID uint64 `json:"historyId,string"`
	// Labels are a labeled event's changes, one per label.
	Labels []LabelChange `json:"labels,omitempty"`
	// RecordedAt is when the sync recorded the event (Unix milliseconds).
	RecordedAt int64 `json:"recordedAt,omitempty"`
}

// LabelChange is one label added to or removed from a message.
type LabelChange struct {
	ID        string `json:"id"`
	Added     bool   `json:"added"`
	HistoryID uint64 `json:"historyId,string"`
}

// eventGroup is the payload of a state event task that carries several
// changes of one type and account, from one history page: one task and one
// commit for them all rather than one each. A task of one change carries
// the Event itself, as before groups (an outbox may still hold those).
type eventGroup struct {
	AccountID string  `json:"accountId"`
	Events    []Event `json:"events"`
}

// maxGroup bounds the changes of one eventGroup.
const maxGroup = 100

// eventTask is one task of a page's events: its type and payload (an
// Event or an eventGroup) and the events it carries.
type eventTask struct {
	Type    string
	Payload any
	Events  int
}

// tasksOf turns a page's events into tasks: one per new message (each is
// read from Gmail, and counted for the quota backlog), and the state
// changes of each type in groups of up to maxGroup, in the order
// classify gave them.
func tasksOf(accountID string, events []typedEvent) []eventTask {
	var out []eventTask
	byType := map[string][]Event{}
	var order []string
	for _, te := range events {
		if te.Type == TypeMessageAdded {
			out = append(out, eventTask{Type: te.Type, Payload: te.Event, Events: 1})
			continue
		}
		if _, seen := byType[te.Type]; !seen {
			order = append(order, te.Type)
		}
		byType[te.Type] = append(byType[te.Type], te.Event)
	}
	for _, typ := range order {
		for evs := byType[typ]; len(evs) > 0; {
			n := min(len(evs), maxGroup)
			if n == 1 {
				out = append(out, eventTask{Type: typ, Payload: evs[0], Events: 1})
			} else {
				out = append(out, eventTask{Type: typ, Payload: eventGroup{AccountID: accountID, Events: evs[:n]}, Events: n})
			}
			evs = evs[n:]
		}
	}
	return out
}

// typedEvent is an event and its task type.
type typedEvent struct {
	Type  string
	Event Event
}

// The attributes of a message that events change. Each keeps its own
// history id in the stored message (see store.Message).
const (
	attrExists = "exists"          // added, deleted
	attrRead   = store.LabelUnread // read, unread
	attrTrash  = store.LabelTrash  // trashed, restored
	attrLabels = "labels"          // labeled
)

// classify turns history records into events, de-duplicated: for the same
// message and attribute the later record wins (its event keeps the place of
// the first), a labeled event gathers the latest change of each label, and
// a message deleted within the records gets no state events (it has none).
// A message added within them keeps its state events: message-added does
// not read a message the mirror already holds (the full sync may have
// stored it before these changes), so the changes must come from the
// records themselves; applied to a message read after them, they change
// nothing (each attribute keeps its newest history id).
func classify(accountID string, recs []google.HistoryRecord) []typedEvent {
	type key struct{ msg, attr string }
	var out []typedEvent
	idx := map[key]int{}
	put := func(typ, attr string, ref google.MessageRef, hid uint64, lc *LabelChange) {
		if ref.ID == "" {
			return
		}
		k := key{ref.ID, attr}
		i, seen := idx[k]
		if !seen {
			i = len(out)
			idx[k] = i
			out = append(out, typedEvent{Event: Event{AccountID: accountID, MessageID: ref.ID}})
		}
		te := &out[i]
		if hid < te.Event.HistoryID {
			return // records come in order; keep the later one
		}
		te.Type = typ
		te.Event.HistoryID = hid
		if ref.ThreadID != "" {
			te.Event.ThreadID = ref.ThreadID
		}
		if lc == nil {
			return
		}
		for j := range te.Event.Labels {
			if te.Event.Labels[j].ID == lc.ID {
				te.Event.Labels[j] = *lc
				return
			}
		}
		te.Event.Labels = append(te.Event.Labels, *lc)
	}
	labels := func(ref google.MessageRef, ids []string, added bool, hid uint64) {
		for _, l := range ids {
			switch {
			case l == store.LabelUnread && added:
				put(TypeMessageUnread, attrRead, ref, hid, nil)
			case l == store.LabelUnread:
				put(TypeMessageRead, attrRead, ref, hid, nil)
			case l == store.LabelTrash && added:
				put(TypeMessageTrashed, attrTrash, ref, hid, nil)
			case l == store.LabelTrash:
				put(TypeMessageRestored, attrTrash, ref, hid, nil)
			default:
				put(TypeMessageLabeled, attrLabels, ref, hid, &LabelChange{ID: l, Added: added, HistoryID: hid})
			}
		}
	}
	for _, r := range recs {
		for _, ref := range r.Added {
			put(TypeMessageAdded, attrExists, ref, r.ID, nil)
		}
		for _, lc := range r.LabelsAdded {
			labels(lc.Message, lc.LabelIDs, true, r.ID)
		}
		for _, lc := range r.LabelsRemoved {
			labels(lc.Message, lc.LabelIDs, false, r.ID)
		}
		for _, ref := range r.Deleted {
			put(TypeMessageDeleted, attrExists, ref, r.ID, nil)
		}
	}
	kept := out[:0]
	for _, te := range out {
		if te.Type == TypeMessageAdded || te.Type == TypeMessageDeleted {
			kept = append(kept, te)
			continue
		}
		if i, lifecycle := idx[key{te.Event.MessageID, attrExists}]; !lifecycle || out[i].Type != TypeMessageDeleted {
			kept = append(kept, te)
		}
	}
	return kept
}
