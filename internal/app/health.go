package app

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/web"
)

// Problems is what keeps the appliance from working now, for the overview.
func (a *App) Problems() []web.Problem {
	var out []web.Problem
	if since, err := a.db.WriteHealth(); err != nil {
		out = append(out, web.Problem{
			Title: "mailroom cannot write to its data file.",
			Text: fmt.Sprintf("Since %s: %v. Requests that must store something answer 503 store_unavailable; free space on the disk of %s and it recovers by itself.",
				since.UTC().Format(time.RFC3339), err, a.cfg.DataDir),
		})
	}
	if a.watch != nil {
		if h := a.watch.Health(); !h.Up {
			out = append(out, web.Problem{
				Title: "The task broker (Redis) does not answer.",
				Text: fmt.Sprintf("Since %s: %s. The API keeps accepting work into the outbox; it is handed to the broker, and tasks the broker lost are handed again, when it returns.",
					h.DownSince.UTC().Format(time.RFC3339), h.Error),
			})
		} else if h.Losses > 0 && time.Since(h.ForgotAt) < 10*time.Minute {
			out = append(out, web.Problem{
				Title: "The task broker forgot what it held.",
				Text: fmt.Sprintf("At %s (%d time(s) since mailroom started); every task it lost was handed again from the outbox. Use Redis with persistence and maxmemory-policy noeviction.",
					h.ForgotAt.UTC().Format(time.RFC3339), h.Losses),
			})
		}
	}
	if a.gmail != nil && a.gmail.WatchEnabled() {
		if stopped, n, err := a.gmail.PushHealth(); err == nil && stopped > 0 {
			out = append(out, web.Problem{
				Title: "Gmail pushes look stopped.",
				Text: fmt.Sprintf("For %d of %d accounts a poll found changes that no push announced: live mail arrives only by polling, every %s. Check the Pub/Sub push subscription (its expiration policy must be \"never expire\"), the topic's publisher grant to gmail-api-push@system.gserviceaccount.com, and that the push endpoint and audience match %s/push/gmail.",
					stopped, n, a.gmail.FastPollInterval(), a.cfg.BaseURL()),
			})
		}
	}
	return out
}

// registerStoreMetrics exposes the data file's size and its free space
// (reused by later writes; `mailroom compact` gives it back).
func (a *App) registerStoreMetrics() error {
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mailroom_store_file_bytes", Help: "Size of the bbolt data file."},
			func() float64 { return float64(a.db.FileStats().Size) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mailroom_store_free_bytes", Help: "Bytes of the data file in free pages (mailroom compact gives them back)."},
			func() float64 { return float64(a.db.FileStats().Free) }),
	} {
		if err := a.registry.Register(c); err != nil {
			return fmt.Errorf("register store metrics: %w", err)
		}
	}
	return nil
}
