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
