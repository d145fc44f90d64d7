package queue_test

import (
	"fmt"
	"testing"
	"time"

	"mailroom/queue"
)

func fmtSscan(s string, n *int) (int, error) { return fmt.Sscan(s, n) }

// The task types of the queue's own tests: the engine names none.
const (
	typeRecord = "debug:record" // on the "debug" queue, 10 workers
	typeOther  = "test:other"   // on a queue of its own
	typePolled = "test:polled"  // on a queue polled every 10ms while awake (as webhooks:deliver)
)

// testTable is a table of the tests' own rows, without handlers.
func testTable(t testing.TB, maxRetries int) *queue.Table {
	t.Helper()
	table, err := queue.NewTable([]queue.TaskType{
		{Name: typeRecord, Queue: "debug", Concurrency: 10, MaxRetries: maxRetries, Timeout: time.Minute},
		{Name: typeOther, Queue: "other", Concurrency: 2, MaxRetries: maxRetries, Timeout: time.Minute},
		{Name: typePolled, Queue: "polled", Concurrency: 8, MaxRetries: maxRetries, Timeout: time.Minute, Poll: 10 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return table
}
