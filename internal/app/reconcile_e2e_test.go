package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"mailroom/internal/app"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker/brokertest"
)

// TestSheetsSurviveRedisLoss runs the forms pipeline on an external
// redis-server, restarts it without persistence in the middle of a burst of
// submissions and later flushes it (FLUSHALL) in the middle of another,
// without restarting mailroom: the API answers 202 (work kept in the
// outbox) or 503, never 500; /readyz is 503 during the outage; and every
// accepted row is in the sheet once and in order within a minute of
// Redis's return.
func TestSheetsSurviveRedisLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a redis-server and restarts it")
	}
	rp := brokertest.StartRedisProcess(t)
	// The quotas are not under test here (the emulator's matches ours).
	fake := googlefake.StartForTest(t, googlefake.Options{SheetsWriteLimit: 1000})
	ta, userID, accountID, book := sheetsApp(t, fake, func(cfg *app.Config) {
		cfg.RedisURL = rp.URL()
		cfg.SheetsFlushDelay = 200 * time.Millisecond
		cfg.SheetsFlushThreshold = 50
		cfg.SheetsWritesPerMinute = 1000
	})
	var form sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"n"},
	}, http.StatusCreated, &form)

	var (
		mu       sync.Mutex
		accepted []string
		statuses = map[int]int{}
		n        atomic.Int64
	)
	submit := func(count int) {
		var wg sync.WaitGroup
		end := n.Load() + int64(count)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := n.Add(1); i <= end; i = n.Add(1) {
					var got struct{ ID string }
					status, raw := ta.Do(http.MethodPost, "/api/v1/forms/"+form.ID+"/submissions", map[string]any{"answers": map[string]string{"n": fmt.Sprint(i)}})
					mu.Lock()
					statuses[status]++
					if status == http.StatusAccepted {
						if err := jsonUnmarshal(raw, &got); err != nil {
							t.Errorf("202 body %s: %v", raw, err)
						}
						accepted = append(accepted, got.ID)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	rowsIn := func() int { rows, _ := fake.Sheets.Rows(book, "Responses"); return len(rows) }
	readyz := func() int {
		resp, err := http.Get(ta.URL + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	// A burst, Redis killed in its middle (nothing saved), more work
	// accepted while it is away, then Redis back, empty.
	done := make(chan struct{})
	go func() { defer close(done); submit(1500) }()
	testkit.Eventually(t, 30*time.Second, "rows in the sheet", func() bool { return rowsIn() >= 100 })
	rp.Stop()
	testkit.Eventually(t, 15*time.Second, "/readyz to say 503", func() bool { return readyz() == http.StatusServiceUnavailable })
	status, raw := ta.Do(http.MethodGet, "/api/v1/queues", nil)
	if status != http.StatusServiceUnavailable || !jsonHasCode(raw, "broker_unavailable") {
		t.Fatalf("GET /api/v1/queues while Redis is away: %d %s, want 503 broker_unavailable", status, raw)
	}
	testkit.Eventually(t, 5*time.Second, "the overview to show the outage", func() bool { return len(ta.Problems()) > 0 })
	<-done
	submit(200)
	if rowsIn() >= 1700 {
		t.Fatal("every row was written before the outage; the test proves nothing")
	}
	rp.Start()
	back := time.Now()
	testkit.Eventually(t, time.Minute, "every accepted row after Redis came back empty", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rowsIn() >= len(accepted)
	})
	t.Logf("Redis restart: %d accepted, all in the sheet %s after Redis came back", len(accepted), time.Since(back).Round(time.Millisecond))
	testkit.Eventually(t, 15*time.Second, "/readyz to say 200", func() bool { return readyz() == http.StatusOK })

	// Another burst, and FLUSHALL in its middle.
	done = make(chan struct{})
	go func() { defer close(done); submit(1500) }()
	testkit.Eventually(t, 30*time.Second, "rows of the second burst", func() bool { return rowsIn() >= 1800 })
	if err := ta.Broker().Client().FlushAll(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	<-done
	testkit.Eventually(t, time.Minute, "every accepted row after FLUSHALL", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return rowsIn() >= len(accepted)
	})
	t.Logf("FLUSHALL: %d accepted, all in the sheet %s after the flush", len(accepted), time.Since(flushed).Round(time.Millisecond))

	mu.Lock()
	defer mu.Unlock()
	for status, count := range statuses {
		if status != http.StatusAccepted && status != http.StatusServiceUnavailable {
			t.Fatalf("%d submissions answered %d; want only 202 or 503 (%v)", count, status, statuses)
		}
	}
	rows, err := fake.Sheets.Rows(book, "Responses")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	prev := ""
	for i, r := range rows {
		id := r[len(r)-1]
		if seen[id] {
			t.Fatalf("row %d: submission %s written twice", i+1, id)
		}
		if id < prev {
			t.Fatalf("row %d: submission %s after %s: out of order", i+1, id, prev)
		}
		seen[id], prev = true, id
	}
	for _, id := range accepted {
		if !seen[id] {
			t.Fatalf("accepted submission %s is not in the sheet", id)
		}
	}
	if len(rows) != len(accepted) {
		t.Fatalf("%d rows for %d accepted submissions", len(rows), len(accepted))
	}
	// The bookkeeping of the last write commits a moment after it lands.
	testkit.Eventually(t, 10*time.Second, "the form to count every row", func() bool {
		f := getForm(ta, form.ID)
		return f.RowsWritten == len(rows) && f.Buffered == 0
	})
	t.Logf("statuses %v; %d rows, each accepted submission once and in order; %d tasks handed again", statuses, len(rows), ta.Queue().Rehanded())
}

func jsonUnmarshal(raw []byte, v any) error { return json.Unmarshal(raw, v) }

// jsonHasCode reports whether raw is the contract's error with that code.
func jsonHasCode(raw []byte, code string) bool {
	var e apiErrorBody
	return json.Unmarshal(raw, &e) == nil && e.Error.Code == code
}
