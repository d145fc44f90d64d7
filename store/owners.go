package store

import (
	"encoding/json"
	"errors"

	bolt "go.etcd.io/bbolt"
)

// Whose work a task is: a task's payload names what it works on by the
// fields below, and the user is that thing's. The user of a deleted
// account, form or webhook stays known (bucketOwnersGone), so the dead
// letters of its tasks, which fail for good once it is gone, still carry
// their user (CONTRACT.md, "Events": userId is the user whose work failed).
var bucketOwnersGone = []byte("owners_gone") // kind \x00 id -> user id

// Kinds of things with an owner (bucketOwnersGone's keys).
const (
	ownerAccount = "account"
	ownerForm    = "form"
	ownerWebhook = "webhook"
)

// TaskOwner is what a task's payload says it works on, and whose it is.
type TaskOwner struct {
	UserID    string `json:"userId"`
	AccountID string `json:"accountId"`
	FormID    string `json:"formId"`
	WebhookID string `json:"webhookId"`
}

// TaskOwner reads the owner of a task from its payload: its userId, else
// the user of its accountId, formId or webhookId, living or deleted. A
// payload that names none of them (or is not a JSON object) is the work
// of no user: UserID is empty.
func (tx *Tx) TaskOwner(payload []byte) (TaskOwner, error) {
	o := payloadOwner(payload)
	var err error
	if o.UserID == "" {
		o.UserID, err = tx.ownerUser(o)
	}
	return o, err
}

// payloadOwner is what a payload names, as it names it (no user looked up).
func payloadOwner(payload []byte) TaskOwner {
	var o TaskOwner
	if json.Unmarshal(payload, &o) != nil {
		return TaskOwner{}
	}
	return o
}

// ownerUser is the user of the account, form or webhook o names.
func (tx *Tx) ownerUser(o TaskOwner) (string, error) {
	switch {
	case o.AccountID != "":
		return tx.ownerOf(ownerAccount, o.AccountID, func() (string, error) {
			a, err := tx.AccountGet(o.AccountID)
			return a.UserID, err
		})
	case o.FormID != "":
		return tx.ownerOf(ownerForm, o.FormID, func() (string, error) {
			f, err := tx.FormGet(o.FormID)
			return f.UserID, err
		})
	case o.WebhookID != "":
		return tx.ownerOf(ownerWebhook, o.WebhookID, func() (string, error) {
			w, err := tx.WebhookGet(o.WebhookID)
			return w.UserID, err
		})
	}
	return "", nil
}

// ownerOf returns the user of the living thing (live), or of the deleted
// one; "" when neither is known.
func (tx *Tx) ownerOf(kind, id string, live func() (string, error)) (string, error) {
	user, err := live()
	if !errors.Is(err, ErrNotFound) {
		return user, err
	}
	return string(tx.tx.Bucket(bucketOwnersGone).Get(ownerKey(kind, id))), nil
}

// ownerGone records the user of a thing being deleted (nothing for a
// thing of no user).
func (tx *Tx) ownerGone(kind, id, userID string) error {
	if userID == "" {
		return nil
	}
	return tx.tx.Bucket(bucketOwnersGone).Put(ownerKey(kind, id), []byte(userID))
}

func ownerKey(kind, id string) []byte { return []byte(kind + "\x00" + id) }

func createOwnerBuckets(tx *bolt.Tx) error { return createBuckets(tx, bucketOwnersGone) }
