package store

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// User owns Gmail accounts, rules and forms.
type User struct {
	ID        string    `json:"id"`
	Email     string    `json:"email"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"createdAt"`
	// MovedAt is when the user was exported to another mailroom
	// (mailroom export-user); zero: the user lives here.
	MovedAt time.Time `json:"movedAt,omitzero"`
}

// UserCreate stores a new user; ErrConflict when the email is taken
// (compared case-insensitively).
func (tx *Tx) UserCreate(email, name string) (User, error) {
	emails := tx.tx.Bucket(bucketUserEmails)
	norm := strings.ToLower(strings.TrimSpace(email))
	if emails.Get([]byte(norm)) != nil {
		return User{}, fmt.Errorf("store: user %s: %w", email, ErrConflict)
	}
	u := User{ID: NewID(), Email: strings.TrimSpace(email), Name: name, CreatedAt: time.Now().UTC()}
	if err := putJSON(tx.tx.Bucket(bucketUsers), []byte(u.ID), u); err != nil {
		return User{}, err
	}
	return u, emails.Put([]byte(norm), []byte(u.ID))
}

// UserGet returns one user.
func (tx *Tx) UserGet(id string) (User, error) {
	var u User
	return u, getJSON(tx.tx.Bucket(bucketUsers), []byte(id), &u)
}

// Users lists every user, by id.
func (tx *Tx) Users() ([]User, error) {
	var out []User
	err := tx.tx.Bucket(bucketUsers).ForEach(func(_, v []byte) error {
		var u User
		if err := json.Unmarshal(v, &u); err != nil {
			return err
		}
		out = append(out, u)
		return nil
	})
	return out, err
}

// APIToken is a bearer token made in the admin page or the API. Only its
// hash is kept. An admin token (Admin) reaches everything; a user token
// (UserID set, Admin false) reaches only its user. A token that is neither
// is refused.
type APIToken struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Hash      []byte    `json:"hash"`
	Prefix    string    `json:"prefix"`
	Admin     bool      `json:"admin,omitempty"`
	UserID    string    `json:"userId,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// ExpiresAt is when the token stops working; zero: never.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	LastUsed  time.Time `json:"lastUsed,omitzero"`
}

// Expired reports whether the token no longer works at now.
func (t APIToken) Expired(now time.Time) bool {
	return !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt)
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// APITokenCreate stores the hash of a new token: an admin token when userID
// is empty, else a token of that user (ErrNotFound when there is no such
// user). A zero expiresAt never expires.
func (tx *Tx) APITokenCreate(name, token, userID string, expiresAt time.Time) (APIToken, error) {
	if userID != "" {
		if _, err := tx.UserGet(userID); err != nil {
			return APIToken{}, fmt.Errorf("store: token for user %s: %w", userID, err)
		}
	}
	t := APIToken{ID: NewID(), Name: name, Hash: tokenHash(token), Prefix: token[:min(8, len(token))],
		Admin: userID == "", UserID: userID, CreatedAt: time.Now().UTC()}
	if !expiresAt.IsZero() {
		t.ExpiresAt = expiresAt.UTC()
	}
	return t, putJSON(tx.tx.Bucket(bucketTokens), t.Hash, t)
}

// APITokenLookup finds the token with that plain value.
func (tx *Tx) APITokenLookup(token string) (APIToken, error) {
	var t APIToken
	return t, getJSON(tx.tx.Bucket(bucketTokens), tokenHash(token), &t)
}

// APITokens lists the tokens (hashes only).
func (tx *Tx) APITokens() ([]APIToken, error) {
	var out []APIToken
	err := tx.tx.Bucket(bucketTokens).ForEach(func(_, v []byte) error {
		var t APIToken
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		out = append(out, t)
		return nil
	})
	return out, err
}

// APITokenDelete revokes a token by id.
func (tx *Tx) APITokenDelete(id string) error {
	b := tx.tx.Bucket(bucketTokens)
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var t APIToken
		if json.Unmarshal(v, &t) == nil && t.ID == id {
			return b.Delete(k)
		}
	}
	return ErrNotFound
}

// Session is an admin login.
type Session struct {
	// ID names the session on the admin page (to end it); it is not the
	// cookie, which only its owner holds.
	ID        string    `json:"id,omitempty"`
	CSRF      string    `json:"csrf"`
	CreatedAt time.Time `json:"createdAt"`
	ExpiresAt time.Time `json:"expiresAt"`
	// Device is the browser's User-Agent at sign-in, IP its address.
	Device string `json:"device,omitempty"`
	IP     string `json:"ip,omitempty"`
	// LastSeen is when the session last made a request (to the minute).
	LastSeen time.Time `json:"lastSeen,omitzero"`
}

// SessionPut stores a session under the hash of its cookie value.
func (tx *Tx) SessionPut(cookie string, s Session) error {
	return putJSON(tx.tx.Bucket(bucketSessions), tokenHash(cookie), s)
}

// SessionGet returns a live session; ErrNotFound when missing or expired.
func (tx *Tx) SessionGet(cookie string, now time.Time) (Session, error) {
	var s Session
	if err := getJSON(tx.tx.Bucket(bucketSessions), tokenHash(cookie), &s); err != nil {
		return s, err
	}
	if now.After(s.ExpiresAt) {
		return s, ErrNotFound
	}
	return s, nil
}

// SessionDelete ends a session.
func (tx *Tx) SessionDelete(cookie string) error {
	return tx.tx.Bucket(bucketSessions).Delete(tokenHash(cookie))
}

// SessionTouch records that the session with cookie was seen at now.
func (tx *Tx) SessionTouch(cookie string, now time.Time) error {
	b := tx.tx.Bucket(bucketSessions)
	var s Session
	if err := getJSON(b, tokenHash(cookie), &s); err != nil {
		return err
	}
	s.LastSeen = now
	return putJSON(b, tokenHash(cookie), s)
}

// Sessions returns the live sessions, the most recently seen first.
func (tx *Tx) Sessions(now time.Time) ([]Session, error) {
	var out []Session
	err := tx.tx.Bucket(bucketSessions).ForEach(func(_, v []byte) error {
		var s Session
		if json.Unmarshal(v, &s) == nil && !now.After(s.ExpiresAt) {
			out = append(out, s)
		}
		return nil
	})
	slices.SortStableFunc(out, func(a, b Session) int { return lastSeen(b).Compare(lastSeen(a)) })
	return out, err
}

func lastSeen(s Session) time.Time {
	if s.LastSeen.IsZero() {
		return s.CreatedAt
	}
	return s.LastSeen
}

// SessionEnd ends the session with the given ID; ErrNotFound when there
// is none.
func (tx *Tx) SessionEnd(id string) error {
	b := tx.tx.Bucket(bucketSessions)
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		var s Session
		if id != "" && json.Unmarshal(v, &s) == nil && s.ID == id {
			return b.Delete(k)
		}
	}
	return ErrNotFound
}

// SessionsDeleteAll ends every session but the one with the cookie keep
// (empty: all of them), and returns how many it ended.
func (tx *Tx) SessionsDeleteAll(keep string) (int, error) {
	b := tx.tx.Bucket(bucketSessions)
	var keepKey []byte
	if keep != "" {
		keepKey = tokenHash(keep)
	}
	var dead [][]byte
	err := b.ForEach(func(k, _ []byte) error {
		if keepKey == nil || string(k) != string(keepKey) {
			dead = append(dead, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, k := range dead {
		if err := b.Delete(k); err != nil {
			return 0, err
		}
	}
	return len(dead), nil
}

// SessionsExpire deletes sessions that ended before now.
func (tx *Tx) SessionsExpire(now time.Time) error {
	b := tx.tx.Bucket(bucketSessions)
	var dead [][]byte
	err := b.ForEach(func(k, v []byte) error {
		var s Session
		if json.Unmarshal(v, &s) != nil || now.After(s.ExpiresAt) {
			dead = append(dead, k)
		}
		return nil
	})
	for _, k := range dead {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return err
}

var keyAdminHash = []byte("admin_password_hash")

// AdminPasswordHash returns the stored admin password hash, nil when unset.
func (tx *Tx) AdminPasswordHash() []byte {
	if v := tx.tx.Bucket(bucketMeta).Get(keyAdminHash); v != nil {
		return append([]byte(nil), v...)
	}
	return nil
}

// SetAdminPasswordHash stores the admin password hash.
func (tx *Tx) SetAdminPasswordHash(hash []byte) error {
	return tx.tx.Bucket(bucketMeta).Put(keyAdminHash, hash)
}
