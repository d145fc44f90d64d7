package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// subTombstones indexes an account's tombstones by when they were made:
// u64(unix nanoseconds) + message id -> nil. It is created on demand.
var subTombstones = []byte("tombstones")

func tombstoneKey(at time.Time, id string) []byte {
	return append(u64(uint64(at.UnixNano())), id...)
}

// indexTombstone stamps a message that just became a tombstone with the
// time (kept if set) and adds it to the account's tombstone index.
func indexTombstone(data *bolt.Bucket, m *Message) error {
	if m.DeletedAt.IsZero() {
		m.DeletedAt = time.Now().UTC()
	}
	idx, err := data.CreateBucketIfNotExists(subTombstones)
	if err != nil {
		return fmt.Errorf("store: tombstone index: %w", err)
	}
	return idx.Put(tombstoneKey(m.DeletedAt, m.ID), nil)
}

// TombstonesPrune deletes the account's tombstones made before before (the
// records of deleted messages, kept so that late events for them do
// nothing), at most max of them, with the provenance records of their
// labels. more reports whether older ones may remain.
func (tx *Tx) TombstonesPrune(accountID string, before time.Time, max int) (pruned int, more bool, err error) {
	data, err := tx.accountData(accountID, false)
	if data == nil || err != nil {
		return 0, false, err
	}
	idx := data.Bucket(subTombstones)
	if idx == nil {
		return 0, false, nil
	}
	limit := u64(uint64(before.UnixNano()))
	var doomed [][]byte
	c := idx.Cursor()
	for k, _ := c.First(); k != nil && bytes.Compare(k[:8], limit) < 0; k, _ = c.Next() {
		if len(doomed) == max {
			more = true
			break
		}
		doomed = append(doomed, bytes.Clone(k))
	}
	msgs := data.Bucket(subMessages)
	for _, k := range doomed {
		id := k[8:]
		if raw := msgs.Get(id); raw != nil {
			var m struct {
				Deleted bool `json:"deleted"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				return 0, false, fmt.Errorf("store: decode message %s: %w", id, err)
			}
			if m.Deleted {
				if err := msgs.Delete(id); err != nil {
					return 0, false, err
				}
				if err := tx.labelProvenanceDeleteMessage(accountID, string(id)); err != nil {
					return 0, false, err
				}
				pruned++
			}
		}
		if err := idx.Delete(k); err != nil {
			return 0, false, err
		}
	}
	return pruned, more, nil
}

// labelProvenanceDeleteMessage forgets the provenance records of one
// message's labels.
func (tx *Tx) labelProvenanceDeleteMessage(accountID, messageID string) error {
	b := tx.tx.Bucket(bucketProvenance)
	prefix := join(accountID, messageID, "")
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// indexTombstones is the "tombstone index" migration: every tombstone of
// every account is stamped with the migration's time and indexed, so that
// the ones made before it are pruned a retention after the upgrade.
func indexTombstones(tx *bolt.Tx) error {
	now := time.Now().UTC()
	root := tx.Bucket(bucketGmailData)
	return root.ForEachBucket(func(account []byte) error {
		data := root.Bucket(account)
		msgs := data.Bucket(subMessages)
		if msgs == nil {
			return nil
		}
		var stamped []Message
		err := msgs.ForEach(func(_, v []byte) error {
			var m Message
			if err := json.Unmarshal(v, &m); err != nil {
				return err
			}
			if m.Deleted && m.DeletedAt.IsZero() {
				m.DeletedAt = now
				stamped = append(stamped, m)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("account %s: %w", account, err)
		}
		for _, m := range stamped {
			if err := putJSON(msgs, []byte(m.ID), m); err != nil {
				return err
			}
			if err := indexTombstone(data, &m); err != nil {
				return err
			}
		}
		return nil
	})
}
