package gmail

import (
	"context"
	"errors"
	"fmt"
	"time"

	"mailroom/queue"
	"mailroom/store"
)

// Maintainer returns the pipeline's background loop: it records a poll
// sync for each account not synced for PollInterval (a lost push delays a
// change but never loses it) and a watch renewal for each account not
// renewed for WatchRenew.
func (p *Pipeline) Maintainer() *queue.Every {
	tick := min(p.cfg.PollInterval, p.cfg.WatchRenew) / 10
	tick = min(max(tick, 10*time.Millisecond), time.Minute)
	return queue.NewEvery("gmail maintenance", tick, p.log, func(context.Context) error { return p.maintain() })
}

// maintain records the polls and watch renewals that are due.
func (p *Pipeline) maintain() error {
	now := p.cfg.Now()
	var polls, renews []string
	err := p.db.View(func(tx *store.Tx) error {
		accs, err := tx.Accounts()
		if err != nil {
			return err
		}
		for _, a := range accs {
			if !active(a) {
				continue
			}
			last := a.LastSyncAt
			if last.IsZero() {
				last = a.CreatedAt
			}
			if now.Sub(last) >= p.cfg.PollInterval {
				if !p.pending(tx, queue.TypeGmailSync, syncKey(a.ID)) {
					polls = append(polls, a.ID)
				}
			}
			if p.WatchEnabled() && now.Sub(a.WatchRenewedAt) >= p.cfg.WatchRenew {
				if !p.pending(tx, queue.TypeGmailWatchRenew, watchKey(a.ID)) {
					renews = append(renews, a.ID)
				}
			}
		}
		return nil
	})
	if err != nil || len(polls)+len(renews) == 0 {
		return err
	}
	return p.db.Update(func(tx *store.Tx) error {
		for _, id := range polls {
			if _, err := tx.AccountGet(id); errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err := p.enqueueSync(tx, id, triggerPoll); err != nil {
				return err
			}
		}
		for _, id := range renews {
			if _, err := tx.AccountGet(id); errors.Is(err, store.ErrNotFound) {
				continue
			}
			if _, _, err := p.queue.Enqueue(tx, queue.TypeGmailWatchRenew, watchPayload{AccountID: id}, queue.Key(watchKey(id))); err != nil {
				return err
			}
		}
		return nil
	})
}

// pending reports whether a task of that type and key is recorded and not
// finished.
func (p *Pipeline) pending(tx *store.Tx, typ, key string) bool {
	return p.queue.Pending(tx, typ, key)
}

// tombstoneChunk is how many tombstones one pruning transaction deletes.
const tombstoneChunk = 1000

// TombstonePruner returns the loop that prunes the records of messages
// deleted more than TombstoneRetention ago: every hour, or every
// twenty-fourth of the retention when that is shorter.
func (p *Pipeline) TombstonePruner() *queue.Every {
	every := min(max(p.cfg.TombstoneRetention/24, time.Second), time.Hour)
	return queue.NewEvery("gmail: prune tombstones", every, p.log, func(ctx context.Context) error {
		_, err := p.PruneTombstones(ctx)
		return err
	})
}

// PruneTombstones deletes, for every account, the records of messages
// deleted more than TombstoneRetention ago, a chunk per transaction, and
// returns how many it deleted.
func (p *Pipeline) PruneTombstones(ctx context.Context) (int, error) {
	before := p.now().Add(-p.cfg.TombstoneRetention)
	var accs []store.Account
	if err := p.db.View(func(tx *store.Tx) (err error) { accs, err = tx.Accounts(); return err }); err != nil {
		return 0, err
	}
	total := 0
	for _, a := range accs {
		for more := true; more && ctx.Err() == nil; {
			var n int
			err := p.db.Update(func(tx *store.Tx) (err error) {
				n, more, err = tx.TombstonesPrune(a.ID, before, tombstoneChunk)
				return err
			})
			if err != nil {
				return total, fmt.Errorf("gmail: prune tombstones of account %s: %w", a.ID, err)
			}
			total += n
		}
	}
	if total > 0 {
		p.log.Info("pruned tombstones of deleted messages", "count", total, "deleted_before", before)
	}
	return total, ctx.Err()
}
