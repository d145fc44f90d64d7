package store

import (
	"errors"
	"testing"
	"time"
)

// TestConnectLinkStates: a link is found by its token's key, a state bound
// to it is taken once, binding another state forgets the one before, and
// the sweep deletes links expired before the
// cut-off with their states, keeping the others.
func TestConnectLinkStates(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	now := time.Now().UTC()
	old := ConnectLink{Key: ConnectLinkKey("tok-old"), ID: NewID(), UserID: "u", ExpiresAt: now.Add(-48 * time.Hour)}
	live := ConnectLink{Key: ConnectLinkKey("tok-live"), ID: NewID(), UserID: "u", ExpiresAt: now.Add(15 * time.Minute)}
	err := db.Update(func(tx *Tx) error {
		for _, b := range []struct {
			l     *ConnectLink
			state string
		}{{&old, "state-old"}, {&live, "state-first"}, {&live, "state-live"}} {
			if err := tx.ConnectLinkBindState(b.state, b.l); err != nil {
				return err
			}
			if err := tx.ConnectLinkPut(*b.l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *Tx) error {
		l, err := tx.ConnectLinkTakeState("state-live")
		if err != nil || l.ID != live.ID {
			t.Errorf("take state: %+v, %v", l, err)
		}
		if _, err := tx.ConnectLinkTakeState("state-live"); !errors.Is(err, ErrNotFound) {
			t.Errorf("second take: %v, want not found", err)
		}
		if _, err := tx.ConnectLinkTakeState("state-first"); !errors.Is(err, ErrNotFound) {
			t.Errorf("a state bound before the latest: %v, want not found", err)
		}
		n, err := tx.ConnectLinksSweep(now.Add(-24*time.Hour), 100)
		if err != nil || n != 1 {
			t.Errorf("sweep: %d, %v; want 1", n, err)
		}
		if _, err := tx.ConnectLinkGet(old.Key); !errors.Is(err, ErrNotFound) {
			t.Errorf("swept link: %v", err)
		}
		if _, err := tx.ConnectLinkTakeState("state-old"); !errors.Is(err, ErrNotFound) {
			t.Errorf("the swept link's state: %v", err)
		}
		if _, err := tx.ConnectLinkGet(live.Key); err != nil {
			t.Errorf("live link after the sweep: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
