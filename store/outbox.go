package store

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// OutboxRecord is one piece of work that must happen: written in the same
// transaction as the state change that makes it necessary, handed to the
// broker after commit, and removed when its task succeeds or moves to the
// dead-letter archive.
type OutboxRecord struct {
	// ID is assigned on add: 16 hex digits of a store-wide sequence, so ids
	// sort in insertion order. It is also the broker's task id.
	ID      string          `json:"id,omitempty"`
	Queue   string          `json:"queue,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Key, when set, makes the record unique: adding a record whose key is
	// held by a live record returns that record instead.
	Key       string    `json:"key,omitempty"`
	RunAt     time.Time `json:"runAt,omitzero"`
	CreatedAt time.Time `json:"createdAt"`
	// Group, when set, counts the record under its type and group (an
	// account, say) until it leaves the outbox, with Weight (what it
	// counts for: the threads of a batch); see OutboxGroupCount.
	Group  string `json:"group,omitempty"`
	Weight int    `json:"weight,omitempty"`
	// Failures counts failed attempts so far (durable across restarts).
	Failures      int       `json:"failures,omitempty"`
	FirstFailedAt time.Time `json:"firstFailedAt,omitzero"`
	LastFailedAt  time.Time `json:"lastFailedAt,omitzero"`
	LastError     string    `json:"lastError,omitempty"`
}

// Seq returns the numeric sequence behind an outbox id.
func Seq(id string) (uint64, error) {
	b, err := hex.DecodeString(id)
	if err != nil || len(b) != 8 {
		return 0, fmt.Errorf("store: bad outbox id %q", id)
	}
	return binary.BigEndian.Uint64(b), nil
}

func outboxQueue(tx *bolt.Tx, queue string, create bool) (*bolt.Bucket, error) {
	root := tx.Bucket(bucketOutbox)
	if b := root.Bucket([]byte(queue)); b != nil || !create {
		return b, nil
	}
	return root.CreateBucket([]byte(queue))
}

// OutboxAdd stores r, assigning its ID and CreatedAt. When r.Key is held by
// a live record, nothing is written and that record is returned with
// added=false.
func (tx *Tx) OutboxAdd(r OutboxRecord) (rec OutboxRecord, added bool, err error) {
	if r.Queue == "" || r.Type == "" {
		return r, false, fmt.Errorf("store: outbox record needs a queue and a type")
	}
	if err := checkGroup(r); err != nil {
		return r, false, err
	}
	keys := tx.tx.Bucket(bucketOutboxKeys)
	if r.Key != "" {
		if held := keys.Get([]byte(r.Key)); held != nil {
			existing, err := tx.OutboxGet(r.Queue, string(held))
			if err == nil {
				return existing, false, nil
			}
		}
	}
	b, err := outboxQueue(tx.tx, r.Queue, true)
	if err != nil {
		return r, false, fmt.Errorf("store: outbox bucket %s: %w", r.Queue, err)
	}
	seq, err := tx.tx.Bucket(bucketOutbox).NextSequence()
	if err != nil {
		return r, false, err
	}
	r.ID = hex.EncodeToString(u64(seq))
	if r.CreatedAt.IsZero() {
		r.CreatedAt = time.Now().UTC()
	}
	if err := putOutbox(b, seq, r); err != nil {
		return r, false, fmt.Errorf("store: put outbox record: %w", err)
	}
	if err := countGroup(tx.tx, r, 1); err != nil {
		return r, false, err
	}
	if r.Key != "" {
		if err := keys.Put([]byte(r.Key), []byte(r.ID)); err != nil {
			return r, false, err
		}
	}
	return r, true, nil
}

// OutboxGet returns the live record with that id.
func (tx *Tx) OutboxGet(queue, id string) (OutboxRecord, error) {
	var r OutboxRecord
	seq, err := Seq(id)
	if err != nil {
		return r, err
	}
	b, _ := outboxQueue(tx.tx, queue, false)
	if b == nil {
		return r, ErrNotFound
	}
	raw := b.Get(u64(seq))
	if raw == nil {
		return r, ErrNotFound
	}
	return decodeOutbox(queue, u64(seq), raw)
}

// OutboxByKey returns the live record holding key.
func (tx *Tx) OutboxByKey(queue, key string) (OutboxRecord, error) {
	held := tx.tx.Bucket(bucketOutboxKeys).Get([]byte(key))
	if held == nil {
		return OutboxRecord{}, ErrNotFound
	}
	return tx.OutboxGet(queue, string(held))
}

// OutboxUpdate rewrites an existing record (run time, failure counts; a
// changed group or weight moves its count).
func (tx *Tx) OutboxUpdate(r OutboxRecord) error {
	seq, err := Seq(r.ID)
	if err != nil {
		return err
	}
	if err := checkGroup(r); err != nil {
		return err
	}
	b, _ := outboxQueue(tx.tx, r.Queue, false)
	if b == nil {
		return ErrNotFound
	}
	raw := b.Get(u64(seq))
	if raw == nil {
		return ErrNotFound
	}
	old, err := decodeOutbox(r.Queue, u64(seq), raw)
	if err != nil {
		return err
	}
	if old.Type != r.Type || old.Group != r.Group || old.Weight != r.Weight {
		if err := countGroup(tx.tx, old, -1); err != nil {
			return err
		}
		if err := countGroup(tx.tx, r, 1); err != nil {
			return err
		}
	}
	return putOutbox(b, seq, r)
}

// putOutbox stores r without its id and queue (the key and the bucket say
// them), densely: keys only grow, so pages can be filled completely.
func putOutbox(b *bolt.Bucket, seq uint64, r OutboxRecord) error {
	r.ID, r.Queue = "", ""
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	b.FillPercent = 1.0
	return b.Put(u64(seq), raw)
}

func decodeOutbox(queue string, key, raw []byte) (OutboxRecord, error) {
	var r OutboxRecord
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, fmt.Errorf("store: decode outbox record %x: %w", key, err)
	}
	r.ID, r.Queue = hex.EncodeToString(key), queue
	return r, nil
}

// OutboxDelete removes a record and its key. Deleting a missing record is
// not an error (a task may run twice).
func (tx *Tx) OutboxDelete(queue, id string) error {
	seq, err := Seq(id)
	if err != nil {
		return err
	}
	b, _ := outboxQueue(tx.tx, queue, false)
	if b == nil {
		return nil
	}
	raw := b.Get(u64(seq))
	if raw == nil {
		return nil
	}
	// A record that does not decode (never one this package wrote) is
	// deleted all the same: a finished task must not stay for ever.
	r, err := decodeOutbox(queue, u64(seq), raw)
	if err == nil {
		if err := countGroup(tx.tx, r, -1); err != nil {
			return err
		}
	}
	if err == nil && r.Key != "" {
		keys := tx.tx.Bucket(bucketOutboxKeys)
		if string(keys.Get([]byte(r.Key))) == id {
			if err := keys.Delete([]byte(r.Key)); err != nil {
				return err
			}
		}
	}
	return b.Delete(u64(seq))
}

// OutboxScan calls fn for up to limit records of queue with ids after
// afterID (empty: from the start), in id order. fn returning false stops.
func (tx *Tx) OutboxScan(queue, afterID string, limit int, fn func(OutboxRecord) bool) error {
	b, _ := outboxQueue(tx.tx, queue, false)
	if b == nil {
		return nil
	}
	c := b.Cursor()
	var k, v []byte
	if afterID == "" {
		k, v = c.First()
	} else {
		seq, err := Seq(afterID)
		if err != nil {
			return err
		}
		k, v = c.Seek(u64(seq + 1))
	}
	for n := 0; k != nil && (limit <= 0 || n < limit); k, v = c.Next() {
		r, err := decodeOutbox(queue, k, v)
		if err != nil {
			return err
		}
		n++
		if !fn(r) {
			break
		}
	}
	return nil
}

// OutboxLen returns the number of live records of a queue.
func (tx *Tx) OutboxLen(queue string) int {
	b, _ := outboxQueue(tx.tx, queue, false)
	if b == nil {
		return 0
	}
	return b.Stats().KeyN
}
