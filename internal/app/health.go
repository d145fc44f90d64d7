package app

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/queue/google"
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
	if a.fleet != nil && !a.fleetUp() {
		out = append(out, web.Problem{
			Title: "The fleet's Redis does not answer.",
			Text: fmt.Sprintf("MAILROOM_FLEET_REDIS_URL does not answer: this mailroom spends 1/%d of the project's Gmail units and of its Sheets reads and writes from its own broker (the mailrooms it last saw: %s) until the fleet's Redis is back.",
				a.fleet.Share(), strings.Join(a.fleet.Seen(), ", ")),
		})
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

// fleetStatus is the fleet on the overview page: the project's units spent
// by every mailroom in the last minute, this one's, and the others seen.
func (a *App) fleetStatus(ctx context.Context) (*web.FleetStatus, error) {
	f := &web.FleetStatus{Instance: a.fleet.Name(), Seen: a.fleet.Seen(), Up: a.fleet.Up()}
	if a.accounts == nil || a.accounts.Google().Budget() == nil {
		return f, nil
	}
	b := a.accounts.Google().Budget()
	// The project's window is the same for every account: ask it for none.
	u, err := b.Usage(ctx, "")
	if err != nil {
		if f.Up {
			return nil, err
		}
		u = google.Usage{} // the fleet's Redis is down: its count is not known
	}
	f.ProjectUnits, f.ProjectLimit, f.MineUnits = u.ProjectUsed, b.Config().ProjectUnits, b.MineLastWindow()
	f.Up = a.fleetUp()
	return f, nil
}

// fleetUp reports whether the fleet's Redis answers: its last beat did,
// and neither the Gmail budget nor the Sheets quotas have fallen back to
// this mailroom's share.
func (a *App) fleetUp() bool {
	if !a.fleet.Up() {
		return false
	}
	if a.accounts != nil && a.accounts.Google().Budget() != nil && a.accounts.Google().Budget().FleetDown() {
		return false
	}
	return a.sheets == nil || !a.sheets.FleetDown()
}

// registerFleetMetrics exposes the fleet: the mailrooms seen, whether its
// Redis answers, and this mailroom's Gmail units in the last minute.
func (a *App) registerFleetMetrics() error {
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mailroom_fleet_mailrooms", Help: "Mailrooms of the fleet seen alive (this one among them); 1 without a fleet."},
			func() float64 {
				if a.fleet == nil {
					return 1
				}
				return float64(a.fleet.Share())
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mailroom_fleet_up", Help: "1 while the fleet's Redis answers (or there is no fleet), 0 while this mailroom spends its share from its own broker."},
			func() float64 {
				if a.fleet == nil || a.fleetUp() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "mailroom_gmail_quota_units_mine_last_minute", Help: "Gmail units this mailroom was granted in the last quota window (its share of the project's)."},
			func() float64 {
				if a.accounts == nil || a.accounts.Google().Budget() == nil {
					return 0
				}
				return float64(a.accounts.Google().Budget().MineLastWindow())
			}),
	}
	for _, c := range cs {
		if err := a.registry.Register(c); err != nil {
			return fmt.Errorf("register fleet metrics: %w", err)
		}
	}
	return nil
}
