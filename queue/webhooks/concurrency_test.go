package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"mailroom/store"
)

// TestSlowReceiversDoNotQueueBehindEachOther: every webhook's batch is in
// flight at once, however many webhooks wait on slow receivers (one batch
// per webhook at a time, but webhooks do not take turns). With 8 workers
// for all webhooks, 100 webhooks took a batch each in turn, 8 at a time.
func TestSlowReceiversDoNotQueueBehindEachOther(t *testing.T) {
	t.Parallel()
	const users, perUser = 4, 10 // 40 webhooks
	e := newEnv(t, Config{AllowPrivate: true})
	var (
		mu             sync.Mutex
		inFlight, most int
		all            = make(chan struct{})
		closeAll       sync.Once
		release        = make(chan struct{}) // the test is over
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		if inFlight == users*perUser {
			closeAll.Do(func() { close(all) })
		}
		mu.Unlock()
		// A slow receiver: it answers once every webhook's POST is in
		// flight (or the delivery gave up, or the test is over).
		select {
		case <-all:
		case <-r.Context().Done():
		case <-release:
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handlers
	for u := range users {
		for h := range perUser {
			if _, _, err := e.p.Create(context.Background(), CreateRequest{URL: fmt.Sprintf("%s/u%d/h%d", srv.URL, u, h), UserID: fmt.Sprintf("u%d", u)}); err != nil {
				t.Fatal(err)
			}
		}
		e.emit(1, fmt.Sprintf("u%d", u), store.EventFormState)
	}
	select {
	case <-all:
	case <-time.After(20 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	if most != users*perUser {
		t.Errorf("at most %d of %d webhooks' batches in flight at once, want all", most, users*perUser)
	}
}
