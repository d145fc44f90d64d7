package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// hookDelivery is one event as one webhook first received it.
type hookDelivery struct {
	hook       string
	id, typ    string
	userID     string
	accountID  string
	occurredAt time.Time
	data       json.RawMessage
	at         time.Time // when the receiver answered its POST
}

// hookReceiver is the events scenario's receiver: one path per webhook
// (/hook/NAME), each checked with that webhook's secret by the Standard
// Webhooks library. It keeps each (webhook, event id) once, counts a
// repeat as a duplicate, and answers a POST whose signature does not
// verify with 401, noting it: a bad signature fails the run.
type hookReceiver struct {
	mu        sync.Mutex
	verifiers map[string]*standardwebhooks.Webhook // webhook name -> its secret's verifier
	seen      map[seenKey]bool
	got       []hookDelivery // not yet taken (take)
	dups      int
	posts     int
	bad       []string // why each refused POST was refused
}

func newHookReceiver() *hookReceiver {
	return &hookReceiver{verifiers: map[string]*standardwebhooks.Webhook{}, seen: map[seenKey]bool{}}
}

// seenKey is a webhook's event the receiver took (its strings are the
// delivery's own: no key is built per event).
type seenKey struct{ hook, id string }

// register creates webhook name (create returns its secret) and lets its
// deliveries in, checked with that secret. POSTs wait while it runs, so
// none arrives before the receiver knows the secret.
func (h *hookReceiver) register(name string, create func() (secret string, err error)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	secret, err := create()
	if err != nil {
		return err
	}
	v, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fmt.Errorf("webhook %s: its secret: %w", name, err)
	}
	h.verifiers[name] = v
	return nil
}

// receivedEvent is an event of a delivery's body.
type receivedEvent struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	OccurredAt time.Time       `json:"occurredAt"`
	UserID     string          `json:"userId"`
	AccountID  string          `json:"accountId"`
	Data       json.RawMessage `json:"data"`
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	name := strings.TrimPrefix(req.URL.Path, "/hook/")
	raw, err := io.ReadAll(req.Body)
	h.mu.Lock()
	v := h.verifiers[name]
	h.mu.Unlock()
	var body struct {
		Events []receivedEvent `json:"events"`
	}
	switch {
	case err != nil:
		h.refuse(w, fmt.Sprintf("webhook %s: reading the body: %v", name, err))
		return
	case v == nil:
		h.refuse(w, fmt.Sprintf("a POST to %s, which names no webhook", req.URL.Path))
		return
	}
	if err := v.Verify(raw, req.Header); err != nil {
		h.refuse(w, fmt.Sprintf("webhook %s: the signature does not verify: %v", name, err))
		return
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		h.refuse(w, fmt.Sprintf("webhook %s: the body is not {\"events\":[…]}: %v", name, err))
		return
	}
	now := time.Now()
	h.mu.Lock()
	h.posts++
	for _, e := range body.Events {
		key := seenKey{name, e.ID}
		if h.seen[key] {
			h.dups++
			continue
		}
		h.seen[key] = true
		h.got = append(h.got, hookDelivery{hook: name, id: e.ID, typ: e.Type, userID: e.UserID, accountID: e.AccountID, occurredAt: e.OccurredAt, data: e.Data, at: now})
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *hookReceiver) refuse(w http.ResponseWriter, why string) {
	h.mu.Lock()
	h.bad = append(h.bad, why)
	h.mu.Unlock()
	http.Error(w, why, http.StatusUnauthorized)
}

// check is the run's verdict on what the receiver refused: an error naming
// the first refusal and how many there were, or nil.
func (h *hookReceiver) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.bad) == 0 {
		return nil
	}
	return fmt.Errorf("the receiver refused %d POSTs; the first: %s", len(h.bad), h.bad[0])
}

// take returns the distinct deliveries since the last take, and forgets
// them: a reader that takes each once (the events scenario's tally) keeps
// what it needs, and the receiver, which runs in the process a scenario
// measures, does not hold every delivery of a run in its heap.
func (h *hookReceiver) take() []hookDelivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}

// deliveries returns the distinct deliveries not taken, the duplicates
// and the POSTs that verified.
func (h *hookReceiver) deliveries() (got []hookDelivery, dups, posts int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.got[:len(h.got):len(h.got)], h.dups, h.posts
}
