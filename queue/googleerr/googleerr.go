// Package googleerr maps the Google adapter's error classes (queue/google)
// to the task engine's (queue). The adapter knows no engine; each pipeline
// that calls Google maps the adapter's errors with ToQueue where it takes
// them, so that its tasks and its API speak the engine's classes.
package googleerr

import (
	"errors"

	"mailroom/queue"
	"mailroom/queue/google"
)

// ToQueue returns err in the queue's classes:
//
//   - google.Refused: queue.RateLimited for its RetryAfter (no failure,
//     no attempt counted);
//   - google.Permanent: queue.Permanent (to the dead letters at once);
//   - google.Transient and the rest: as it is (retried with backoff).
//
// An error already in a queue class is returned as it is, so mapping
// twice changes nothing. The result wraps err: errors.Is and errors.As
// still find the adapter's sentinels and classes.
func ToQueue(err error) error {
	if err == nil || queue.IsPermanent(err) {
		return err
	}
	if _, limited := queue.RetryAfter(err); limited {
		return err
	}
	var r *google.Refused
	switch {
	case errors.As(err, &r):
		return queue.RateLimited(err, r.RetryAfter)
	case google.IsPermanent(err):
		return queue.Permanent(err)
	}
	return err
}
