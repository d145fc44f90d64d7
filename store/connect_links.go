package store

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketConnectLinks  = []byte("connect_links")  // sha256(link token) -> ConnectLink
	bucketConnectStates = []byte("connect_states") // sha256(OAuth state) -> sha256(link token)
)

// ConnectLink is one round trip through Google's consent that connects a
// Gmail account to a user: a connect link made through the API (it
// returns to RedirectURI) or the admin page's own connect (bound to the
// admin session that started it). Neither the link's token nor the OAuth
// state is kept, only their hashes; the PKCE verifier is sealed.
type ConnectLink struct {
	// Key is the hex SHA-256 of the link's token (the record's key).
	Key    string `json:"key"`
	ID     string `json:"id"`
	UserID string `json:"userId"`
	// RedirectURI, State and Email are what the API call asked for: where
	// to return, the caller's state to echo, the address expected.
	RedirectURI string `json:"redirectUri,omitempty"`
	State       string `json:"state,omitempty"`
	Email       string `json:"email,omitempty"`
	// Session is the hex SHA-256 of the admin session that started an
	// admin-page connect; empty for an API link.
	Session   string    `json:"session,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// OpenedAt is when the link was last followed to Google (its continue
	// button; again until the callback completes), with that round trip's
	// PKCE verifier sealed under the link's ID and the hex of its OAuth
	// state's key (only the latest state names the link).
	OpenedAt   time.Time `json:"openedAt,omitzero"`
	Verifier   []byte    `json:"verifier,omitempty"`
	OAuthState string    `json:"oauthState,omitempty"`
	// FinishedAt is when Google sent the browser back (once only), with
	// the outcome: "connected" or an error code, and the account.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	Result     string    `json:"result,omitempty"`
	AccountID  string    `json:"accountId,omitempty"`
}

// ConnectLinkKey is the record key of a link token.
func ConnectLinkKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

func stateKey(state string) []byte {
	sum := sha256.Sum256([]byte("connect-state\x00" + state))
	return sum[:]
}

func createConnectBuckets(tx *bolt.Tx) error {
	return createBuckets(tx, bucketConnectLinks, bucketConnectStates)
}

// ConnectLinkPut stores a link (new or updated), by its Key.
func (tx *Tx) ConnectLinkPut(l ConnectLink) error {
	if l.Key == "" || l.ID == "" {
		return fmt.Errorf("store: connect link without key or id")
	}
	return putJSON(tx.tx.Bucket(bucketConnectLinks), []byte(l.Key), l)
}

// ConnectLinkGet returns the link of a token's key; ErrNotFound when
// unknown (or swept).
func (tx *Tx) ConnectLinkGet(key string) (ConnectLink, error) {
	var l ConnectLink
	if err := getJSON(tx.tx.Bucket(bucketConnectLinks), []byte(key), &l); err != nil {
		return l, fmt.Errorf("store: connect link: %w", err)
	}
	return l, nil
}

// ConnectLinkBindState names the link by the OAuth state sent to Google,
// in place of the state it was named by before (a link followed again);
// it sets l.OAuthState. Store l afterwards.
func (tx *Tx) ConnectLinkBindState(state string, l *ConnectLink) error {
	b := tx.tx.Bucket(bucketConnectStates)
	if old, err := hex.DecodeString(l.OAuthState); err == nil && len(old) > 0 {
		if err := b.Delete(old); err != nil {
			return fmt.Errorf("store: connect state: %w", err)
		}
	}
	k := stateKey(state)
	l.OAuthState = hex.EncodeToString(k)
	return b.Put(k, []byte(l.Key))
}

// ConnectLinkTakeState returns the link named by an OAuth state and
// forgets the state: a state is used once, whatever the outcome.
// ErrNotFound when unknown or used.
func (tx *Tx) ConnectLinkTakeState(state string) (ConnectLink, error) {
	b := tx.tx.Bucket(bucketConnectStates)
	k := stateKey(state)
	key := b.Get(k)
	if key == nil {
		return ConnectLink{}, fmt.Errorf("store: connect state: %w", ErrNotFound)
	}
	l, err := tx.ConnectLinkGet(string(key))
	if err != nil {
		return l, err
	}
	return l, b.Delete(k)
}

// ConnectLinksSweep deletes the links that expired before `before` (and
// their states), at most limit of them; it returns how many it deleted.
func (tx *Tx) ConnectLinksSweep(before time.Time, limit int) (int, error) {
	links := tx.tx.Bucket(bucketConnectLinks)
	var dead [][]byte
	err := links.ForEach(func(k, v []byte) error {
		if len(dead) >= limit {
			return nil
		}
		var l struct {
			ExpiresAt time.Time `json:"expiresAt"`
		}
		if err := json.Unmarshal(v, &l); err != nil {
			return err
		}
		if l.ExpiresAt.Before(before) {
			dead = append(dead, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil || len(dead) == 0 {
		return 0, err
	}
	gone := make(map[string]bool, len(dead))
	for _, k := range dead {
		gone[string(k)] = true
		if err := links.Delete(k); err != nil {
			return 0, err
		}
	}
	states := tx.tx.Bucket(bucketConnectStates)
	var stale [][]byte
	if err := states.ForEach(func(k, v []byte) error {
		if gone[string(v)] {
			stale = append(stale, append([]byte(nil), k...))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for _, k := range stale {
		if err := states.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(dead), nil
}
