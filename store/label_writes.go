package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bucketLabelWrites is the rules writer's outbox of label changes on their
// way to Gmail (created by the "label writes" migration). One record per
// account, label and message: a newer plan for the same label of the same
// message replaces the older one (the latest intent wins).
var bucketLabelWrites = []byte("label_writes") // account id \x00 label id \x00 message id -> LabelWrite

// bucketLabelFlush holds the accounts whose writer was asked to send at
// once (a group reached 1,000, or a job's last batch ran) while it was
// running: it looks again at once instead of at its next due time.
var bucketLabelFlush = []byte("label_write_flush") // account id -> nil

// LabelWrite is one label change a reclassify batch decided and recorded,
// in its own transaction, for the account's writer to send to Gmail in a
// messages.batchModify with others of the same label and direction. Prov is
// the provenance record the batch wrote as pending with it; the writer
// makes it confirmed once Gmail took the change.
type LabelWrite struct {
	AccountID string `json:"accountId"`
	LabelID   string `json:"labelId"`
	MessageID string `json:"messageId"`
	ThreadID  string `json:"threadId,omitempty"`
	// Add: the label goes on; otherwise it comes off.
	Add bool `json:"add,omitempty"`
	// LabelName is the rule's label, to make the label anew when Gmail no
	// longer knows LabelID.
	LabelName string `json:"labelName,omitempty"`
	// JobID and Batch name the reclassify batch that decided the change:
	// the batch is done once all of its changes are in Gmail.
	JobID string     `json:"jobId"`
	Batch int        `json:"batch"`
	Prov  Provenance `json:"prov"`
	// Seq orders the records and tells a record from the one that replaced
	// it while the writer's call was out.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
}

func labelWriteKey(accountID, labelID, messageID string) []byte {
	return join(accountID, labelID, messageID)
}

// LabelWritePut records w, giving it its Seq. It returns the record it
// replaced (replaced=false when there was none).
func (tx *Tx) LabelWritePut(w *LabelWrite) (old LabelWrite, replaced bool, err error) {
	b := tx.tx.Bucket(bucketLabelWrites)
	key := labelWriteKey(w.AccountID, w.LabelID, w.MessageID)
	if v := b.Get(key); v != nil {
		if err := json.Unmarshal(v, &old); err != nil {
			return old, false, fmt.Errorf("store: decode label write %q: %w", key, err)
		}
		replaced = true
	}
	if w.Seq, err = b.NextSequence(); err != nil {
		return old, replaced, err
	}
	if err := putJSON(b, key, *w); err != nil {
		return old, replaced, fmt.Errorf("store: put label write %q: %w", key, err)
	}
	return old, replaced, nil
}

// LabelWriteGet returns the record of a message's label; ErrNotFound when
// there is none.
func (tx *Tx) LabelWriteGet(accountID, labelID, messageID string) (LabelWrite, error) {
	var w LabelWrite
	err := getJSON(tx.tx.Bucket(bucketLabelWrites), labelWriteKey(accountID, labelID, messageID), &w)
	return w, err
}

// LabelWriteDelete forgets the record of a message's label.
func (tx *Tx) LabelWriteDelete(accountID, labelID, messageID string) error {
	return tx.tx.Bucket(bucketLabelWrites).Delete(labelWriteKey(accountID, labelID, messageID))
}

// LabelWrites calls fn with each of the account's records, by label, until
// fn returns false.
func (tx *Tx) LabelWrites(accountID string, fn func(LabelWrite) bool) error {
	prefix := join(accountID, "")
	c := tx.tx.Bucket(bucketLabelWrites).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var w LabelWrite
		if err := json.Unmarshal(v, &w); err != nil {
			return fmt.Errorf("store: decode label write %q: %w", k, err)
		}
		if !fn(w) {
			return nil
		}
	}
	return nil
}

// LabelWriteCount counts the account's records of one label, up to limit,
// without decoding them.
func (tx *Tx) LabelWriteCount(accountID, labelID string, limit int) int {
	prefix := join(accountID, labelID, "")
	n := 0
	c := tx.tx.Bucket(bucketLabelWrites).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && n < limit; k, _ = c.Next() {
		n++
	}
	return n
}

// labelWritesDeleteAccount forgets every record of an account (when the
// account is deleted).
func (tx *Tx) labelWritesDeleteAccount(accountID string) error {
	if err := tx.tx.Bucket(bucketLabelFlush).Delete([]byte(accountID)); err != nil {
		return err
	}
	prefix := join(accountID, "")
	c := tx.tx.Bucket(bucketLabelWrites).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

func createLabelWriteBuckets(tx *bolt.Tx) error {
	return createBuckets(tx, bucketLabelWrites, bucketLabelFlush)
}

// LabelWriteSeq is the sequence of the last label write recorded (of any
// account): a writer that read the records at one value knows, seeing
// another, that some were added since.
func (tx *Tx) LabelWriteSeq() uint64 { return tx.tx.Bucket(bucketLabelWrites).Sequence() }

// LabelWritesAny reports whether the account has a label write.
func (tx *Tx) LabelWritesAny(accountID string) bool {
	prefix := join(accountID, "")
	k, _ := tx.tx.Bucket(bucketLabelWrites).Cursor().Seek(prefix)
	return k != nil && bytes.HasPrefix(k, prefix)
}

// LabelFlushWant records that the account's changes should go at once.
func (tx *Tx) LabelFlushWant(accountID string) error {
	return tx.tx.Bucket(bucketLabelFlush).Put([]byte(accountID), nil)
}

// LabelFlushTake reports whether the account's changes were wanted at
// once, and forgets it.
func (tx *Tx) LabelFlushTake(accountID string) (bool, error) {
	b := tx.tx.Bucket(bucketLabelFlush)
	if b.Get([]byte(accountID)) == nil {
		return false, nil
	}
	return true, b.Delete([]byte(accountID))
}

// LabelProvenanceGet returns the provenance record of one label of a
// message; ErrNotFound when there is none.
func (tx *Tx) LabelProvenanceGet(accountID, messageID, labelID string) (Provenance, error) {
	var p Provenance
	err := getJSON(tx.tx.Bucket(bucketProvenance), provenanceKey(accountID, messageID, labelID), &p)
	return p, err
}

// LabelProvenanceOfLabel calls fn with each provenance record of one label
// among an account's messages (a scan of the account's records: for the
// rare label deleted in Gmail).
func (tx *Tx) LabelProvenanceOfLabel(accountID, labelID string, fn func(messageID string, p Provenance) error) error {
	prefix := join(accountID, "")
	suffix := []byte("\x00" + labelID)
	c := tx.tx.Bucket(bucketProvenance).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if !bytes.HasSuffix(k, suffix) {
			continue
		}
		var p Provenance
		if err := json.Unmarshal(v, &p); err != nil {
			return fmt.Errorf("store: decode provenance %q: %w", k, err)
		}
		if err := fn(string(k[len(prefix):len(k)-len(suffix)]), p); err != nil {
			return err
		}
	}
	return nil
}
