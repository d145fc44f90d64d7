package store

import (
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The "submission bytes per user" migration counts the submissions a file
// made before it holds, per user.
func TestUserFormBytesMigration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	var want int64
	err := db.Update(func(tx *Tx) error {
		f, err := tx.FormCreate(Form{UserID: "u", SpreadsheetID: "S", Sheet: "A", Columns: []string{"x"}})
		if err != nil {
			return err
		}
		for range 3 {
			if _, _, err := tx.SubmissionAdd(Submission{FormID: f.ID, Values: []string{"answer"}}); err != nil {
				return err
			}
		}
		want = tx.UserSubmissionBytes("u")
		return nil
	})
	if err != nil || want == 0 {
		t.Fatalf("bytes before: %d, %v", want, err)
	}
	// As an older build left it: no counts, the schema one version back.
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketUserFormBytes); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, fmt.Appendf(nil, "%d", versionBefore(t, "submission bytes per user")))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, dir)
	defer db.Close()
	var got int64
	if err := db.View(func(tx *Tx) error { got = tx.UserSubmissionBytes("u"); return nil }); err != nil || got != want {
		t.Fatalf("bytes after the migration: %d, %v; want %d", got, err, want)
	}
}
