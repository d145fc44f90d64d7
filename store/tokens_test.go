package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Tokens made before user tokens existed have neither "admin" nor
// "userId"; the migration makes them admin tokens, and leaves user tokens
// alone.
func TestTokensBecomeAdminMigration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	var user User
	err := db.Update(func(tx *Tx) (err error) {
		user, err = tx.UserCreate("u@example.com", "U")
		if err != nil {
			return err
		}
		_, err = tx.APITokenCreate("mine", "user-token-value", user.ID, time.Time{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	before := versionBefore(t, "API tokens made before user tokens are admin tokens")
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		// As an older build wrote it: under its hash, no admin, no userId.
		old := []byte(`{"id":"old1","name":"ci","prefix":"old-toke","createdAt":"2026-01-01T00:00:00Z"}`)
		if err := tx.Bucket(bucketTokens).Put(tokenHash("old-token-value"), old); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, fmt.Appendf(nil, "%d", before))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, dir)
	defer db.Close()
	err = db.View(func(tx *Tx) error {
		old, err := tx.APITokenLookup("old-token-value")
		if err != nil {
			return err
		}
		if !old.Admin || old.UserID != "" || old.Name != "ci" {
			return fmt.Errorf("old token after the migration = %+v, want an admin token", old)
		}
		mine, err := tx.APITokenLookup("user-token-value")
		if err != nil {
			return err
		}
		if mine.Admin || mine.UserID != user.ID {
			return fmt.Errorf("user token after the migration = %+v, want it unchanged", mine)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestAPITokenCreateUnknownUser(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	err := db.Update(func(tx *Tx) error {
		_, err := tx.APITokenCreate("x", "some-token", "nobody", time.Time{})
		return err
	})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("token for an unknown user: %v, want ErrNotFound", err)
	}
}
