package rules

import (
	"time"

	"mailroom/queue"
)

// The pipeline's task types.
const (
	// TypeReclassifyBatch re-applies the given rules to up to a batch of
	// threads.
	TypeReclassifyBatch = "rules:reclassify-batch"
	// TypeLabelWrite sends an account's label changes to Gmail in
	// batchModify calls of up to 1,000 ids (one task per account at a time,
	// by key); not in the contract's table, which allows extra types.
	TypeLabelWrite = "rules:label-write"
)

// Tasks are the pipeline's rows of the task table, without handlers
// (Register attaches them); maxRetries is MAILROOM_MAX_RETRIES.
func Tasks(maxRetries int) []queue.TaskType {
	return []queue.TaskType{
		{Name: TypeReclassifyBatch, Queue: "rules-reclassify", Concurrency: 6, MaxRetries: maxRetries, Timeout: 5 * time.Minute},
		{Name: TypeLabelWrite, Queue: "rules-label-write", Concurrency: 4, MaxRetries: maxRetries, Timeout: 5 * time.Minute},
	}
}
