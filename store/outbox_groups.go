package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// bucketOutboxGroups counts the live outbox records of each task type and
// group: type -> sub-bucket: group -> tasks (uint64) and weight (uint64).
// It changes in the transactions that add, rewrite and delete records, so
// it is exact whatever happens between them (kill -9, restart): a lookup
// answers what a scan of the outbox would.
var bucketOutboxGroups = []byte("outbox_groups")

// GroupCount is how many live outbox records of a type carry a group, and
// the sum of their weights.
type GroupCount struct {
	Tasks  int `json:"tasks"`
	Weight int `json:"weight"`
}

// checkGroup refuses a record's group fields that cannot be counted.
func checkGroup(r OutboxRecord) error {
	switch {
	case r.Weight < 0:
		return fmt.Errorf("store: outbox record weight is %d; it must not be negative", r.Weight)
	case r.Weight > 0 && r.Group == "":
		return fmt.Errorf("store: outbox record has a weight but no group; a weight counts only within a group")
	case len(r.Group) > bolt.MaxKeySize:
		return fmt.Errorf("store: outbox record group is %d bytes; at most %d", len(r.Group), bolt.MaxKeySize)
	}
	return nil
}

// countGroup adds sign times r to its group's counters (nothing for a
// record without a group).
func countGroup(tx *bolt.Tx, r OutboxRecord, sign int64) error {
	if r.Group == "" {
		return nil
	}
	root := tx.Bucket(bucketOutboxGroups)
	types, err := root.CreateBucketIfNotExists([]byte(r.Type))
	if err != nil {
		return fmt.Errorf("store: group counts of %s: %w", r.Type, err)
	}
	c := readGroupCount(types.Get([]byte(r.Group)))
	c.Tasks += int(sign)
	c.Weight += int(sign) * r.Weight
	if c.Tasks <= 0 {
		return types.Delete([]byte(r.Group))
	}
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v[:8], uint64(c.Tasks))
	binary.BigEndian.PutUint64(v[8:], uint64(max(c.Weight, 0)))
	return types.Put([]byte(r.Group), v)
}

func readGroupCount(v []byte) GroupCount {
	if len(v) != 16 {
		return GroupCount{}
	}
	return GroupCount{Tasks: int(binary.BigEndian.Uint64(v[:8])), Weight: int(binary.BigEndian.Uint64(v[8:]))}
}

// OutboxGroupCount returns how many live records of type typ carry group,
// and their total weight: one key read, however many records the outbox
// holds.
func (tx *Tx) OutboxGroupCount(typ, group string) GroupCount {
	types := tx.tx.Bucket(bucketOutboxGroups).Bucket([]byte(typ))
	if types == nil || group == "" {
		return GroupCount{}
	}
	return readGroupCount(types.Get([]byte(group)))
}

// checkGroupCounts recounts the outbox and compares with the counters (a
// consistency check: it reads every record).
func checkGroupCounts(tx *bolt.Tx) error {
	want, err := recountGroups(tx)
	if err != nil {
		return err
	}
	have := map[[2]string]GroupCount{}
	err = tx.Bucket(bucketOutboxGroups).ForEachBucket(func(typ []byte) error {
		return tx.Bucket(bucketOutboxGroups).Bucket(typ).ForEach(func(g, v []byte) error {
			have[[2]string{string(typ), string(g)}] = readGroupCount(v)
			return nil
		})
	})
	if err != nil {
		return err
	}
	for k, w := range want {
		if have[k] != w {
			return fmt.Errorf("store: consistency: outbox group %s/%s counts %+v, its records %+v", k[0], k[1], have[k], w)
		}
	}
	for k, h := range have {
		if _, ok := want[k]; !ok {
			return fmt.Errorf("store: consistency: outbox group %s/%s counts %+v but has no record", k[0], k[1], h)
		}
	}
	return nil
}

// recountGroups counts the groups of every live outbox record.
func recountGroups(tx *bolt.Tx) (map[[2]string]GroupCount, error) {
	out := map[[2]string]GroupCount{}
	root := tx.Bucket(bucketOutbox)
	err := root.ForEachBucket(func(queue []byte) error {
		return root.Bucket(queue).ForEach(func(k, v []byte) error {
			var r struct {
				Type   string `json:"type"`
				Group  string `json:"group"`
				Weight int    `json:"weight"`
			}
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("store: decode outbox record %x: %w", k, err)
			}
			if r.Group == "" {
				return nil
			}
			key := [2]string{r.Type, r.Group}
			c := out[key]
			c.Tasks++
			c.Weight += r.Weight
			out[key] = c
			return nil
		})
	})
	return out, err
}

// groupedBefore are the task types whose records carry a group since the
// "outbox group counts" migration, and how a record written before it
// names its group and weight in its payload: the Gmail pipeline's new
// message tasks (the account; weight 1) and the rules pipeline's
// reclassify batches (the account; weight: its threads). The migration
// reads these payloads once, as migrations read the data of older
// versions; nothing else in the store looks inside a payload.
var groupedBefore = map[string]func(payload []byte) (group string, weight int){
	"gmail:message-added": func(p []byte) (string, int) {
		var e struct {
			AccountID string `json:"accountId"`
		}
		_ = json.Unmarshal(p, &e)
		return e.AccountID, 1
	},
	"rules:reclassify-batch": func(p []byte) (string, int) {
		var b struct {
			AccountID string   `json:"accountId"`
			ThreadIDs []string `json:"threadIds"`
		}
		_ = json.Unmarshal(p, &b)
		return b.AccountID, len(b.ThreadIDs)
	},
}

// migrateOutboxGroups tags the records (and dead letters, which a redrive
// puts back) that an older build wrote without a group, and counts every
// live record's group.
func migrateOutboxGroups(tx *bolt.Tx) error {
	if _, err := tx.CreateBucketIfNotExists(bucketOutboxGroups); err != nil {
		return err
	}
	root := tx.Bucket(bucketOutbox)
	err := root.ForEachBucket(func(queue []byte) error {
		b := root.Bucket(queue)
		var tagged []OutboxRecord
		var seqs [][]byte
		err := b.ForEach(func(k, v []byte) error {
			r, err := decodeOutbox(string(queue), k, v)
			if err != nil {
				return err
			}
			if fn, ok := groupedBefore[r.Type]; ok && r.Group == "" {
				if g, w := fn(r.Payload); g != "" {
					r.Group, r.Weight = g, w
					tagged = append(tagged, r)
					seqs = append(seqs, append([]byte(nil), k...))
				}
			}
			return countGroup(tx, r, 1)
		})
		if err != nil {
			return err
		}
		for i, r := range tagged {
			if err := putOutbox(b, binary.BigEndian.Uint64(seqs[i]), r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	dead := tx.Bucket(bucketDeadLetters)
	var letters [][2][]byte
	err = dead.ForEach(func(k, v []byte) error {
		var d DeadLetter
		if err := json.Unmarshal(v, &d); err != nil {
			return fmt.Errorf("store: decode dead letter %x: %w", k, err)
		}
		fn, ok := groupedBefore[d.Type]
		if !ok || d.Group != "" {
			return nil
		}
		if d.Group, d.Weight = fn(d.Payload); d.Group == "" {
			return nil
		}
		raw, err := json.Marshal(d)
		if err != nil {
			return err
		}
		letters = append(letters, [2][]byte{append([]byte(nil), k...), raw})
		return nil
	})
	if err != nil {
		return err
	}
	for _, kv := range letters {
		if err := dead.Put(kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}
