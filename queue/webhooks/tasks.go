package webhooks

import (
	"time"

	"mailroom/queue"
)

// TypeDeliver delivers one webhook's next batch of events (1-100).
const TypeDeliver = "webhooks:deliver"

// MaxRetries bounds a webhook batch's retries only as a backstop: a batch
// is retried until Config.MaxAge has passed (its handler then gives it
// up), and at the longest backoff (MAILROOM_RETRY_MAX, 5 minutes) this is
// years.
const MaxRetries = 1 << 20

// Poll is how often the webhooks queue's server, while awake, looks for
// the next batch: a webhook's batches follow one another, each waiting for
// the poll (the server sleeps when idle).
const Poll = 10 * time.Millisecond

// Tasks are the pipeline's rows of the task table, without handlers
// (Register attaches them).
func Tasks() []queue.TaskType {
	return []queue.TaskType{
		{Name: TypeDeliver, Queue: "webhooks", Concurrency: 8, MaxRetries: MaxRetries, Timeout: time.Minute, Poll: Poll},
	}
}
