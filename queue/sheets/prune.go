package sheets

import (
	"context"
	"time"

	"mailroom/queue"
	"mailroom/store"
)

// pruneChunk is how many submissions one pruning transaction looks at.
const pruneChunk = 2000

// pruner returns the loop that deletes written submissions older than
// Retention, or nil when Retention is zero (they are kept for ever). It
// runs every Retention/24, at least every hour.
func (p *Pipeline) pruner() *queue.Every {
	if p.cfg.Retention <= 0 {
		return nil
	}
	return queue.NewEvery("sheets: prune written submissions", p.pruneEvery(), p.log, func(ctx context.Context) error {
		_, err := p.Prune(ctx)
		return err
	})
}

// pruneEvery is how often the pruner runs: every Retention/24, at least
// every hour (an hour too when nothing is pruned).
func (p *Pipeline) pruneEvery() time.Duration {
	if p.cfg.Retention <= 0 {
		return time.Hour
	}
	return min(max(p.cfg.Retention/24, time.Second), time.Hour)
}

// Prune deletes the submissions whose rows are in their sheets and that
// were submitted more than Retention ago, a chunk per transaction, and
// returns how many it deleted. Submissions still waiting are kept, however
// old.
func (p *Pipeline) Prune(ctx context.Context) (int, error) {
	before := p.cfg.Now().Add(-p.cfg.Retention)
	total := 0
	var from []byte
	for {
		var n int
		err := p.db.Update(func(tx *store.Tx) (err error) {
			n, from, err = tx.SubmissionsPrune(from, before, pruneChunk)
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		p.metrics.pruned.Add(float64(n))
		if from == nil || ctx.Err() != nil {
			break
		}
	}
	if total > 0 {
		p.log.Info("pruned written submissions", "count", total, "submitted_before", before)
	}
	return total, ctx.Err()
}
