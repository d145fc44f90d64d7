package store

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

var bucketWebhooks = []byte("webhooks") // id -> Webhook

// Webhook is an endpoint the service registered to receive events, and
// where its delivery stands.
//
// Delivery is in order, one batch at a time: Batch is the batch being
// delivered (its events are those the webhook takes in (After, Through]),
// and Cursor says that every event up to it was delivered, went to the dead
// letters, or was skipped by a replay. A batch is planned and its task
// recorded in one transaction, and its success moves the cursor in the
// transaction that acks the task.
type Webhook struct {
	ID    string   `json:"id"`
	URL   string   `json:"url"`
	Types []string `json:"types"` // empty: every type
	// UserID limits the webhook to one user's events; empty: every user's
	// (and the events of no user: the dead letters of work of no user).
	UserID    string    `json:"userId,omitempty"`
	Secret    []byte    `json:"secret"` // sealed with the webhook's id
	CreatedAt time.Time `json:"createdAt"`

	Cursor uint64        `json:"cursor"`
	Batch  *WebhookBatch `json:"batch,omitempty"`
	// Generation counts replays: it is part of a batch's id, so that a
	// replayed batch is not taken for a duplicate by its receiver.
	Generation int `json:"generation,omitempty"`

	LastDeliveryAt time.Time `json:"lastDeliveryAt,omitzero"`
	LastError      string    `json:"lastError,omitempty"`
	LastErrorAt    time.Time `json:"lastErrorAt,omitzero"`
	// FailingSince is the first failure since the last delivery; AlertedAt
	// when the alert that it fails for an hour was raised.
	FailingSince time.Time `json:"failingSince,omitzero"`
	AlertedAt    time.Time `json:"alertedAt,omitzero"`
	Delivered    int       `json:"delivered"` // events delivered
}

// WebhookBatch is a batch of a webhook's events being delivered.
type WebhookBatch struct {
	// ID is the webhook-id header: the same for every attempt.
	ID        string    `json:"id"`
	After     uint64    `json:"after"`
	Through   uint64    `json:"through"`
	Count     int       `json:"count"`
	CreatedAt time.Time `json:"createdAt"`
}

// Takes reports whether the webhook receives e.
func (w *Webhook) Takes(e Event) bool {
	if e.ForWebhook != "" {
		return e.ForWebhook == w.ID
	}
	if w.UserID != "" && e.UserID != w.UserID {
		return false
	}
	return len(w.Types) == 0 || slices.Contains(w.Types, e.Type)
}

// Query is the event query of the webhook's events after after.
func (w *Webhook) Query(after uint64, limit int) EventQuery {
	q := EventQuery{After: after, UserID: w.UserID, Limit: limit, Webhook: w.ID}
	if len(w.Types) > 0 {
		q.Types = map[string]bool{}
		for _, t := range w.Types {
			q.Types[t] = true
		}
	}
	return q
}

// WebhookCreate stores a new webhook with its secret sealed; its cursor
// is the newest event, so it receives what happens from now on.
func (tx *Tx) WebhookCreate(w Webhook, secret string) (Webhook, error) {
	if w.URL == "" {
		return w, fmt.Errorf("store: a webhook needs a URL")
	}
	w.ID = NewID()
	w.CreatedAt = time.Now().UTC()
	w.Secret = tx.db.Seal([]byte(secret), "webhook:"+w.ID)
	w.Cursor = tx.EventsHead()
	return w, tx.WebhookPut(w)
}

// WebhookSecret returns the webhook's secret in clear.
func (tx *Tx) WebhookSecret(w Webhook) (string, error) {
	plain, err := tx.db.Unseal(w.Secret, "webhook:"+w.ID)
	if err != nil {
		return "", fmt.Errorf("store: secret of webhook %s: %w", w.ID, err)
	}
	return string(plain), nil
}

// WebhookPut rewrites a webhook.
func (tx *Tx) WebhookPut(w Webhook) error {
	if err := putJSON(tx.tx.Bucket(bucketWebhooks), []byte(w.ID), w); err != nil {
		return fmt.Errorf("store: put webhook %s: %w", w.ID, err)
	}
	return nil
}

// WebhookGet returns one webhook; ErrNotFound when there is none.
func (tx *Tx) WebhookGet(id string) (Webhook, error) {
	var w Webhook
	if err := getJSON(tx.tx.Bucket(bucketWebhooks), []byte(id), &w); err != nil {
		return w, fmt.Errorf("store: webhook %s: %w", id, err)
	}
	return w, nil
}

// Webhooks returns every webhook, by id.
func (tx *Tx) Webhooks() ([]Webhook, error) {
	out := []Webhook{}
	err := tx.tx.Bucket(bucketWebhooks).ForEach(func(k, v []byte) error {
		var w Webhook
		if err := json.Unmarshal(v, &w); err != nil {
			return fmt.Errorf("store: decode webhook %s: %w", k, err)
		}
		out = append(out, w)
		return nil
	})
	return out, err
}

// WebhookDelete removes a webhook and its delivery log; ErrNotFound when
// there is none.
func (tx *Tx) WebhookDelete(id string) error {
	w, err := tx.WebhookGet(id)
	if err != nil {
		return err
	}
	if err := tx.ownerGone(ownerWebhook, id, w.UserID); err != nil {
		return err
	}
	if err := tx.deliveriesDelete(id); err != nil {
		return err
	}
	return tx.tx.Bucket(bucketWebhooks).Delete([]byte(id))
}
