package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// DeadLetter is a task that failed for good, kept until redriven or
// discarded. Its ID is the outbox record's id.
type DeadLetter struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Queue   string          `json:"queue"`
	Payload json.RawMessage `json:"payload"`
	Key     string          `json:"key,omitempty"`
	// Group and Weight are the task's (a redrive counts it again).
	Group  string `json:"group,omitempty"`
	Weight int    `json:"weight,omitempty"`
	// UserID is the user whose work failed ("" for work of no user),
	// found from the payload when the task is archived (DeadLetterPut), so
	// that it is known after the account, form or webhook is gone.
	UserID        string    `json:"userId,omitempty"`
	Error         string    `json:"error"`
	Attempts      int       `json:"attempts"`
	FirstFailedAt time.Time `json:"firstFailedAt"`
	LastFailedAt  time.Time `json:"lastFailedAt"`
}

// DeadLetterPut stores d (replacing a dead letter of the same id), with
// the user whose work failed when d does not name one.
func (tx *Tx) DeadLetterPut(d DeadLetter) error {
	seq, err := Seq(d.ID)
	if err != nil {
		return err
	}
	old, getErr := tx.DeadLetterGet(d.ID)
	replacing := getErr == nil
	if replacing && d.UserID == "" {
		d.UserID = old.UserID
	}
	if d.UserID == "" {
		o, err := tx.TaskOwner(d.Payload)
		if err != nil {
			return fmt.Errorf("store: owner of dead letter %s: %w", d.ID, err)
		}
		d.UserID = o.UserID
	}
	if replacing {
		if err := addCount(tx.tx.Bucket(bucketDeadCounts), old.Type, -1); err != nil {
			return err
		}
	} else if err := tx.deadLetterEvent(EventDeadLetterAdded, d); err != nil {
		return err
	}
	if err := addCount(tx.tx.Bucket(bucketDeadCounts), d.Type, 1); err != nil {
		return err
	}
	return putJSON(tx.tx.Bucket(bucketDeadLetters), u64(seq), d)
}

// DeadLetterGet returns one dead letter.
func (tx *Tx) DeadLetterGet(id string) (DeadLetter, error) {
	var d DeadLetter
	seq, err := Seq(id)
	if err != nil {
		return d, ErrNotFound
	}
	return d, getJSON(tx.tx.Bucket(bucketDeadLetters), u64(seq), &d)
}

// DeadLetterRedriven removes one dead letter that goes back to its queue,
// with its deadletter.redriven event; ErrNotFound when missing.
func (tx *Tx) DeadLetterRedriven(id string) error {
	d, err := tx.DeadLetterGet(id)
	if err != nil {
		return err
	}
	if err := tx.deadLetterEvent(EventDeadLetterRedone, d); err != nil {
		return err
	}
	return tx.deadLetterRemove(id)
}

// DeadLetterDiscard removes one dead letter for good, with its
// deadletter.discarded event; ErrNotFound when missing.
func (tx *Tx) DeadLetterDiscard(id string) error {
	d, err := tx.DeadLetterGet(id)
	if err != nil {
		return err
	}
	if err := tx.deadLetterEvent(EventDeadLetterDiscarded, d); err != nil {
		return err
	}
	return tx.deadLetterRemove(id)
}

// deadLetterRemove removes one dead letter, with no event (DeadLetterRedriven
// and DeadLetterDiscard give it one); ErrNotFound when missing.
func (tx *Tx) deadLetterRemove(id string) error {
	seq, err := Seq(id)
	if err != nil {
		return ErrNotFound
	}
	d, err := tx.DeadLetterGet(id)
	if err != nil {
		return err
	}
	if err := addCount(tx.tx.Bucket(bucketDeadCounts), d.Type, -1); err != nil {
		return err
	}
	return tx.tx.Bucket(bucketDeadLetters).Delete(u64(seq))
}

// DeadLetters lists dead letters newest first, optionally of one type,
// starting after cursor (an id; empty: the newest). It returns the next
// cursor, empty at the end.
func (tx *Tx) DeadLetters(typ, cursor string, limit int) ([]DeadLetter, string, error) {
	c := tx.tx.Bucket(bucketDeadLetters).Cursor()
	var k, v []byte
	if cursor == "" {
		k, v = c.Last()
	} else {
		seq, err := Seq(cursor)
		if err != nil {
			return nil, "", fmt.Errorf("store: bad cursor: %w", err)
		}
		c.Seek(u64(seq))
		k, v = c.Prev()
	}
	var out []DeadLetter
	for ; k != nil; k, v = c.Prev() {
		var d DeadLetter
		if err := json.Unmarshal(v, &d); err != nil {
			return nil, "", fmt.Errorf("store: decode dead letter: %w", err)
		}
		if typ != "" && d.Type != typ {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, out[len(out)-1].ID, nil
		}
		out = append(out, d)
	}
	return out, "", nil
}

// DeadLetterCounts returns the number of dead letters per task type, from
// counters kept with every put and delete (no scan of the archive).
func (tx *Tx) DeadLetterCounts() (map[string]int, error) {
	counts := map[string]int{}
	err := tx.tx.Bucket(bucketDeadCounts).ForEach(func(k, v []byte) error {
		if len(v) == 8 {
			counts[string(k)] = int(binary.BigEndian.Uint64(v))
		}
		return nil
	})
	return counts, err
}

// addCount adds delta to the counter under key, removing it at zero.
func addCount(b *bolt.Bucket, key string, delta int64) error {
	var n int64
	if v := b.Get([]byte(key)); len(v) == 8 {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n <= 0 {
		return b.Delete([]byte(key))
	}
	return b.Put([]byte(key), u64(uint64(n)))
}
