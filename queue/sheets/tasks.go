package sheets

import (
	"time"

	"mailroom/queue"
)

// TypeFlush writes one sheet's buffered rows.
const TypeFlush = "sheets:flush"

// Tasks are the pipeline's rows of the task table, without handlers
// (Register attaches them); maxRetries is MAILROOM_MAX_RETRIES.
func Tasks(maxRetries int) []queue.TaskType {
	return []queue.TaskType{
		// A flush waits in its task for its time and for short quota
		// refusals (Config.BrokerTick), so many of its workers wait rather
		// than work: enough of them that a burst of other accounts' flushes
		// does not keep a quiet account's flush waiting long for a worker
		// (4 did, under load: TestQuotaQuietAccountBesideBusyOnes).
		{Name: TypeFlush, Queue: "sheets-flush", Concurrency: 16, MaxRetries: maxRetries, Timeout: 2 * time.Minute},
	}
}
