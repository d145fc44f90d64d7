package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Compaction: bbolt never gives the space of deleted data back to the file
// system; its free pages are reused, but the file keeps its size. Compact
// copies the live data into a new file, densely, and swaps it in.

// CompactResult is what a compaction did.
type CompactResult struct {
	Before, After int64  // file sizes in bytes
	Backup        string // the old file, kept when KeepBackup is set
}

// Compact rewrites the store file in dataDir (the service stopped: the file
// lock is taken, waiting at most timeout) into a new file, checks the new
// file, and swaps it in atomically: at any moment the file at the store's
// path is either the old one or the new one, whole. The old file stays
// as FileName+".bak" until the new one has opened, and then is removed
// unless keepBackup. A crash at any point leaves a usable store (the old
// file until the rename, the new one after); a leftover temporary file is
// removed by the next compaction.
func Compact(dataDir string, timeout time.Duration, keepBackup bool) (CompactResult, error) {
	var res CompactResult
	path := filepath.Join(dataDir, FileName)
	tmp, bak := path+".compact", path+".bak"
	st, err := os.Stat(path)
	if err != nil {
		return res, fmt.Errorf("store: compact: %w", err)
	}
	res.Before = st.Size()
	src, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return res, fmt.Errorf("store: compact %s: %w (stop the service first)", path, ErrLocked)
	}
	if err != nil {
		return res, fmt.Errorf("store: compact: open %s: %w", path, err)
	}
	// The lock on the source is held until the swap is done.
	defer src.Close()
	if err := os.Remove(tmp); err != nil && !os.IsNotExist(err) {
		return res, fmt.Errorf("store: compact: remove an earlier temporary file: %w", err)
	}
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return res, fmt.Errorf("store: compact: create %s: %w", tmp, err)
	}
	if err := bolt.Compact(dst, src, 64<<20); err != nil {
		dst.Close()
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: copy: %w", err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: sync: %w", err)
	}
	if err := dst.Close(); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: close: %w", err)
	}
	if err := Verify(tmp); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: the new file does not check out, the old one is kept: %w", err)
	}
	if err := sameContent(src, tmp); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: the new file differs, the old one is kept: %w", err)
	}
	// Keep the old file under a second name, then replace the store's path
	// in one rename.
	os.Remove(bak)
	if err := os.Link(path, bak); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: keep the old file as %s: %w", bak, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return res, fmt.Errorf("store: compact: swap in the new file: %w", err)
	}
	if err := syncDir(dataDir); err != nil {
		return res, fmt.Errorf("store: compact: sync the data dir: %w", err)
	}
	if st, err := os.Stat(path); err == nil {
		res.After = st.Size()
	}
	// The new file must open as the store (schema, checks) before the old
	// one goes.
	src.Close()
	if err := Verify(path); err != nil {
		return res, fmt.Errorf("store: compact: the new file does not open (the old one is %s: move it back): %w", bak, err)
	}
	if keepBackup {
		res.Backup = bak
		return res, nil
	}
	if err := os.Remove(bak); err != nil {
		return res, fmt.Errorf("store: compact: remove the old file: %w", err)
	}
	return res, nil
}

// sameContent checks that the file at path holds the same buckets with the
// same number of keys as db.
func sameContent(db *bolt.DB, path string) error {
	other, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	defer other.Close()
	count := func(d *bolt.DB) (map[string]int, error) {
		out := map[string]int{}
		err := d.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				out[string(name)] = b.Stats().KeyN
				return nil
			})
		})
		return out, err
	}
	a, err := count(db)
	if err != nil {
		return err
	}
	b, err := count(other)
	if err != nil {
		return err
	}
	if len(a) != len(b) {
		return fmt.Errorf("%d buckets, the original has %d", len(b), len(a))
	}
	for name, n := range a {
		if b[name] != n {
			return fmt.Errorf("bucket %s holds %d keys, the original %d", name, b[name], n)
		}
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// FileStats is the store file's size and the part of it free for reuse.
type FileStats struct {
	Size int64 // bytes on disk
	Free int64 // bytes in free pages (reused by later writes; Compact gives them back)
}

// FileStats returns the file's size and free space.
func (db *DB) FileStats() FileStats {
	var fs FileStats
	if st, err := os.Stat(db.path); err == nil {
		fs.Size = st.Size()
	}
	s := db.bolt.Stats()
	fs.Free = int64(s.FreePageN+s.PendingPageN) * int64(db.bolt.Info().PageSize)
	return fs
}
