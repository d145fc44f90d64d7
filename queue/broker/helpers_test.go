package broker_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.uber.org/goleak"

	"mailroom/internal/testkit"
	"mailroom/queue/broker"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// receive waits for a value on ch, failing the test after timeout.
func receive[T any](t testing.TB, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(timeout):
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
		var zero T
		return zero
	}
}

func newClient(t testing.TB, b *broker.Broker) *asynq.Client {
	t.Helper()
	c := asynq.NewClient(b.RedisConnOpt())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newInspector(t testing.TB, b *broker.Broker) *asynq.Inspector {
	t.Helper()
	i := asynq.NewInspector(b.RedisConnOpt())
	t.Cleanup(func() { _ = i.Close() })
	return i
}

// startServer starts an asynq server on b, shut down when the test ends
// (before b closes: cleanups run last-in first-out).
func startServer(t testing.TB, b *broker.Broker, cfg asynq.Config, h asynq.Handler) {
	t.Helper()
	cfg.LogLevel = asynq.FatalLevel // handler errors are the point of these tests
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 2 * time.Second
	}
	srv := asynq.NewServer(b.RedisConnOpt(), cfg)
	if err := srv.Start(h); err != nil {
		t.Fatalf("start asynq server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
}

// counts is the part of asynq.QueueInfo the tests compare.
type counts struct {
	Pending, Active, Scheduled, Retry, Archived int
	Processed, Failed                           int
}

func queueCounts(insp *asynq.Inspector, queue string) (counts, error) {
	qi, err := insp.GetQueueInfo(queue)
	if err != nil {
		return counts{}, fmt.Errorf("queue info %s: %w", queue, err)
	}
	return counts{
		Pending: qi.Pending, Active: qi.Active, Scheduled: qi.Scheduled,
		Retry: qi.Retry, Archived: qi.Archived,
		Processed: qi.Processed, Failed: qi.Failed,
	}, nil
}

// waitCounts waits until queue's counts equal want.
func waitCounts(t testing.TB, insp *asynq.Inspector, queue string, want counts, timeout time.Duration) {
	t.Helper()
	testkit.EventuallyNil(t, timeout, fmt.Sprintf("queue %s counts %+v", queue, want), func() error {
		got, err := queueCounts(insp, queue)
		if err == nil && got != want {
			err = fmt.Errorf("got %+v", got)
		}
		return err
	})
}

var errTest = errors.New("boom")
