package store

import (
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

var (
	bucketMeta        = []byte("meta")
	bucketOutbox      = []byte("outbox")             // queue name -> sub-bucket: seq -> OutboxRecord
	bucketOutboxKeys  = []byte("outbox_keys")        // dedup key -> record id
	bucketDeadLetters = []byte("dead_letters")       // id -> DeadLetter
	bucketUsers       = []byte("users")              // id -> User
	bucketUserEmails  = []byte("user_emails")        // email -> id
	bucketTokens      = []byte("api_tokens")         // sha256(token) -> APIToken
	bucketSessions    = []byte("sessions")           // sha256(session) -> Session
	bucketDeadCounts  = []byte("dead_letter_counts") // task type -> count (uint64)
)

var keySchemaVersion = []byte("schema_version")

// migration moves the schema from version N-1 to N, where N is its index+1.
type migration struct {
	name string
	fn   func(tx *bolt.Tx) error
}

// migrations are applied in order, each in its own transaction, and never
// edited once released: add a new one instead.
var migrations = []migration{
	{"core buckets", func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketOutbox, bucketOutboxKeys, bucketDeadLetters,
			bucketUsers, bucketUserEmails, bucketTokens, bucketSessions)
	}},
	{"gmail accounts and messages", func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketAccounts, bucketAccountEmails, bucketGmailData)
	}},
	{"forms and submissions", func(tx *bolt.Tx) error {
		return createBuckets(tx, bucketForms, bucketFormSheets, bucketSubmissions, bucketFormBuffers, bucketSheetWrites)
	}},
	{"label rules and reclassify", createRulesBuckets},
	{"dead-letter counts per type", func(tx *bolt.Tx) error {
		counts, err := tx.CreateBucketIfNotExists(bucketDeadCounts)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketDeadLetters).ForEach(func(_, v []byte) error {
			var d struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(v, &d); err != nil {
				return err
			}
			return addCount(counts, d.Type, 1)
		})
	}},
	{"tombstone index", indexTombstones},
	{"API tokens made before user tokens are admin tokens", markTokensAdmin},
	{"outbox group counts", migrateOutboxGroups},
	{"the event log and webhooks", createEventBuckets},
	{"connect links", createConnectBuckets},
	{"label writes", createLabelWriteBuckets},
	{"owners of deleted accounts, forms and webhooks", createOwnerBuckets},
	{"webhook delivery log", createDeliveryBuckets},
	{"submission bytes per user", countUserFormBytes},
}

// markTokensAdmin makes every token without a user an admin token: before
// user tokens, every token reached everything, and a token that is neither
// admin nor a user's is refused.
func markTokensAdmin(tx *bolt.Tx) error {
	b := tx.Bucket(bucketTokens)
	type kv struct{ k, v []byte }
	var changed []kv
	err := b.ForEach(func(k, v []byte) error {
		var t map[string]json.RawMessage
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		if _, hasUser := t["userId"]; hasUser {
			return nil
		}
		t["admin"] = json.RawMessage("true")
		raw, err := json.Marshal(t)
		if err != nil {
			return err
		}
		changed = append(changed, kv{append([]byte(nil), k...), raw})
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range changed {
		if err := b.Put(c.k, c.v); err != nil {
			return err
		}
	}
	return nil
}

// SchemaVersion is the version this build migrates to.
func SchemaVersion() int { return len(migrations) }

func createBuckets(tx *bolt.Tx, names ...[]byte) error {
	for _, n := range names {
		if _, err := tx.CreateBucketIfNotExists(n); err != nil {
			return fmt.Errorf("create bucket %s: %w", n, err)
		}
	}
	return nil
}

func (db *DB) migrate() error {
	var version int
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if v := meta.Get(keySchemaVersion); v != nil {
			_, err := fmt.Sscanf(string(v), "%d", &version)
			return err
		}
		return meta.Put(keySchemaVersion, []byte("0"))
	})
	if err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	if version > len(migrations) {
		return fmt.Errorf("store: the data file has schema version %d but this build knows only up to %d; run a newer mailroom", version, len(migrations))
	}
	for i := version; i < len(migrations); i++ {
		m := migrations[i]
		err := db.bolt.Update(func(tx *bolt.Tx) error {
			if err := m.fn(tx); err != nil {
				return err
			}
			return tx.Bucket(bucketMeta).Put(keySchemaVersion, fmt.Appendf(nil, "%d", i+1))
		})
		if err != nil {
			return fmt.Errorf("store: migration %d (%s): %w", i+1, m.name, err)
		}
	}
	return nil
}
