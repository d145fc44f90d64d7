package gmail_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// records returns the outbox records of a task type, in id order.
func (e *env) records(typ string) []queue.Record {
	e.t.Helper()
	var out []queue.Record
	err := e.db.View(func(tx *store.Tx) error {
		return e.q.Tasks(tx, typ, func(r queue.Record) bool {
			out = append(out, r)
			return true
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// run runs a record's handler as the queue would, with payload.
func (e *env) run(rec queue.Record, payload []byte) error {
	tt, _ := e.table.Lookup(rec.Type)
	return tt.Handler(context.Background(), &queue.Task{ID: rec.ID, Type: rec.Type, Queue: rec.Queue, Payload: payload, Attempt: 1})
}

// runAll runs every waiting task of a type once, failing the test on an
// error.
func (e *env) runAll(typ string) {
	e.t.Helper()
	for _, r := range e.records(typ) {
		if err := e.run(r, r.Payload); err != nil {
			e.t.Fatalf("%s: %v", typ, err)
		}
	}
}

// syncNow runs the waiting gmail:full-sync and gmail:sync tasks until
// none is left (a full sync records a history sync after it).
func (e *env) syncNow() {
	e.t.Helper()
	for range 5 {
		recs := append(e.records(gmail.TypeFullSync), e.records(gmail.TypeSync)...)
		if len(recs) == 0 {
			return
		}
		for _, r := range recs {
			if err := e.run(r, r.Payload); err != nil {
				e.t.Fatalf("%s: %v", r.Type, err)
			}
		}
	}
	e.t.Fatal("sync tasks keep coming")
}

func permutations(n int) [][]int {
	if n == 1 {
		return [][]int{{0}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// TestOrderingAnyQueueOrder: a message is added, read, made unread and read
// again, each change synced on its own (four event tasks in three queues).
// Whatever order the handlers run in, and whether or not message-added
// (which fetches the message) runs first, the mirror ends as Gmail: read,
// with Gmail's history id.
func TestOrderingAnyQueueOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 0)
	e.syncNow()

	g := e.fake.Gmail
	id, err := g.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "order", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	for _, change := range []func(string, string) error{nil, g.MarkRead, g.MarkUnread, g.MarkRead} {
		if change != nil {
			if err := change(ann, id); err != nil {
				t.Fatal(err)
			}
		}
		e.notify(ann)
		e.syncNow()
	}
	var events []queue.Record
	for _, typ := range []string{gmail.TypeMessageAdded, gmail.TypeMessageRead, gmail.TypeMessageUnread} {
		events = append(events, e.records(typ)...)
	}
	if len(events) != 4 {
		t.Fatalf("want 4 events (added, read, unread, read), got %d", len(events))
	}
	want, _ := g.Message(ann, id)

	// Each order runs against its own account of the same mailbox.
	for i, order := range permutations(len(events)) {
		var u store.User
		if err := e.db.Update(func(tx *store.Tx) (err error) {
			u, err = tx.UserCreate(fmt.Sprintf("u%d@example.com", i), "u")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		other, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: u.ID, Email: ann, Token: google.Token{RefreshToken: e.fake.AddAccount(ann)}})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, k := range order {
			rec := events[k]
			var ev gmail.Event
			if err := json.Unmarshal(rec.Payload, &ev); err != nil {
				t.Fatal(err)
			}
			ev.AccountID = other.ID
			payload, _ := json.Marshal(ev)
			if err := e.run(rec, payload); err != nil {
				t.Fatalf("order %v: %s: %v", order, rec.Type, err)
			}
			names = append(names, fmt.Sprintf("%s@%d", rec.Type[len("gmail:message-"):], ev.HistoryID))
		}
		got, err := e.p.Message(other.ID, id)
		if err != nil {
			t.Fatalf("order %v: %v", names, err)
		}
		if got.Unread || got.HistoryID != fmt.Sprint(want.HistoryID) || got.Subject != "order" {
			t.Errorf("order %v: unread=%v historyId=%s subject=%q; want read at %d", names, got.Unread, got.HistoryID, got.Subject, want.HistoryID)
		}
	}
	_ = acc
}

// TestOrderingWithSlowFetch runs the real queues: the message's fetch is
// slow (emulator latency), so its read, unread and read events all run
// before message-added stores it; the final state is Gmail's.
func TestOrderingWithSlowFetch(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var applied []string
	e := newEnv(t, envOptions{handled: func(typ string, _ gmail.Event) {
		mu.Lock()
		applied = append(applied, typ)
		mu.Unlock()
	}})
	acc := e.connect(ann, 5)
	e.waitConverged(acc.ID, ann, 20*time.Second)

	g := e.fake.Gmail
	id, err := g.AddMessage(ann, googlefake.Message{From: "bob@example.com", To: ann, Subject: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, MessageID: id, Latency: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e.notify(ann)
	for _, change := range []func(string, string) error{g.MarkRead, g.MarkUnread, g.MarkRead} {
		time.Sleep(50 * time.Millisecond)
		if err := change(ann, id); err != nil {
			t.Fatal(err)
		}
		e.notify(ann)
	}
	e.waitConverged(acc.ID, ann, 20*time.Second)
	if h.Fired() == 0 {
		t.Fatal("the slow fetch never happened")
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(applied); n < 2 || applied[n-1] != gmail.TypeMessageAdded {
		t.Fatalf("message-added should have finished last, after the state events: %v", applied)
	}
}
