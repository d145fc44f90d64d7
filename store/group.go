package store

import (
	"errors"
	"sync"
)

// GroupCommit runs small writes of many goroutines in shared transactions
// without a timer: a writer that finds no commit running commits every
// write waiting (its own included) at once; writers arriving meanwhile wait
// for the next. Each writer returns once its write is durable. Unlike
// Batch it never waits 10 ms for company, so a lone writer's write costs
// one commit's time, and concurrent writers share one. The Gmail
// pipeline's event handlers and push intake and the webhooks pipeline use
// it.
type GroupCommit struct {
	DB *DB

	leader  sync.Mutex // held while a commit runs
	mu      sync.Mutex
	pending []*groupReq
}

type groupReq struct {
	fn   func(*Tx) error
	done chan error
}

// errGroupSolo marks a shared transaction abandoned because one write
// failed.
var errGroupSolo = errors.New("store: group commit: a write failed; running each alone")

// Do runs fn in a transaction shared with other writers and returns once
// it is committed (or fn's error). fn may run twice: when another write of
// the group fails, every write is run again in a transaction of its own.
func (g *GroupCommit) Do(fn func(*Tx) error) error {
	req := &groupReq{fn: fn, done: make(chan error, 1)}
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

func (g *GroupCommit) commit(batch []*groupReq) {
	if len(batch) == 1 {
		batch[0].done <- g.DB.Update(batch[0].fn)
		return
	}
	err := g.DB.Update(func(tx *Tx) error {
		for _, r := range batch {
			if err := r.fn(tx); err != nil {
				return errGroupSolo
			}
		}
		return nil
	})
	if errors.Is(err, errGroupSolo) {
		for _, r := range batch {
			r.done <- g.DB.Update(r.fn)
		}
		return
	}
	for _, r := range batch {
		r.done <- err
	}
}
