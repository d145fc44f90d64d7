package store

import "time"

// APITokenTouch records that the token with that plain value was used at
// at; ErrNotFound when it was revoked meanwhile.
func (tx *Tx) APITokenTouch(token string, at time.Time) error {
	b := tx.tx.Bucket(bucketTokens)
	var t APIToken
	if err := getJSON(b, tokenHash(token), &t); err != nil {
		return err
	}
	t.LastUsed = at.UTC()
	return putJSON(b, t.Hash, t)
}
