package store

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"
)

var (
	keyBrokerState = []byte("broker_state")
	// bucketAlerts holds the dead-letter alerts not delivered yet, one
	// entry per task type. It is made on first use (no migration), so
	// readers accept its absence.
	bucketAlerts = []byte("pending_alerts")
)

// BrokerState is what the process last knew of the broker's memory: the
// epoch it marked the broker with and when it last saw the broker alive.
// When a later start finds the broker without that epoch, the broker forgot
// what it held (a restart without persistence, a flush, the embedded store
// of a previous process), and windows kept there (rate limits, quotas) are
// resumed as if fully spent at AliveAt.
type BrokerState struct {
	// Instance names this data file in the broker's keys (made once), so
	// that two data files on one Redis never take each other's epoch.
	Instance string    `json:"instance,omitempty"`
	Epoch    string    `json:"epoch"`
	AliveAt  time.Time `json:"aliveAt"`
}

// BrokerState returns the stored broker state (zero when none is stored).
func (tx *Tx) BrokerState() (BrokerState, error) {
	var s BrokerState
	raw := tx.tx.Bucket(bucketMeta).Get(keyBrokerState)
	if raw == nil {
		return s, nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("store: decode broker state: %w", err)
	}
	return s, nil
}

// PutBrokerState stores s.
func (tx *Tx) PutBrokerState(s BrokerState) error {
	raw, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return tx.tx.Bucket(bucketMeta).Put(keyBrokerState, raw)
}

// PendingAlert is the dead letters of one task type not announced yet.
type PendingAlert struct {
	Type  string `json:"type"`
	Count int    `json:"count"`
	// The newest dead letter of the type.
	NewestID    string    `json:"newestId"`
	NewestError string    `json:"newestError"`
	NewestAt    time.Time `json:"newestAt"`
}

// AlertAdd counts one dead letter of typ for the next alert. Call it in the
// transaction that makes the dead letter, so that the alert survives a
// crash right after the commit.
func (tx *Tx) AlertAdd(typ, id, errText string, at time.Time) error {
	b, err := tx.tx.CreateBucketIfNotExists(bucketAlerts)
	if err != nil {
		return fmt.Errorf("store: alerts bucket: %w", err)
	}
	var a PendingAlert
	if err := getJSON(b, []byte(typ), &a); err != nil && err != ErrNotFound {
		return fmt.Errorf("store: decode pending alert %s: %w", typ, err)
	}
	a.Type = typ
	a.Count++
	a.NewestID, a.NewestError, a.NewestAt = id, errText, at.UTC()
	return putJSON(b, []byte(typ), a)
}

// PendingAlerts returns the alerts not delivered yet, by task type.
func (tx *Tx) PendingAlerts() ([]PendingAlert, error) {
	b := tx.tx.Bucket(bucketAlerts)
	if b == nil {
		return nil, nil
	}
	var out []PendingAlert
	err := b.ForEach(func(k, v []byte) error {
		var a PendingAlert
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("store: decode pending alert %s: %w", k, err)
		}
		out = append(out, a)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Type < out[j].Type })
	return out, err
}

// AlertsDelivered takes what sent announced off the pending alerts; dead
// letters counted after sent was read stay pending.
func (tx *Tx) AlertsDelivered(sent []PendingAlert) error {
	b := tx.tx.Bucket(bucketAlerts)
	if b == nil {
		return nil
	}
	for _, s := range sent {
		var a PendingAlert
		err := getJSON(b, []byte(s.Type), &a)
		if err == ErrNotFound {
			continue
		}
		if err != nil {
			return fmt.Errorf("store: decode pending alert %s: %w", s.Type, err)
		}
		a.Count -= s.Count
		if a.Count <= 0 {
			err = b.Delete([]byte(s.Type))
		} else {
			err = putJSON(b, []byte(s.Type), a)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// DataID returns the id of this data file (BrokerState.Instance), made and
// stored on first use. It names the data file on the broker: on its epoch
// and on its lease.
func (db *DB) DataID() (string, error) {
	var id string
	err := db.Update(func(tx *Tx) error {
		s, err := tx.BrokerState()
		if err != nil {
			return err
		}
		if s.Instance == "" {
			s.Instance = NewID()
			if err := tx.PutBrokerState(s); err != nil {
				return err
			}
		}
		id = s.Instance
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store: data file id: %w", err)
	}
	return id, nil
}
