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

// Concurrency is how many webhook batches are posted at once. A webhook
// has one batch in flight at a time and its worker mostly waits on the
// receiver, so the workers bound how many webhooks are served at once:
// with 8, 100 webhooks took turns, 8 at a time.
const Concurrency = 128

// Tasks are the pipeline's rows of the task table, without handlers
// (Register attaches them).
func Tasks() []queue.TaskType {
	return []queue.TaskType{
		{Name: TypeDeliver, Queue: "webhooks", Concurrency: Concurrency, MaxRetries: MaxRetries, Timeout: time.Minute, Poll: Poll},
	}
}
