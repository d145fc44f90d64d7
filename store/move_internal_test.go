package store

import (
	"testing"

	bolt "go.etcd.io/bbolt"
)

// Every bucket of the schema is either moved with a user or named as not
// per user: a new bucket fails this test until export-user classifies it.
func TestMoveClassifiesEveryBucket(t *testing.T) {
	t.Parallel()
	db, err := Open(t.TempDir(), Options{SecretKey: make([]byte, 32)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.bolt.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			r, ok := moveBuckets[string(name)]
			switch {
			case !ok:
				t.Errorf("bucket %q is not classified in moveBuckets (store/move.go): say whether export-user moves it", name)
			case r.pick == nil && r.why == "":
				t.Errorf("bucket %q is not moved but moveBuckets gives no reason", name)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}
