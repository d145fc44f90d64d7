package googlefake_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"google.golang.org/api/gmail/v1"

	"mailroom/internal/googlefake"
)

// TestLargeMailbox fills a mailbox with 100,000 messages (10,000 under the
// race detector) and reads it back through the official client, to keep the
// emulator fit for benchmarks.
func TestLargeMailbox(t *testing.T) {
	if testing.Short() {
		t.Skip("large mailbox in -short mode")
	}
	size := 100_000
	if raceEnabled {
		size = 10_000
	}
	e := newEnv(t, googlefake.Options{})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	start0 := e.srv.Gmail.HistoryID(ann)
	must[[]string](t)(e.srv.Gmail.Generate(ann, size, 5))
	fill := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	start = time.Now()
	n := 0
	err := e.gmail.Users.History.List("me").StartHistoryId(start0).MaxResults(500).
		Pages(context.Background(), func(r *gmail.ListHistoryResponse) error {
			n += len(r.History)
			return nil
		})
	check(t, err)
	read := time.Since(start)
	if n != size {
		t.Fatalf("history records = %d, want %d", n, size)
	}
	start = time.Now()
	m := 0
	err = e.gmail.Users.Messages.List("me").MaxResults(500).Pages(context.Background(), func(r *gmail.ListMessagesResponse) error {
		m += len(r.Messages)
		return nil
	})
	check(t, err)
	t.Logf("%d messages: fill %v (%.0f/s), heap +%d MiB; history.list of them %v (%.0f records/s); messages.list of %d %v",
		size, fill, float64(size)/fill.Seconds(), (after.HeapAlloc-before.HeapAlloc)>>20, read, float64(n)/read.Seconds(), m, time.Since(start))
}

func BenchmarkAddMessage(b *testing.B) {
	srv := googlefake.New(googlefake.Options{})
	defer srv.Close()
	srv.AddAccount(ann)
	gen := googlefake.NewGenerator(1, time.Now().Add(-24*time.Hour))
	b.ResetTimer()
	for b.Loop() {
		if _, err := gen.Add(srv.Gmail, ann, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHistoryListHTTP(b *testing.B) {
	srv := googlefake.New(googlefake.Options{})
	base, err := srv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	tok := srv.AddAccount(ann)
	_ = tok
	start := srv.Gmail.HistoryID(ann)
	if _, err := srv.Gmail.Generate(ann, 10_000, 1); err != nil {
		b.Fatal(err)
	}
	access, err := srv.AccessToken(ann)
	if err != nil {
		b.Fatal(err)
	}
	svc := staticGmail(b, base, access)
	b.ResetTimer()
	for b.Loop() {
		if _, err := svc.Users.History.List("me").StartHistoryId(start).MaxResults(500).Do(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(500*b.N)/b.Elapsed().Seconds(), "records/s")
}
