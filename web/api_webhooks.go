package web

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/webhooks"
	"mailroom/store"
)

// Webhooks registers, lists, replays and deletes the service's webhook
// endpoints. *webhooks.Pipeline implements it.
type Webhooks interface {
	Create(ctx context.Context, r webhooks.CreateRequest) (store.Webhook, string, error)
	Webhooks(userID string) ([]store.Webhook, error)
	Webhook(id string) (store.Webhook, error)
	Delete(id string) error
	Replay(id string, after uint64) error
	ReplaySince(id string, since time.Time) error
	SendTest(id string) (store.Event, error)
	Deliveries(id string, before uint64, limit int) ([]store.Delivery, uint64, error)
	Backlog(w store.Webhook) (webhooks.Backlog, error)
}

var _ Webhooks = (*webhooks.Pipeline)(nil)

// webhookJSON is a webhook as the API shows it (never its secret, but in
// the answer that made it).
type webhookJSON struct {
	ID             string     `json:"id"`
	URL            string     `json:"url"`
	Types          []string   `json:"types"`
	UserID         *string    `json:"userId"`
	CreatedAt      time.Time  `json:"createdAt"`
	LastDeliveryAt *time.Time `json:"lastDeliveryAt"`
	LastError      string     `json:"lastError,omitempty"`
	LastErrorAt    *time.Time `json:"lastErrorAt,omitempty"`
	FailingSince   *time.Time `json:"failingSince,omitempty"`
	Delivered      int        `json:"delivered"`
	Secret         string     `json:"secret,omitempty"`
}

func toWebhookJSON(w store.Webhook) webhookJSON {
	opt := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		return &t
	}
	j := webhookJSON{
		ID: w.ID, URL: w.URL, Types: w.Types, CreatedAt: w.CreatedAt, LastDeliveryAt: opt(w.LastDeliveryAt),
		LastError: w.LastError, LastErrorAt: opt(w.LastErrorAt), FailingSince: opt(w.FailingSince), Delivered: w.Delivered,
	}
	if j.Types == nil {
		j.Types = []string{}
	}
	if w.UserID != "" {
		j.UserID = &w.UserID
	}
	return j
}

// mapWebhooksError maps the webhooks pipeline's errors; nil for others.
func mapWebhooksError(err error) *httpError {
	var inv *webhooks.InvalidError
	switch {
	case errors.As(err, &inv):
		return invalid(inv.Field, inv.Message)
	case errors.Is(err, webhooks.ErrNotFound):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "There is no such webhook.", Err: err}
	case errors.Is(err, store.ErrCursorExpired):
		// A replay's cursor must name a kept event (CONTRACT.md): 400, where
		// the feed answers 410 for the same cursor.
		return &httpError{Status: http.StatusBadRequest, Code: "cursor_expired", Field: "after", Message: `The events after this cursor are older than MAILROOM_EVENTS_RETENTION and no longer kept; replay {"since": a time} or from a newer cursor.`, Err: err}
	}
	return nil
}

type webhookHandlers struct {
	*server
	p Webhooks
}

// apiCreate is POST /api/v1/webhooks; a user token's webhook is its user's.
func (h webhookHandlers) apiCreate(c *gin.Context) {
	var req struct {
		URL    string   `json:"url"`
		Types  []string `json:"types"`
		UserID string   `json:"userId"`
	}
	if err := bindJSON(c, &req); err != nil {
		h.fail(c, err)
		return
	}
	if who := callerOf(c); !who.admin {
		req.UserID = who.userID
	} else if req.UserID != "" {
		if !h.userExists(req.UserID) {
			h.fail(c, &httpError{Status: http.StatusNotFound, Code: "not_found", Field: "userId", Message: "There is no such user."})
			return
		}
	}
	w, secret, err := h.p.Create(c.Request.Context(), webhooks.CreateRequest{URL: req.URL, Types: req.Types, UserID: req.UserID})
	if err != nil {
		h.fail(c, err)
		return
	}
	j := toWebhookJSON(w)
	j.Secret = secret
	h.writeJSON(c, http.StatusCreated, j)
}

func (h webhookHandlers) userExists(id string) bool {
	return h.deps.DB.View(func(tx *store.Tx) error { _, err := tx.UserGet(id); return err }) == nil
}

// apiList is GET /api/v1/webhooks (a user token: its user's).
func (h webhookHandlers) apiList(c *gin.Context) {
	hooks, err := h.p.Webhooks(c.Query("userId"))
	if err != nil {
		h.fail(c, err)
		return
	}
	out := make([]webhookJSON, 0, len(hooks))
	for _, w := range hooks {
		out = append(out, toWebhookJSON(w))
	}
	h.writeJSON(c, http.StatusOK, gin.H{"webhooks": out})
}

func (h webhookHandlers) apiGet(c *gin.Context) {
	w, err := h.p.Webhook(c.Param("id"))
	if err != nil {
		h.fail(c, err)
		return
	}
	h.writeJSON(c, http.StatusOK, toWebhookJSON(w))
}

func (h webhookHandlers) apiDelete(c *gin.Context) {
	if err := h.p.Delete(c.Param("id")); err != nil {
		h.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// apiReplay is POST /api/v1/webhooks/{id}/replay {"after": cursor} or
// {"since": RFC 3339 time}: the webhook receives again every event it
// takes after the cursor, or since the time (apiReplaySince).
func (h webhookHandlers) apiReplay(c *gin.Context) {
	var req struct {
		After string `json:"after"`
		Since string `json:"since"`
	}
	if c.Request.ContentLength != 0 {
		if err := bindJSON(c, &req); err != nil {
			h.fail(c, err)
			return
		}
	}
	if err := replayOneOf(req.After, req.Since); err != nil {
		h.fail(c, err)
		return
	}
	if req.Since != "" {
		h.apiReplaySince(c, req.Since)
		return
	}
	var after uint64
	if req.After != "" {
		seq, ok := store.ParseEventCursor(req.After)
		if !ok {
			h.fail(c, invalid("after", `after must be a cursor this server gave out (an events answer's "next").`))
			return
		}
		after = seq
	}
	if err := h.p.Replay(c.Param("id"), after); err != nil {
		h.fail(c, err)
		return
	}
	h.writeJSON(c, http.StatusAccepted, gin.H{"replaying": true})
}

// webhookIn: the webhook whose id is the path parameter param.
func webhookIn(param string) scopeRule {
	return func(s *server, c *gin.Context) (scopeCheck, error) {
		id := c.Param(param)
		owner, err := ownerOf(s, func(tx *store.Tx) (string, error) { w, err := tx.WebhookGet(id); return w.UserID, err })
		return scopeCheck{owner, &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "There is no such webhook."}}, err
	}
}
