package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
)

// A full sync lists the whole mailbox before it fetches anything, and keeps
// the ids it has yet to fetch grouped by thread: a thread with two or more
// listed messages is fetched whole with one threads.get (10 units) instead
// of one messages.get (5 units) a message. Grouping over the whole listing
// (not page by page) is what keeps a thread whose messages fall on several
// list pages from being fetched twice.
var (
	// subFullSyncTodo holds the groups in the order their first message
	// was listed (newest mail first, as messages.list answers).
	subFullSyncTodo = []byte("full_sync_todo") // seq -> fullSyncGroup
	// subFullSyncThreads finds a thread's group while the listing goes on.
	subFullSyncThreads = []byte("full_sync_threads") // thread id -> seq
)

// FullSyncRef is a listed message: its id and its thread's.
type FullSyncRef struct {
	ID       string
	ThreadID string
}

// FullSyncGroup is a thread's listed messages that the full sync has yet to
// fetch. ThreadID is empty for a message listed without its thread id (by a
// full sync that began before listings were grouped): it is fetched alone.
type FullSyncGroup struct {
	Seq      uint64
	ThreadID string
	IDs      []string
}

// fullSyncGroup is the stored value of a FullSyncGroup.
type fullSyncGroup struct {
	ThreadID string   `json:"t,omitempty"`
	IDs      []string `json:"ids"`
}

func seqKey(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }

// FullSyncListAdd adds listed messages to the groups of the full sync in
// progress: each to its thread's group, or to a new group at the end. An
// id its thread's group holds already (a page listed again) is not added
// twice.
func (tx *Tx) FullSyncListAdd(accountID string, refs []FullSyncRef) error {
	data, err := tx.accountData(accountID, true)
	if err != nil {
		return err
	}
	todo, err := data.CreateBucketIfNotExists(subFullSyncTodo)
	if err != nil {
		return fmt.Errorf("store: full sync groups of account %s: %w", accountID, err)
	}
	threads, err := data.CreateBucketIfNotExists(subFullSyncThreads)
	if err != nil {
		return fmt.Errorf("store: full sync groups of account %s: %w", accountID, err)
	}
	for _, r := range refs {
		if r.ThreadID != "" {
			if k := threads.Get([]byte(r.ThreadID)); k != nil {
				if raw := todo.Get(k); raw != nil {
					var g fullSyncGroup
					if err := json.Unmarshal(raw, &g); err != nil {
						return fmt.Errorf("store: full sync group of account %s: %w", accountID, err)
					}
					if !slices.Contains(g.IDs, r.ID) {
						g.IDs = append(g.IDs, r.ID)
						if err := putJSON(todo, k, g); err != nil {
							return err
						}
					}
					continue
				}
			}
		}
		seq, err := todo.NextSequence()
		if err != nil {
			return err
		}
		k := seqKey(seq)
		if err := putJSON(todo, k, fullSyncGroup{ThreadID: r.ThreadID, IDs: []string{r.ID}}); err != nil {
			return err
		}
		if r.ThreadID != "" {
			if err := threads.Put([]byte(r.ThreadID), k); err != nil {
				return err
			}
		}
	}
	return nil
}

// FullSyncGroups returns the first groups of the full sync in progress, in
// the order they were listed, until they hold at least max messages (a
// thread is never split: the last group may go past max).
func (tx *Tx) FullSyncGroups(accountID string, max int) ([]FullSyncGroup, error) {
	todo, err := tx.accountSub(accountID, subFullSyncTodo, false)
	if todo == nil || err != nil {
		return nil, err
	}
	var out []FullSyncGroup
	n := 0
	c := todo.Cursor()
	for k, v := c.First(); k != nil && n < max; k, v = c.Next() {
		var g fullSyncGroup
		if err := json.Unmarshal(v, &g); err != nil {
			return nil, fmt.Errorf("store: full sync group of account %s: %w", accountID, err)
		}
		out = append(out, FullSyncGroup{Seq: binary.BigEndian.Uint64(k), ThreadID: g.ThreadID, IDs: g.IDs})
		n += len(g.IDs)
	}
	return out, nil
}

// FullSyncGroupsDone drops groups of the full sync in progress (their
// messages are stored, or gone). The thread index keeps them: a thread
// listed again (a page listed twice) finds its group gone and gets a new
// one, whose messages stored already are skipped by FullSyncFetched.
func (tx *Tx) FullSyncGroupsDone(accountID string, seqs []uint64) error {
	todo, err := tx.accountSub(accountID, subFullSyncTodo, false)
	if todo == nil || err != nil {
		return err
	}
	for _, s := range seqs {
		if err := todo.Delete(seqKey(s)); err != nil {
			return err
		}
	}
	return nil
}

// FullSyncRegroup moves the page a full sync serving request requested
// listed last, as it was kept before listings were grouped by thread
// (FullSyncListed: ids without their thread ids), into groups of one
// message each, fetched alone with messages.get. The pages listed after it
// are grouped by thread as they come.
func (tx *Tx) FullSyncRegroup(accountID string, requested uint64) error {
	ids, err := tx.FullSyncListed(accountID, requested)
	if err != nil {
		return err
	}
	refs := make([]FullSyncRef, len(ids))
	for i, id := range ids {
		refs[i] = FullSyncRef{ID: id}
	}
	if err := tx.FullSyncListAdd(accountID, refs); err != nil {
		return err
	}
	return tx.FullSyncListedPut(accountID, requested, nil)
}
