package gmail_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"mailroom/internal/googlefake"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
)

// eventTypes are the gmail event task types, state changes first.
var eventTypes = []string{gmail.TypeMessageRead, gmail.TypeMessageUnread, gmail.TypeMessageTrashed,
	gmail.TypeMessageRestored, gmail.TypeMessageDeleted, gmail.TypeMessageLabeled, gmail.TypeMessageAdded}

// runEvents runs, once each, the event tasks waiting now whose message
// is one of ids (none: all), and returns how many ran.
func (e *env) runEvents(ids ...string) int {
	e.t.Helper()
	n := 0
	for _, typ := range eventTypes {
		for _, r := range e.records(typ) {
			ev := decodeEv(e.t, r.Payload)
			if len(ids) > 0 && !slices.Contains(ids, ev.MessageID) {
				continue
			}
			if err := e.run(r, r.Payload); err != nil {
				e.t.Fatalf("%s %s: %v", typ, ev.MessageID, err)
			}
			n++
		}
	}
	return n
}

// runFullSyncOnce runs the waiting gmail:full-sync task once.
func (e *env) runFullSyncOnce() {
	e.t.Helper()
	e.runAll(gmail.TypeFullSync)
}

// reads is how many content reads (messages.get, threads.get) Gmail
// answered, and their units.
func reads(e *env, email string) (calls, units int) {
	return e.fake.Calls(googlefake.MethodMessagesGet) + e.fake.Calls(googlefake.MethodThreadsGet), fetchUnits(e, email)
}

// TestNoMessageReadTwiceWhenFullAndHistorySyncOverlap: during a resync,
// two new messages are both listed by the full sync and announced by the
// history sync (their message-added events were recorded before the full
// sync began). The one the full sync stored first is not read again by its
// message-added, and the one message-added read first is not read again
// by the full sync: the whole resync reads each message of the mailbox
// once (Google's floor of its gets), and no read asks for the body (no
// rule reads bodies). Before, both were read twice.
func TestNoMessageReadTwiceWhenFullAndHistorySyncOverlap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 1, FullSyncRunMax: 1}})
	acc := e.connect(ann, 0)
	g := e.fake.Gmail
	for i := range 6 {
		if _, err := g.AddMessage(ann, googlefake.Message{From: "p@example.org", To: ann, Subject: "old " + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 {
		e.runFullSyncOnce()
	}
	e.syncNow()
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("after the first full sync (-mailbox +mirror):\n%s", diff)
	}
	x1, err := g.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "new 1"})
	if err != nil {
		t.Fatal(err)
	}
	x2, err := g.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "new 2"})
	if err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	e.runAll(gmail.TypeSync)
	if n := len(e.records(gmail.TypeMessageAdded)); n != 2 {
		t.Fatalf("%d message-added events, want 2", n)
	}
	e.fake.ResetCounters()
	if err := e.p.Resync(context.Background(), acc.ID); err != nil {
		t.Fatal(err)
	}
	// The first run begins the full sync, lists the mailbox (newest first)
	// and reads one message: x2.
	e.runFullSyncOnce()
	if m, err := e.p.Message(acc.ID, x2); err != nil || m.Subject != "new 2" {
		t.Fatalf("the full sync's first run did not store x2: %+v, %v", m, err)
	}
	before, _ := reads(e, ann)
	if n := e.runEvents(x1, x2); n != 2 {
		t.Fatalf("ran %d message-added events, want 2", n)
	}
	if after, _ := reads(e, ann); after-before != 1 {
		t.Errorf("message-added of x1 and x2 made %d reads, want 1 (x2 is in the mirror)", after-before)
	}
	for range 20 {
		e.runFullSyncOnce()
	}
	e.syncNow()
	e.runEvents()
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("after the resync (-mailbox +mirror):\n%s", diff)
	}
	pr := google.MustPrices(google.DefaultPrices)
	if calls, units := reads(e, ann); calls != 8 || units != 8*pr.MessagesGet {
		t.Errorf("the resync made %d reads (%d units) for 8 lone messages, want 8 (%d units)", calls, units, 8*pr.MessagesGet)
	}
}

// TestNoReadOfAMessageAThreadReadBrought: a reply arrives in a thread of
// three after the full sync listed it and before it reads it; the full
// sync's threads.get brings the reply too, and keeps it. The reply is then
// starred, and the history sync reads its arrival and its star in one
// page: its message-added reads nothing (the mirror holds it), and the
// star comes from the history record as a labeled event, so the mirror
// ends equal to the mailbox. Before, the reply the threads.get brought was
// dropped and read again by message-added.
func TestNoReadOfAMessageAThreadReadBrought(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true, cfg: gmail.Config{FullSyncSlice: 1, FullSyncRunMax: 1}})
	refresh := e.fake.AddAccount(ann)
	g := e.fake.Gmail
	var thread string
	for i := range 3 {
		id, err := g.AddMessage(ann, googlefake.Message{ThreadID: thread, From: "p@example.org", To: ann, Subject: "thread"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			thread = id
		}
	}
	// The newest message is alone: the first run reads it and stops.
	if _, err := g.AddMessage(ann, googlefake.Message{From: "q@example.org", To: ann, Subject: "lone"}); err != nil {
		t.Fatal(err)
	}
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	e.runFullSyncOnce()
	if a := e.account(acc.ID); a.FullSyncStart == nil || !a.FullSyncStart.ListedAll || a.FullSyncStart.Fetched != 1 {
		t.Fatalf("after the first run: %+v, want the mailbox listed and one message read", a.FullSyncStart)
	}
	reply, err := g.AddMessage(ann, googlefake.Message{ThreadID: thread, From: "p@example.org", To: ann, Subject: "Re: thread"})
	if err != nil {
		t.Fatal(err)
	}
	e.runFullSyncOnce() // one threads.get: the thread and its reply
	if m, err := e.p.Message(acc.ID, reply); err != nil || m.Subject != "Re: thread" {
		t.Fatalf("the threads.get's reply was not stored: %+v, %v", m, err)
	}
	if err := g.AddLabels(ann, reply, googlefake.LabelStarred); err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	before, _ := reads(e, ann)
	e.syncNow()
	e.runEvents()
	if after, _ := reads(e, ann); after != before {
		t.Errorf("the history sync's events made %d reads, want none", after-before)
	}
	if diff := e.diff(acc.ID, ann); diff != "" {
		t.Fatalf("mirror differs (-mailbox +mirror):\n%s", diff)
	}
	pr := google.MustPrices(google.DefaultPrices)
	if _, units := reads(e, ann); units != pr.ThreadsGet+pr.MessagesGet {
		t.Errorf("reads cost %d units, want one threads.get and one messages.get (%d)", units, pr.ThreadsGet+pr.MessagesGet)
	}
}

func decodeEv(t *testing.T, payload []byte) gmail.Event {
	t.Helper()
	var ev gmail.Event
	if err := json.Unmarshal(payload, &ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

// TestBodyReadOnlyWhenARuleReadsBodies: with no rule that reads bodies,
// a full sync and new mail make no read of format full (each get costs
// the metadata price). With one, the full sync reads the message with
// its body and keeps the rule's verdict, and the message-added of a
// message the mirror holds with its verdicts reads nothing again (before,
// the mirror keeping no bodies, it read the body once more: a message
// read twice because the full sync and the history sync overlapped); a
// new message that the mirror does not hold is read once, with its body,
// and keeps its verdict too.
func TestBodyReadOnlyWhenARuleReadsBodies(t *testing.T) {
	t.Parallel()
	pr := google.MustPrices(google.DefaultPrices)
	for _, c := range []struct {
		name     string
		rules    gmail.RuleApplier
		fullSync int // units of the full sync's messages.get
		fresh    int // units of message-added's read of a message not in the mirror
	}{
		{"no body rule", gmail.NoRules{}, pr.MessagesGet, pr.MessagesGet},
		{"a body rule", bodyRules{}, pr.MessagesGetBody, pr.MessagesGetBody},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envOptions{noStart: true, rules: c.rules})
			acc := e.connect(ann, 0)
			e.syncNow()
			id, err := e.fake.Gmail.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "new", Body: "text"})
			if err != nil {
				t.Fatal(err)
			}
			e.notify(ann)
			e.runAll(gmail.TypeSync)
			// A resync stores the message before its message-added runs.
			if err := e.p.Resync(context.Background(), acc.ID); err != nil {
				t.Fatal(err)
			}
			e.runFullSyncOnce()
			gets := func() int { return e.fake.Gmail.QuotaUnitsByMethod(ann)[googlefake.MethodMessagesGet] }
			if got := gets(); got != c.fullSync {
				t.Fatalf("the full sync's get cost %d units, want %d", got, c.fullSync)
			}
			if n := e.runEvents(id); n != 1 {
				t.Fatalf("ran %d events, want message-added", n)
			}
			if got := gets() - c.fullSync; got != 0 {
				t.Errorf("message-added of a message the full sync read cost %d units, want none", got)
			}
			// A new message, not in the mirror: one read.
			fresh, err := e.fake.Gmail.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "newer", Body: "more text"})
			if err != nil {
				t.Fatal(err)
			}
			before := gets()
			e.notify(ann)
			e.runAll(gmail.TypeSync)
			if n := e.runEvents(fresh); n != 1 {
				t.Fatalf("ran %d events, want message-added", n)
			}
			if got := gets() - before; got != c.fresh {
				t.Errorf("message-added of a new message cost %d units, want %d", got, c.fresh)
			}
			if c.rules == (bodyRules{}) {
				for _, mid := range []string{id, fresh} {
					if m := e.message(acc.ID, mid); len(m.BodyVerdicts) != 1 || !m.BodyVerdicts[0].Match {
						t.Errorf("message %s kept verdicts %+v, want the rule's match", mid, m.BodyVerdicts)
					}
				}
			}
		})
	}
}
