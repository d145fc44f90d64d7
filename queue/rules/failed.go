package rules

import (
	"encoding/json"
	"errors"

	"mailroom/queue"
	"mailroom/store"
)

// BatchDead is the dead-letter hook of rules:reclassify-batch: the batch
// counts as failed in its job, in the transaction that moves it to the dead
// letters, so the job finishes (with its failed batches shown) instead of
// running for ever. A redriven batch that then runs counts as done, or as
// skipped when its rules have a newer job by then.
func (p *Pipeline) BatchDead(tx *store.Tx, t *queue.Task) error {
	var pl batchPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return nil // not a batch of ours: nothing to count
	}
	return p.moveBatch(tx, pl, store.BatchWaiting, store.BatchFailed)
}

// settleFailed runs when a batch turns out stale: a batch that was redriven
// from the dead letters counts as skipped instead of failed.
func (p *Pipeline) settleFailed(pl batchPayload) error {
	failed := false
	_ = p.db.View(func(tx *store.Tx) error {
		bt, err := tx.ReclassifyBatchGet(pl.JobID, pl.Index)
		failed = err == nil && bt.State == store.BatchFailed
		return nil
	})
	if !failed {
		return nil
	}
	return p.db.Update(func(tx *store.Tx) error {
		return p.moveBatch(tx, pl, store.BatchFailed, store.BatchStale)
	})
}

// moveBatch moves a batch from state from to state to and keeps its job's
// counters and finish time; a batch in another state, or gone, is left.
func (p *Pipeline) moveBatch(tx *store.Tx, pl batchPayload, from, to string) error {
	bt, err := tx.ReclassifyBatchGet(pl.JobID, pl.Index)
	if errors.Is(err, store.ErrNotFound) || err == nil && bt.State != from {
		return nil
	}
	if err != nil {
		return err
	}
	job, err := tx.ReclassifyJobGet(pl.JobID)
	if err != nil {
		return err
	}
	*batchCounter(&job, from)--
	*batchCounter(&job, to)++
	bt.State = to
	if err := tx.ReclassifyBatchPut(bt); err != nil {
		return err
	}
	if job.Waiting() == 0 {
		job.FinishedAt = p.cfg.Now().UTC()
	}
	if err := tx.ReclassifyJobPut(job); err != nil {
		return err
	}
	return p.flushJobTx(tx, job)
}

// batchCounter is the job's count of batches in a state; waiting batches
// are not counted (Waiting derives them), so it points at a scratch int.
func batchCounter(j *store.ReclassifyJob, state string) *int {
	switch state {
	case store.BatchDone:
		return &j.BatchesDone
	case store.BatchStale:
		return &j.BatchesSkippedStale
	case store.BatchFailed:
		return &j.BatchesFailed
	}
	return new(int)
}
