package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func groupCount(t testing.TB, db *DB, typ, group string) GroupCount {
	t.Helper()
	var c GroupCount
	if err := db.View(func(tx *Tx) error { c = tx.OutboxGroupCount(typ, group); return nil }); err != nil {
		t.Fatal(err)
	}
	return c
}

// The counters follow every add, rewrite and delete, and a record whose
// key is already held is not counted twice.
func TestOutboxGroupCounts(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	var recs []OutboxRecord
	err := db.Update(func(tx *Tx) error {
		for i, w := range []int{50, 20, 0} {
			r, _, err := tx.OutboxAdd(OutboxRecord{Queue: "q", Type: "t", Group: "a", Weight: w, Key: fmt.Sprint("k", i)})
			if err != nil {
				return err
			}
			recs = append(recs, r)
		}
		if _, added, err := tx.OutboxAdd(OutboxRecord{Queue: "q", Type: "t", Group: "a", Weight: 99, Key: "k0"}); err != nil || added {
			return fmt.Errorf("add of a held key: added %v, %v", added, err)
		}
		_, _, err := tx.OutboxAdd(OutboxRecord{Queue: "q", Type: "other", Group: "a", Weight: 1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	check := func(when, typ, group string, want GroupCount) {
		t.Helper()
		if c := groupCount(t, db, typ, group); c != want {
			t.Errorf("%s: %s/%s = %+v, want %+v", when, typ, group, c, want)
		}
		if err := db.Check(); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
	check("after adds", "t", "a", GroupCount{Tasks: 3, Weight: 70})
	check("after adds", "other", "a", GroupCount{Tasks: 1, Weight: 1})
	check("after adds", "t", "b", GroupCount{})

	// A rewrite that keeps the group (a failure counted) changes nothing;
	// one that moves it moves the count.
	recs[0].Failures = 1
	recs[1].Group, recs[1].Weight = "b", 5
	err = db.Update(func(tx *Tx) error {
		if err := tx.OutboxUpdate(recs[0]); err != nil {
			return err
		}
		return tx.OutboxUpdate(recs[1])
	})
	if err != nil {
		t.Fatal(err)
	}
	check("after rewrites", "t", "a", GroupCount{Tasks: 2, Weight: 50})
	check("after rewrites", "t", "b", GroupCount{Tasks: 1, Weight: 5})

	// Deleting twice (a task that ran twice) counts once.
	err = db.Update(func(tx *Tx) error {
		for _, r := range []OutboxRecord{recs[0], recs[0], recs[1]} {
			if err := tx.OutboxDelete(r.Queue, r.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	check("after deletes", "t", "a", GroupCount{Tasks: 1, Weight: 0})
	check("after deletes", "t", "b", GroupCount{})
}

func TestOutboxGroupRefusesWhatCannotBeCounted(t *testing.T) {
	t.Parallel()
	db := openTest(t, t.TempDir())
	defer db.Close()
	for _, c := range []struct {
		r    OutboxRecord
		want string
	}{
		{OutboxRecord{Queue: "q", Type: "t", Group: "a", Weight: -1}, "weight is -1"},
		{OutboxRecord{Queue: "q", Type: "t", Weight: 3}, "weight but no group"},
		{OutboxRecord{Queue: "q", Type: "t", Group: strings.Repeat("g", bolt.MaxKeySize+1)}, "group is"},
	} {
		err := db.Update(func(tx *Tx) error { _, _, err := tx.OutboxAdd(c.r); return err })
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("add %+v: %v, want an error saying %q", c.r.Weight, err, c.want)
		}
	}
}

// The "outbox group counts" migration tags what an older build queued
// (new-message tasks and reclassify batches, from their payloads, and
// their dead letters, which a redrive queues again) and counts it.
func TestOutboxGroupsMigration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := openTest(t, dir)
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketOutbox)
		old := []OutboxRecord{
			{Queue: "gmail-message-added", Type: "gmail:message-added", Payload: json.RawMessage(`{"accountId":"acc1","messageId":"m1"}`)},
			{Queue: "gmail-message-added", Type: "gmail:message-added", Payload: json.RawMessage(`{"accountId":"acc1","messageId":"m2"}`)},
			{Queue: "gmail-message-added", Type: "gmail:message-added", Payload: json.RawMessage(`{"accountId":"acc2","messageId":"m3"}`)},
			{Queue: "rules-reclassify", Type: "rules:reclassify-batch", Payload: json.RawMessage(`{"jobId":"j","accountId":"acc1","threadIds":["t1","t2","t3"]}`)},
			{Queue: "rules-reclassify", Type: "rules:reclassify-batch", Payload: json.RawMessage(`{"jobId":"j","accountId":"acc1","threadIds":["t4"]}`)},
			{Queue: "gmail-sync", Type: "gmail:sync", Payload: json.RawMessage(`{"accountId":"acc1"}`)},
		}
		for i, r := range old {
			b, err := root.CreateBucketIfNotExists([]byte(r.Queue))
			if err != nil {
				return err
			}
			if err := putOutbox(b, uint64(i+1), r); err != nil {
				return err
			}
		}
		d := DeadLetter{ID: "00000000000000ff", Type: "rules:reclassify-batch", Queue: "rules-reclassify",
			Payload: json.RawMessage(`{"accountId":"acc2","threadIds":["t9","t8"]}`)}
		if err := putJSON(tx.Bucket(bucketDeadLetters), u64(0xff), d); err != nil {
			return err
		}
		if err := tx.DeleteBucket(bucketOutboxGroups); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put(keySchemaVersion, fmt.Appendf(nil, "%d", versionBefore(t, "outbox group counts")))
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, dir)
	defer db.Close()
	for _, c := range []struct {
		typ, group string
		want       GroupCount
	}{
		{"gmail:message-added", "acc1", GroupCount{Tasks: 2, Weight: 2}},
		{"gmail:message-added", "acc2", GroupCount{Tasks: 1, Weight: 1}},
		{"rules:reclassify-batch", "acc1", GroupCount{Tasks: 2, Weight: 4}},
		{"rules:reclassify-batch", "acc2", GroupCount{}},
		{"gmail:sync", "acc1", GroupCount{}},
	} {
		if got := groupCount(t, db, c.typ, c.group); got != c.want {
			t.Errorf("%s/%s after the migration = %+v, want %+v", c.typ, c.group, got, c.want)
		}
	}
	if err := db.Check(); err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *Tx) error {
		d, err := tx.DeadLetterGet("00000000000000ff")
		if err != nil {
			return err
		}
		if d.Group != "acc2" || d.Weight != 2 {
			return fmt.Errorf("dead letter after the migration = %+v, want group acc2 and weight 2", d)
		}
		// What the queue's redrive does with it.
		if err := tx.DeadLetterDiscard(d.ID); err != nil {
			return err
		}
		_, _, err = tx.OutboxAdd(OutboxRecord{Queue: d.Queue, Type: d.Type, Payload: d.Payload, Group: d.Group, Weight: d.Weight})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := groupCount(t, db, "rules:reclassify-batch", "acc2"); got != (GroupCount{Tasks: 1, Weight: 2}) {
		t.Errorf("redriven batch = %+v, want 1 task weighing 2", got)
	}
}

// fillOthers queues n records of the type spread over 50 other groups.
func fillOthers(tb testing.TB, db *DB, n int) {
	tb.Helper()
	payload := json.RawMessage(`{"accountId":"other","threadIds":["t1","t2"]}`)
	for done := 0; done < n; {
		err := db.Update(func(tx *Tx) error {
			for i := 0; i < 5000 && done < n; i, done = i+1, done+1 {
				g := fmt.Sprint("other-", done%50)
				if _, _, err := tx.OutboxAdd(OutboxRecord{Queue: "rules-reclassify", Type: "rules:reclassify-batch", Payload: payload, Group: g, Weight: 2}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// The lookup reads the group's counter, not the outbox: it costs the same
// with 50 records of other accounts queued as with 20,000 (a scan decodes
// each record, allocating for each).
func TestOutboxGroupCountDoesNotScan(t *testing.T) {
	// Not parallel: AllocsPerRun refuses to run in a parallel test.
	allocs := func(others int) float64 {
		db := openTest(t, t.TempDir())
		defer db.Close()
		fillOthers(t, db, others)
		err := db.Update(func(tx *Tx) error {
			_, _, err := tx.OutboxAdd(OutboxRecord{Queue: "rules-reclassify", Type: "rules:reclassify-batch", Group: "mine", Weight: 7})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		var got GroupCount
		n := testing.AllocsPerRun(100, func() {
			_ = db.View(func(tx *Tx) error { got = tx.OutboxGroupCount("rules:reclassify-batch", "mine"); return nil })
		})
		if got != (GroupCount{Tasks: 1, Weight: 7}) {
			t.Errorf("with %d others: %+v, want 1 task weighing 7", others, got)
		}
		return n
	}
	few, many := allocs(50), allocs(20000)
	if many != few {
		t.Errorf("a lookup allocates %v times with 20,000 other records, %v with 50: it must not depend on the outbox", many, few)
	}
}

// BenchmarkOutboxGroupCount looks up one account's queued batches among
// 100,000 records of other accounts; "scan" is what the Gmail backlog did
// before the counts (read the type's queue, match the account in each
// payload), for comparison.
func BenchmarkOutboxGroupCount(b *testing.B) {
	db, err := Open(b.TempDir(), Options{SecretKey: make([]byte, 32), noSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	fillOthers(b, db, 100000)
	err = db.Update(func(tx *Tx) error {
		_, _, err := tx.OutboxAdd(OutboxRecord{Queue: "rules-reclassify", Type: "rules:reclassify-batch",
			Payload: json.RawMessage(`{"accountId":"mine","threadIds":["t1"]}`), Group: "mine", Weight: 7})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("lookup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var got GroupCount
			_ = db.View(func(tx *Tx) error { got = tx.OutboxGroupCount("rules:reclassify-batch", "mine"); return nil })
			if got.Tasks != 1 {
				b.Fatalf("got %+v", got)
			}
		}
	})
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		needle := []byte(`"accountId":"mine"`)
		for b.Loop() {
			n := 0
			_ = db.View(func(tx *Tx) error {
				return tx.OutboxScan("rules-reclassify", "", 0, func(r OutboxRecord) bool {
					if r.Type == "rules:reclassify-batch" && bytes.Contains(r.Payload, needle) {
						n++
					}
					return true
				})
			})
			if n != 1 {
				b.Fatalf("scan found %d", n)
			}
		}
	})
}
