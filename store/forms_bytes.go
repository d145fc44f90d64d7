package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// bucketUserFormBytes keeps, per user, the bytes its forms' submissions
// take in bbolt (waiting or kept): user id -> uint64. The Sheets pipeline
// bounds it (MAILROOM_SUBMISSIONS_USER_BYTES).
var bucketUserFormBytes = []byte("user_form_bytes")

// submissionBytes is what one stored submission counts: its key and its
// value.
func submissionBytes(value []byte) int64 { return int64(8 + len(value)) }

// UserSubmissionBytes returns the bytes the submissions of the user's
// forms take, waiting to be written or kept after.
func (tx *Tx) UserSubmissionBytes(userID string) int64 {
	v := tx.tx.Bucket(bucketUserFormBytes).Get([]byte(userID))
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// addUserBytes adds delta (negative: frees) to the user's count; a
// submission of no known user ("") is counted nowhere.
func (tx *Tx) addUserBytes(userID string, delta int64) error {
	if userID == "" || delta == 0 {
		return nil
	}
	if err := addCount(tx.tx.Bucket(bucketUserFormBytes), userID, delta); err != nil {
		return fmt.Errorf("store: count submission bytes of user %s: %w", userID, err)
	}
	return nil
}

// formUsers maps form ids to their users' ids, reading each form once.
type formUsers struct {
	tx    *Tx
	users map[string]string
}

// user is the form's user ("" for a form no longer stored).
func (f *formUsers) user(formID string) (string, error) {
	if u, ok := f.users[formID]; ok {
		return u, nil
	}
	form, err := f.tx.FormGet(formID)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return "", err
	}
	f.users[formID] = form.UserID
	return form.UserID, nil
}

// countUserFormBytes is the migration that makes the per-user counts from
// the submissions already stored.
func countUserFormBytes(tx *bolt.Tx) error {
	counts, err := tx.CreateBucketIfNotExists(bucketUserFormBytes)
	if err != nil {
		return err
	}
	users := map[string]string{}
	err = tx.Bucket(bucketForms).ForEach(func(k, v []byte) error {
		var f struct {
			UserID string `json:"userId"`
		}
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("decode form %s: %w", k, err)
		}
		users[string(k)] = f.UserID
		return nil
	})
	if err != nil {
		return err
	}
	sums := map[string]int64{}
	err = tx.Bucket(bucketSubmissions).ForEach(func(k, v []byte) error {
		var s struct {
			FormID string `json:"formId"`
		}
		if err := json.Unmarshal(v, &s); err != nil {
			return fmt.Errorf("decode submission %x: %w", k, err)
		}
		sums[users[s.FormID]] += submissionBytes(v)
		return nil
	})
	if err != nil {
		return err
	}
	delete(sums, "") // submissions of no stored form
	for user, n := range sums {
		if err := addCount(counts, user, n); err != nil {
			return err
		}
	}
	return nil
}
