package gmail

import (
	"context"
	"errors"
	"fmt"
	"time"

	"mailroom/queue"
	"mailroom/store"
)

// maintainer returns the pipeline's background loop: it records a poll
// sync for each account not synced for PollInterval (a lost push delays a
// change but never loses it) and a watch renewal for each account not
// renewed for WatchRenew.
func (p *Pipeline) maintainer() *queue.Every {
	tick := min(p.cfg.PollInterval, p.cfg.FastPollInterval, p.cfg.WatchRenew) / 10
	tick = min(max(tick, 10*time.Millisecond), time.Minute)
	return queue.NewEvery("gmail maintenance", tick, p.log, func(context.Context) error { return p.maintain() })
}

// maintain records the polls and watch renewals that are due.
func (p *Pipeline) maintain() error {
	now := p.cfg.Now()
	var polls, renews []string
	var health pushHealth
	err := p.db.View(func(tx *store.Tx) error {
		accs, err := tx.Accounts()
		if err != nil {
			return err
		}
		for _, a := range accs {
			if !active(a) {
				continue
			}
			health.count(a)
			last := a.LastSyncAt
			if last.IsZero() {
				last = a.CreatedAt
			}
			if now.Sub(last) >= p.pollInterval(a) {
				if !p.pending(tx, TypeSync, syncKey(a.ID)) {
					polls = append(polls, a.ID)
				}
			}
			if p.WatchEnabled() && now.Sub(a.WatchRenewedAt) >= p.cfg.WatchRenew {
				if !p.pending(tx, TypeWatchRenew, watchKey(a.ID)) {
					renews = append(renews, a.ID)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.watchPushes(health)
	if len(polls)+len(renews) == 0 {
		return nil
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
			if _, _, err := p.queue.Enqueue(tx, TypeWatchRenew, watchPayload{AccountID: id}, queue.Key(watchKey(id))); err != nil {
				return err
			}
		}
		return nil
	})
}

// pushesArrive reports whether the account's pushes look healthy: one has
// come, and no poll since found changes that none announced.
func pushesArrive(a store.Account) bool {
	return !a.LastPushAt.IsZero() && !a.UnannouncedAt.After(a.LastPushAt)
}

// pollInterval is how often the account is synced without a push:
// PollInterval while its pushes arrive, FastPollInterval while they have
// stopped or never came.
func (p *Pipeline) pollInterval(a store.Account) time.Duration {
	if pushesArrive(a) {
		return p.cfg.PollInterval
	}
	return min(p.cfg.FastPollInterval, p.cfg.PollInterval)
}

// pushHealth counts the watched accounts whose pushes look stopped: a poll
// found changes that no push announced since the last push (or none ever
// came).
type pushHealth struct {
	accounts, stopped int
}

func (h *pushHealth) count(a store.Account) {
	h.accounts++
	if !a.UnannouncedAt.IsZero() && a.UnannouncedAt.After(a.LastPushAt) {
		h.stopped++
	}
}

// watchPushes sets the gauge of accounts whose pushes look stopped and
// raises one alert when some do (with what to check), and one when none
// do again.
func (p *Pipeline) watchPushes(h pushHealth) {
	if !p.WatchEnabled() {
		return
	}
	p.metrics.pushUnhealthy.Set(float64(h.stopped))
	p.mu.Lock()
	was := p.pushAlerted
	p.pushAlerted = h.stopped > 0
	p.mu.Unlock()
	var text string
	switch {
	case h.stopped > 0 && !was:
		text = fmt.Sprintf("Gmail pushes look stopped for %d of %d accounts: a poll found changes that no push announced. "+
			"Live mail now arrives only by polling, every %s. Check the Pub/Sub push subscription (its expiration policy must be \"never expire\": "+
			"Pub/Sub deletes a subscription after 31 days without activity by default), the topic's publisher grant to gmail-api-push@system.gserviceaccount.com, "+
			"and that the subscription's push endpoint and audience match this mailroom's /push/gmail URL and MAILROOM_PUSH_AUDIENCE.",
			h.stopped, h.accounts, humanDuration(min(p.cfg.FastPollInterval, p.cfg.PollInterval)))
		p.log.Warn("Gmail pushes look stopped", "accounts", h.stopped)
	case h.stopped == 0 && was:
		text = "Gmail pushes arrive again for every account; accounts are polled every " + humanDuration(p.cfg.PollInterval) + " again."
		p.log.Info("Gmail pushes arrive again")
	default:
		return
	}
	if p.cfg.Alert != nil {
		p.cfg.Alert(text)
	}
}

// PushHealth returns the accounts whose pushes look stopped and the
// accounts counted (active ones), for the admin pages.
func (p *Pipeline) PushHealth() (stopped, accounts int, err error) {
	var h pushHealth
	err = p.db.View(func(tx *store.Tx) error {
		accs, err := tx.Accounts()
		for _, a := range accs {
			if active(a) {
				h.count(a)
			}
		}
		return err
	})
	return h.stopped, h.accounts, err
}

// humanDuration says d in people's words: "2 minutes", "1 hour".
func humanDuration(d time.Duration) string {
	unit, n := "second", int(d/time.Second)
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		unit, n = "hour", int(d/time.Hour)
	case d >= time.Minute && d%time.Minute == 0:
		unit, n = "minute", int(d/time.Minute)
	}
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// pending reports whether a task of that type and key is recorded and not
// finished.
func (p *Pipeline) pending(tx *store.Tx, typ, key string) bool {
	return p.queue.Pending(tx, typ, key)
}

// tombstoneChunk is how many tombstones one pruning transaction deletes.
const tombstoneChunk = 1000

// tombstonePruner returns the loop that prunes the records of messages
// deleted more than TombstoneRetention ago: every hour, or every
// twenty-fourth of the retention when that is shorter.
func (p *Pipeline) tombstonePruner() *queue.Every {
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
