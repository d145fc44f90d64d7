package gmail

import (
	"errors"
	"sync"

	"mailroom/store"
)

// groupCommit runs small writes of many goroutines in shared transactions
// without a timer: a writer that finds no commit running commits every
// write waiting (its own included) at once; writers arriving meanwhile wait
// for the next. Each writer returns once its write is durable. Unlike
// bbolt's Batch it never waits 10 ms for company, so an event handler's
// write costs one commit's time, shared by every handler writing then.
type groupCommit struct {
	db *store.DB

	leader  sync.Mutex // held while a commit runs
	mu      sync.Mutex
	pending []*commitReq
}

type commitReq struct {
	fn   func(*store.Tx) error
	done chan error
}

// errSolo marks a shared transaction abandoned because one write failed.
var errSolo = errors.New("gmail: group commit: a write failed; running each alone")

// Do runs fn in a transaction shared with other writers and returns once
// it is committed (or fn's error). fn may run twice: when another write of
// the group fails, every write is run again in a transaction of its own.
func (g *groupCommit) Do(fn func(*store.Tx) error) error {
	req := &commitReq{fn: fn, done: make(chan error, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, req)
	g.mu.Unlock()

	g.leader.Lock()
	select {
	case err := <-req.done: // the previous commit took it
		g.leader.Unlock()
		return err
	default:
	}
	g.mu.Lock()
	batch := g.pending
	g.pending = nil
	g.mu.Unlock()
	g.commit(batch)
	g.leader.Unlock()
	return <-req.done
}

func (g *groupCommit) commit(batch []*commitReq) {
	if len(batch) == 1 {
		batch[0].done <- g.db.Update(batch[0].fn)
		return
	}
	err := g.db.Update(func(tx *store.Tx) error {
		for _, r := range batch {
			if err := r.fn(tx); err != nil {
				return errSolo
			}
		}
		return nil
	})
	if errors.Is(err, errSolo) {
		for _, r := range batch {
			r.done <- g.db.Update(r.fn)
		}
		return
	}
	for _, r := range batch {
		r.done <- err
	}
}
