package googlefake_test

import (
	"testing"

	"mailroom/internal/googlefake"
)

// A restarted demo keeps ids apart from an earlier run's: HistoryStart
// offsets the mailboxes' history ids, SkipIDs the message id sequence.
func TestHistoryStartAndSkipIDs(t *testing.T) {
	t.Parallel()
	first := googlefake.New(googlefake.Options{})
	first.AddAccount(ann)
	a, err := first.Gmail.AddMessage(ann, googlefake.Message{Subject: "one"})
	if err != nil {
		t.Fatal(err)
	}

	const start = 5_000_000_000
	second := googlefake.New(googlefake.Options{HistoryStart: start})
	second.AddAccount(ann)
	if got := second.Gmail.HistoryID(ann); got != start+1_000_000 {
		t.Fatalf("history id of the first mailbox %d, want %d", got, start+1_000_000)
	}
	same, err := second.Gmail.AddMessage(ann, googlefake.Message{Subject: "one"})
	if err != nil {
		t.Fatal(err)
	}
	if same != a {
		t.Fatalf("without SkipIDs the sequence restarts: got %s, want %s", same, a)
	}
	second.SkipIDs(1000)
	second.SkipIDs(10) // never goes back
	b, err := second.Gmail.AddMessage(ann, googlefake.Message{Subject: "two"})
	if err != nil {
		t.Fatal(err)
	}
	if b <= same || len(b) != len(same) {
		t.Fatalf("after SkipIDs: id %s, want one after %s of the same length", b, same)
	}
	m, _ := second.Gmail.Message(ann, b)
	if m.HistoryID <= start+1_000_000 {
		t.Fatalf("message history id %d not above the mailbox start", m.HistoryID)
	}
	third := googlefake.New(googlefake.Options{})
	third.AddAccount(ann)
	third.SkipIDs(1000)
	c, _ := third.Gmail.AddMessage(ann, googlefake.Message{Subject: "x"})
	if c != b {
		t.Fatalf("SkipIDs(1000) then one message: id %s, want %s", c, b)
	}
}
