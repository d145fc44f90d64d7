package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"mailroom/internal/app"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

// eventsBenchOverrides names the settings the events scenario overrides.
const eventsBenchOverrides = "the app built by app.New with serve's defaults except: a fresh temporary MAILROOM_DATA_DIR, MAILROOM_HTTP_ADDR=127.0.0.1:0, MAILROOM_LOG_LEVEL=error and MAILROOM_WEBHOOK_ALLOW_PRIVATE=true (the receiver listens on loopback)"

// benchEvents measures the event log to a webhook: events appended at
// 1,000 a second (in transactions of 10 every 10 ms, as a busy pipeline
// commits them) to one webhook's receiver, on both brokers: events a
// second from the first append to the last 2xx, and each event's latency
// from its append to the 2xx of the POST that carried it.
func benchEvents(ctx context.Context, o Options) (Result, error) {
	var r Result
	rate, dur := 1000, 10*time.Second
	if o.Quick {
		dur = 2 * time.Second
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%d events a second for %s, appended straight to the event log in transactions of 10 every 10 ms (the pipelines' own recording is measured by gmail-throughput), one webhook taking every type, an in-process receiver answering 204 at once; latency: the event's occurredAt to the receiver's 2xx; %s; %s", rate, dur, o.GC, eventsBenchOverrides))
	targets, stop := benchTargets(ctx, o, &r)
	defer stop()
	for _, tg := range targets {
		o.progress("   %s: %d events a second for %s", tg.name, rate, dur)
		run, err := eventsRun(ctx, tg.url, rate, dur)
		if err != nil {
			return r, fmt.Errorf("%s: %w", tg.name, err)
		}
		broker := "redis-server"
		if tg.name == "embedded" {
			broker = "embedded broker"
		}
		r.add("events/s appended to delivered, "+broker, float64(run.events)/run.elapsed.Seconds(), "events/s")
		r.add("p50 event to its delivery, "+broker, ms(percentile(run.lat, 0.5)), "ms")
		r.addTarget("p99 event to its delivery, "+broker, ms(percentile(run.lat, 0.99)), "ms", 1000, false)
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %d events in %d POSTs (%.1f a POST) in %s", tg.name, run.events, run.posts, float64(run.events)/float64(run.posts), run.elapsed.Round(time.Millisecond)))
	}
	return r, nil
}

type eventsRunResult struct {
	events, posts int
	elapsed       time.Duration
	lat           []time.Duration
}

// eventsReceiver takes deliveries and keeps each event's latency.
type eventsReceiver struct {
	mu    sync.Mutex
	lat   []time.Duration
	posts int
}

func (e *eventsReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var b struct {
		Events []struct {
			OccurredAt time.Time `json:"occurredAt"`
		} `json:"events"`
	}
	raw, _ := io.ReadAll(req.Body)
	now := time.Now()
	if err := json.Unmarshal(raw, &b); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	e.mu.Lock()
	e.posts++
	for _, ev := range b.Events {
		e.lat = append(e.lat, now.Sub(ev.OccurredAt))
	}
	e.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (e *eventsReceiver) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.lat)
}

func eventsRun(ctx context.Context, redisURL string, rate int, dur time.Duration) (eventsRunResult, error) {
	var res eventsRunResult
	if redisURL != "" {
		if err := flushRedis(ctx, redisURL); err != nil {
			return res, err
		}
	}
	recv := &eventsReceiver{}
	srv := httptest.NewServer(recv)
	defer srv.Close()
	a, stop, err := startApp(ctx, func(c *app.Config) {
		c.RedisURL = redisURL
		c.WebhookAllowPrivate = true
	})
	if err != nil {
		return res, err
	}
	defer stop()
	if _, _, err := a.Webhooks().Create(ctx, webhooks.CreateRequest{URL: srv.URL + "/hook"}); err != nil {
		return res, err
	}
	db := a.DB()
	perTx, every := rate/100, 10*time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	start := time.Now()
	for time.Since(start) < dur {
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-tick.C:
		}
		err := db.Update(func(tx *store.Tx) error {
			for range perTx {
				if _, err := tx.EventAppend(store.Event{Type: store.EventFormState, UserID: "bench", Data: json.RawMessage(`{"state":"ok","lastError":""}`)}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return res, err
		}
		res.events += perTx
	}
	deadline := time.Now().Add(time.Minute)
	for recv.count() < res.events {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("%d of %d events delivered after a minute", recv.count(), res.events)
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	recv.mu.Lock()
	defer recv.mu.Unlock()
	res.lat, res.posts = recv.lat, recv.posts
	return res, nil
}
