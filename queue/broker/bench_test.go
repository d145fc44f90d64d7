package broker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

// BenchmarkEnqueueDrain enqueues b.N tasks, then drains them with a no-op
// handler (concurrency 10), on the embedded store and on redis-server. It
// reports both rates; ns/op covers the two phases.
//
//	go test -run '^$' -bench EnqueueDrain -benchtime 5000x ./queue/broker/
func BenchmarkEnqueueDrain(b *testing.B) {
	b.Run("embedded", func(b *testing.B) { benchEnqueueDrain(b, brokertest.Embedded(b)) })
	b.Run("redis", func(b *testing.B) { benchEnqueueDrain(b, brokertest.Redis(b)) })
}

func benchEnqueueDrain(b *testing.B, br *broker.Broker) {
	client := newClient(b, br)
	task := asynq.NewTask("bench:noop", nil)

	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if _, err := client.Enqueue(task, asynq.Queue(queueName)); err != nil {
			b.Fatalf("Enqueue: %v", err)
		}
	}
	enqueue := time.Since(start)

	// Start the server on a full queue: an idle asynq server polls only
	// once a second, which would be measured instead of the drain.
	var handled atomic.Int64
	done := make(chan struct{})
	n := int64(b.N)
	drainStart := time.Now()
	startServer(b, br, asynq.Config{
		Queues:      map[string]int{queueName: 1},
		Concurrency: 10,
	}, asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if handled.Add(1) == n {
			close(done)
		}
		return nil
	}))
	receive(b, done, 5*time.Minute, "the queue to drain")
	drain := time.Since(drainStart)
	b.StopTimer()

	b.ReportMetric(float64(b.N)/enqueue.Seconds(), "enqueued/s")
	b.ReportMetric(float64(b.N)/drain.Seconds(), "drained/s")
}
