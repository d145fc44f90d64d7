package store

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// writeHealth remembers that a commit failed, until a Probe succeeds. A
// failed commit
// (ENOSPC, EIO) leaves nothing behind: bbolt rolls the transaction back and
// the file stays consistent, so the store recovers by itself once a commit
// succeeds again (Probe tries one).
type writeHealth struct {
	mu    sync.Mutex
	err   error
	since time.Time
}

var keyWriteProbe = []byte("write_probe")

// committed records the outcome of a write transaction and wraps a failed
// commit (fn succeeded, the commit did not) in ErrUnavailable.
func (db *DB) committed(err error, fnOK bool) error {
	h := &db.health
	switch {
	case err == nil:
		// Not a sign of health by itself: a small commit may fit in pages
		// the file holds while larger ones fail. Probe clears the state.
		return nil
	case fnOK && !errors.Is(err, ErrUnavailable):
		h.mu.Lock()
		if h.err == nil {
			h.since = time.Now()
		}
		h.err = err
		h.mu.Unlock()
		return fmt.Errorf("store: commit: %w: %w", ErrUnavailable, err)
	}
	return err
}

// WriteHealth returns, after a failed commit and until a Probe succeeds,
// that commit's error (wrapping ErrUnavailable) and since when commits
// fail; nil when writes work.
func (db *DB) WriteHealth() (since time.Time, err error) {
	h := &db.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		return time.Time{}, nil
	}
	return h.since, fmt.Errorf("%w: %w", ErrUnavailable, h.err)
}

// probeSize is the size of the value Probe writes: a commit of a few
// bytes often fits in pages the file already holds while larger ones fail,
// so the probe asks for room as a real request would.
const probeSize = 1 << 20

// Probe, after a failed commit, tries a write of probeSize bytes (then
// deletes it) to see whether commits work again (space came back); it
// returns nil when they do (or when none failed).
func (db *DB) Probe() error {
	if _, err := db.WriteHealth(); err == nil {
		return nil
	}
	if err := db.Update(func(tx *Tx) error {
		return tx.tx.Bucket(bucketMeta).Put(keyWriteProbe, make([]byte, probeSize))
	}); err != nil {
		return err
	}
	if err := db.Update(func(tx *Tx) error { return tx.tx.Bucket(bucketMeta).Delete(keyWriteProbe) }); err != nil {
		return err
	}
	h := &db.health
	h.mu.Lock()
	h.err, h.since = nil, time.Time{}
	h.mu.Unlock()
	return nil
}
