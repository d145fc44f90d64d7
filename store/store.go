// Package store keeps everything mailroom must not lose in one bbolt file:
// accounts, messages, rules, forms and submissions, the task outbox and the
// dead-letter archive. It imports nothing else of mailroom.
package store

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Sentinel errors.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrLocked   = errors.New("the database file is in use by another mailroom process")
	// ErrUnavailable wraps a write that could not be committed (a full
	// disk, an I/O error): nothing of it was stored.
	ErrUnavailable = errors.New("the store cannot write (disk full or I/O error)")
)

// FileName is the bbolt file's name inside the data dir.
const FileName = "mailroom.db"

// Options configure Open.
type Options struct {
	// Timeout bounds the wait for the file lock. Zero means 2s.
	Timeout time.Duration
	// SecretKey is the 32-byte AES-256 key that encrypts secrets at rest.
	// Nil means: read or create the key file in the data dir.
	SecretKey []byte
	// noSync turns off fsync: for the store's own benchmarks only (no
	// caller outside the package can ask for it).
	noSync bool
}

// DB is the open store.
type DB struct {
	bolt   *bolt.DB
	sealer *sealer
	path   string
	health writeHealth // health.go
	events eventSignal // events.go
}

// Tx is a bbolt transaction with the store's aggregate methods.
type Tx struct {
	tx *bolt.Tx
	db *DB

	appended []appendedEvent // the events this transaction appended (events.go)
}

// SecureDir creates dir with mode 0700, or tightens an existing dir to
// 0700 (it holds the database and the secret key). It returns the mode the
// dir had when that was looser, so the caller can warn; zero otherwise.
func SecureDir(dir string) (loose fs.FileMode, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("store: create data dir: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, fmt.Errorf("store: data dir: %w", err)
	}
	mode := fi.Mode().Perm()
	if mode&0o077 == 0 {
		return 0, nil
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return mode, fmt.Errorf("store: tighten data dir %s (mode %04o) to 0700: %w", dir, mode, err)
	}
	return mode, nil
}

// Open opens (creating if needed) the store in dataDir and migrates it to
// the current schema.
func Open(dataDir string, opts Options) (*DB, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data dir: %w", err)
	}
	key := opts.SecretKey
	if key == nil {
		k, err := loadOrCreateKey(filepath.Join(dataDir, KeyFileName))
		if err != nil {
			return nil, err
		}
		key = k
	}
	s, err := newSealer(key)
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 2 * time.Second
	}
	path := filepath.Join(dataDir, FileName)
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, NoSync: opts.noSync, FreelistType: bolt.FreelistMapType})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("store: open %s: %w (waited %s for its lock; stop the other process or use another data dir)", path, ErrLocked, timeout)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db := &DB{bolt: b, sealer: s, path: path}
	if err := db.migrate(); err != nil {
		b.Close()
		return nil, err
	}
	return db, nil
}

// Path is the bbolt file's path.
func (db *DB) Path() string { return db.path }

// Close closes the file.
func (db *DB) Close() error { return db.bolt.Close() }

// Update runs fn in a read-write transaction. When fn succeeds and the
// commit fails (a full disk), the error wraps ErrUnavailable.
func (db *DB) Update(fn func(tx *Tx) error) error {
	var fnOK bool
	err := db.bolt.Update(func(btx *bolt.Tx) error {
		err := fn(&Tx{tx: btx, db: db})
		fnOK = err == nil
		return err
	})
	return db.committed(err, fnOK)
}

// Batch runs fn in a read-write transaction shared with other concurrent
// Batch callers (one commit for many writers). fn may run more than once.
// When fn succeeds and the commit fails, the error wraps ErrUnavailable.
func (db *DB) Batch(fn func(tx *Tx) error) error {
	var fnOK bool
	err := db.bolt.Batch(func(btx *bolt.Tx) error {
		err := fn(&Tx{tx: btx, db: db})
		fnOK = err == nil
		return err
	})
	return db.committed(err, fnOK)
}

// View runs fn in a read-only transaction.
func (db *DB) View(fn func(tx *Tx) error) error {
	return db.bolt.View(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx, db: db}) })
}

// Ping checks the file is open and readable and that writes commit (for
// /readyz): after a failed commit it tries a small write (Probe).
func (db *DB) Ping() error {
	if err := db.Probe(); err != nil {
		return err
	}
	return db.View(func(tx *Tx) error {
		if tx.tx.Bucket(bucketMeta) == nil {
			return errors.New("store: meta bucket missing")
		}
		return nil
	})
}

// Check runs bbolt's consistency check and returns the first problem found.
func (db *DB) Check() error {
	return db.View(func(tx *Tx) error {
		var first error
		for err := range tx.tx.Check() {
			if first == nil {
				first = fmt.Errorf("store: consistency: %w", err)
			}
		}
		if first != nil {
			return first
		}
		return checkGroupCounts(tx.tx)
	})
}

// OnCommit registers fn to run after the transaction commits.
func (tx *Tx) OnCommit(fn func()) { tx.tx.OnCommit(fn) }

// Writable reports whether the transaction may write.
func (tx *Tx) Writable() bool { return tx.tx.Writable() }

// NewID returns a random 16-hex-digit identifier.
func NewID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func getJSON(b *bolt.Bucket, key []byte, v any) error {
	raw := b.Get(key)
	if raw == nil {
		return ErrNotFound
	}
	return json.Unmarshal(raw, v)
}

func putJSON(b *bolt.Bucket, key []byte, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return b.Put(key, raw)
}
