package gmail

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"mailroom/queue/google"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	ref := func(id string) google.MessageRef { return google.MessageRef{ID: id, ThreadID: "t" + id} }
	lc := func(id string, labels ...string) []google.LabelChange {
		return []google.LabelChange{{Message: ref(id), LabelIDs: labels}}
	}
	recs := []google.HistoryRecord{
		{ID: 10, LabelsRemoved: lc("a", "UNREAD")},             // read a
		{ID: 11, LabelsAdded: lc("a", "UNREAD", "Label_1")},    // unread a (wins over 10), labeled a
		{ID: 12, LabelsAdded: lc("b", "TRASH")},                // trashed b
		{ID: 13, Added: []google.MessageRef{ref("c")}},         // added c
		{ID: 14, LabelsRemoved: lc("c", "UNREAD")},             // read c: kept though c is added here
		{ID: 15, LabelsRemoved: lc("a", "Label_1", "STARRED")}, // labeled a: Label_1 removed, STARRED removed
		{ID: 16, LabelsRemoved: lc("b", "TRASH")},              // restored b (wins over 12)
		{ID: 17, Added: []google.MessageRef{ref("d")}},         // added d, then
		{ID: 18, LabelsAdded: lc("d", "STARRED")},              //   labeled d: dropped
		{ID: 19, Deleted: []google.MessageRef{ref("d")}},       //   deleted d: only this stays
		{ID: 20, LabelsRemoved: lc("e", "UNREAD")},             // read e
		{ID: 21, Deleted: []google.MessageRef{{ID: ""}}},       // no id: ignored
	}
	got := classify("acc", recs)
	ev := func(typ, msg string, hid uint64, labels ...LabelChange) typedEvent {
		return typedEvent{Type: typ, Event: Event{AccountID: "acc", MessageID: msg, ThreadID: "t" + msg, HistoryID: hid, Labels: labels}}
	}
	want := []typedEvent{
		ev(TypeMessageUnread, "a", 11),
		ev(TypeMessageLabeled, "a", 15,
			LabelChange{ID: "Label_1", Added: false, HistoryID: 15}, LabelChange{ID: "STARRED", Added: false, HistoryID: 15}),
		ev(TypeMessageRestored, "b", 16),
		ev(TypeMessageAdded, "c", 13),
		ev(TypeMessageRead, "c", 14),
		ev(TypeMessageDeleted, "d", 19),
		ev(TypeMessageRead, "e", 20),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("classify (-want +got):\n%s", diff)
	}
}

// TestThousands: the quota status writes counts with separators.
func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 11548: "11,548", 1200000: "1,200,000", -15000: "-15,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
