package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
)

// The delivery log: every attempt to deliver a batch to a webhook, kept
// as long as the events (MAILROOM_EVENTS_RETENTION) and pruned with them.
// Attempts are numbered by the log bucket's sequence, so they are pruned
// oldest first; an index by webhook lists one webhook's, newest first.
var (
	bucketDeliveries     = []byte("webhook_deliveries")      // u64(seq) -> Delivery
	bucketDeliveryByHook = []byte("webhook_deliveries_hook") // webhook id \x00 u64(seq) -> nil
)

// DeliveryResponseMax is the most bytes of a receiver's answer the log
// keeps.
const DeliveryResponseMax = 1024

// Delivery is one attempt to deliver a batch to a webhook.
type Delivery struct {
	Seq       uint64    `json:"-"`
	WebhookID string    `json:"webhookId"`
	BatchID   string    `json:"batchId"` // the webhook-id header
	Attempt   int       `json:"attempt"` // from 1
	At        time.Time `json:"at"`
	// Status is the receiver's HTTP status; 0 when it gave none (refused,
	// timed out).
	Status  int           `json:"status,omitempty"`
	Latency time.Duration `json:"latency"`
	Events  int           `json:"events"`
	// Response is the start of the receiver's answer (at most
	// DeliveryResponseMax bytes).
	Response string `json:"response,omitempty"`
	Error    string `json:"error,omitempty"` // empty: delivered
}

// ID is the attempt's public id.
func (d Delivery) ID() string { return fmt.Sprintf("dlv_%016x", d.Seq) }

const deliveryCursorPrefix = "dlc_"

// DeliveryCursor is the opaque cursor of the position before attempt seq
// (newest first: the next page holds older attempts).
func DeliveryCursor(seq uint64) string { return seqCursor(deliveryCursorPrefix, seq) }

// ParseDeliveryCursor reads a cursor DeliveryCursor made.
func ParseDeliveryCursor(s string) (uint64, bool) {
	return parseSeqCursor(deliveryCursorPrefix, s)
}

func createDeliveryBuckets(tx *bolt.Tx) error {
	return createBuckets(tx, bucketDeliveries, bucketDeliveryByHook)
}

func deliveryKey(webhookID string, seq uint64) []byte {
	k := make([]byte, 0, len(webhookID)+9)
	k = append(k, webhookID...)
	k = append(k, 0)
	return append(k, u64(seq)...)
}

// DeliveryAppend records an attempt and returns it numbered. The response
// is cut to DeliveryResponseMax bytes of valid UTF-8.
func (tx *Tx) DeliveryAppend(d Delivery) (Delivery, error) {
	if d.WebhookID == "" {
		return d, fmt.Errorf("store: a delivery needs a webhook")
	}
	d.Response = cutUTF8(d.Response, DeliveryResponseMax)
	b := tx.tx.Bucket(bucketDeliveries)
	seq, err := b.NextSequence()
	if err != nil {
		return d, err
	}
	d.Seq = seq
	if err := putJSON(b, u64(seq), d); err != nil {
		return d, fmt.Errorf("store: put delivery: %w", err)
	}
	return d, tx.tx.Bucket(bucketDeliveryByHook).Put(deliveryKey(d.WebhookID, seq), nil)
}

// cutUTF8 is s as valid UTF-8, cut to at most n bytes on a rune's edge.
func cutUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) { // only the last rune can be cut
		s = s[:len(s)-1]
	}
	return s
}

// Deliveries returns up to limit of the webhook's attempts before the
// position before (0: from the newest), newest first, and the position the
// next page starts at (0: none is older).
func (tx *Tx) Deliveries(webhookID string, before uint64, limit int) ([]Delivery, uint64, error) {
	out := []Delivery{}
	prefix := append([]byte(webhookID), 0)
	b := tx.tx.Bucket(bucketDeliveries)
	c := tx.tx.Bucket(bucketDeliveryByHook).Cursor()
	if before == 0 {
		before = ^uint64(0) // past every attempt
	}
	// The newest attempt before the position: seek to it and step back.
	k, _ := c.Seek(deliveryKey(webhookID, before))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8; k, _ = c.Prev() {
		seq := binary.BigEndian.Uint64(k[len(prefix):])
		if len(out) == limit {
			return out, seq + 1, nil
		}
		var d Delivery
		if err := getJSON(b, u64(seq), &d); err != nil {
			return nil, 0, fmt.Errorf("store: delivery %d: %w", seq, err)
		}
		d.Seq = seq
		out = append(out, d)
	}
	return out, 0, nil
}

// deliveriesDelete removes a webhook's delivery log.
func (tx *Tx) deliveriesDelete(webhookID string) error {
	prefix := append([]byte(webhookID), 0)
	var keys [][]byte
	c := tx.tx.Bucket(bucketDeliveryByHook).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, append([]byte(nil), k...))
	}
	for _, k := range keys {
		if err := tx.tx.Bucket(bucketDeliveryByHook).Delete(k); err != nil {
			return err
		}
		if err := tx.tx.Bucket(bucketDeliveries).Delete(k[len(prefix):]); err != nil {
			return err
		}
	}
	return nil
}

// DeliveriesPrune deletes up to max of the oldest attempts made before
// cutoff, in one short transaction, and returns how many it deleted; call
// it again while it deletes max.
func (db *DB) DeliveriesPrune(cutoff time.Time, max int) (int, error) {
	n := 0
	err := db.Update(func(tx *Tx) error {
		b, byHook := tx.tx.Bucket(bucketDeliveries), tx.tx.Bucket(bucketDeliveryByHook)
		var gone []Delivery
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(gone) < max; k, v = c.Next() {
			var d Delivery
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("store: decode delivery: %w", err)
			}
			if !d.At.Before(cutoff) {
				break
			}
			d.Seq = binary.BigEndian.Uint64(k)
			gone = append(gone, d)
		}
		for _, d := range gone {
			if err := b.Delete(u64(d.Seq)); err != nil {
				return err
			}
			if err := byHook.Delete(deliveryKey(d.WebhookID, d.Seq)); err != nil {
				return err
			}
		}
		n = len(gone)
		return nil
	})
	return n, err
}
