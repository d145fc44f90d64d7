package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"
)

// SubmissionsPrune deletes submissions whose rows are in their sheets and
// that were submitted before before. It examines submissions in the order
// they were accepted, starting after the key from (nil: the first), at most
// max of them, and stops early at the first one submitted at or after
// before (the ones after it are about as young). It returns how many it
// deleted and the key to go on from, nil when it has looked at every
// submission old enough. A submission still in its form's buffer (waiting,
// or in a write not yet known to have landed) is kept.
func (tx *Tx) SubmissionsPrune(from []byte, before time.Time, max int) (pruned int, next []byte, err error) {
	subs := tx.tx.Bucket(bucketSubmissions)
	// firstWaiting caches, per form, the key of its oldest buffered
	// submission (buffers hold submission keys in acceptance order); nil
	// when nothing waits.
	firstWaiting := map[string][]byte{}
	waitingFrom := func(formID string) []byte {
		if k, ok := firstWaiting[formID]; ok {
			return k
		}
		var k []byte
		if buf := tx.tx.Bucket(bucketFormBuffers).Bucket([]byte(formID)); buf != nil {
			if _, v := buf.Cursor().First(); v != nil {
				k = bytes.Clone(v)
			}
		}
		firstWaiting[formID] = k
		return k
	}
	var doomed [][]byte
	owners := formUsers{tx: tx, users: map[string]string{}}
	freed := map[string]int64{} // user id -> bytes
	c := subs.Cursor()
	k, v := c.First()
	if from != nil {
		if k, v = c.Seek(from); k != nil && bytes.Equal(k, from) {
			k, v = c.Next()
		}
	}
	seen := 0
	for ; k != nil; k, v = c.Next() {
		if seen == max {
			next = bytes.Clone(k)
			break
		}
		seen++
		var s struct {
			FormID      string    `json:"formId"`
			SubmittedAt time.Time `json:"submittedAt"`
		}
		if err := json.Unmarshal(v, &s); err != nil {
			return 0, nil, fmt.Errorf("store: decode submission %x: %w", k, err)
		}
		if !s.SubmittedAt.Before(before) {
			break
		}
		if w := waitingFrom(s.FormID); w != nil && bytes.Compare(k, w) >= 0 {
			continue // not written yet
		}
		user, err := owners.user(s.FormID)
		if err != nil {
			return 0, nil, err
		}
		freed[user] += submissionBytes(v)
		doomed = append(doomed, bytes.Clone(k))
	}
	for _, k := range doomed {
		if err := subs.Delete(k); err != nil {
			return 0, nil, fmt.Errorf("store: delete submission %x: %w", k, err)
		}
	}
	for user, n := range freed {
		if err := tx.addUserBytes(user, -n); err != nil {
			return 0, nil, err
		}
	}
	return len(doomed), next, nil
}

// FormDelete deletes a form with its bookkeeping, its buffer and every
// submission of it, and frees its sheet for another form (form.deleted). More than
// dropAtMost rows waiting to be written make it fail with ErrConflict;
// waiting reports how many there were. (Submissions are keyed by
// acceptance, not by form, so this reads them all: deleting a form is rare.)
func (tx *Tx) FormDelete(id string, dropAtMost int) (waiting int, err error) {
	f, err := tx.FormGet(id)
	if err != nil {
		return 0, err
	}
	w, err := tx.SheetWrites(id)
	if err != nil {
		return 0, err
	}
	if w.Buffered > dropAtMost {
		return w.Buffered, fmt.Errorf("store: form %s has %d rows waiting: %w", id, w.Buffered, ErrConflict)
	}
	subs := tx.tx.Bucket(bucketSubmissions)
	var (
		doomed [][]byte
		freed  int64
	)
	err = subs.ForEach(func(k, v []byte) error {
		var s struct {
			FormID string `json:"formId"`
		}
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("store: decode submission %x: %w", k, err)
		}
		if s.FormID == id {
			doomed = append(doomed, bytes.Clone(k))
			freed += submissionBytes(v)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range doomed {
		if err := subs.Delete(k); err != nil {
			return 0, err
		}
	}
	if err := tx.addUserBytes(f.UserID, -freed); err != nil {
		return 0, err
	}
	if err := tx.tx.Bucket(bucketFormBuffers).DeleteBucket([]byte(id)); err != nil {
		return 0, fmt.Errorf("store: delete buffer of form %s: %w", id, err)
	}
	for _, del := range []struct {
		bucket []byte
		key    []byte
	}{{bucketForms, []byte(id)}, {bucketSheetWrites, []byte(id)}, {bucketFormSheets, formSheetKey(f.SpreadsheetID, f.Sheet)}} {
		if err := tx.tx.Bucket(del.bucket).Delete(del.key); err != nil {
			return 0, err
		}
	}
	if err := tx.ownerGone(ownerForm, id, f.UserID); err != nil {
		return 0, err
	}
	return w.Buffered, tx.formEvent(EventFormDeleted, f)
}
