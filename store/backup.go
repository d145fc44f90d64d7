package store

import (
	"fmt"
	"io"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Backup writes a consistent copy of the whole database to w from one
// read transaction, while writers go on. It returns the bytes written.
func (db *DB) Backup(w io.Writer) (int64, error) {
	var n int64
	err := db.bolt.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	if err != nil {
		return n, fmt.Errorf("store: backup: %w", err)
	}
	return n, nil
}

// BackupFile copies the store file at path (not open elsewhere) to w,
// opening it read-only.
func BackupFile(path string, w io.Writer) (int64, error) {
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 500 * time.Millisecond})
	if err != nil {
		return 0, err
	}
	defer b.Close()
	var n int64
	err = b.View(func(tx *bolt.Tx) error {
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// Verify opens a backup file read-only and runs the consistency check.
func Verify(path string) error {
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	defer b.Close()
	return b.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		if first == nil && tx.Bucket(bucketMeta) == nil {
			first = fmt.Errorf("not a mailroom database (no meta bucket)")
		}
		return first
	})
}
