package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/googlefake"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// fleetSize is the fleet scenario's size: mailrooms, accounts each,
// messages in each mailbox, Gmail's (compressed) minute and the project's
// units a window.
type fleetSize struct {
	mailrooms, accounts, messages int
	window                        time.Duration
	project                       int
}

// fleetMember is one mailroom of the fleet scenario: the app built by
// app.New on its own data dir and embedded broker, and its accounts.
type fleetMember struct {
	name    string
	app     *app.App
	stop    func()
	emails  []string
	refresh []string
	ids     []string
}

// benchFleet: several mailrooms, each with its own embedded broker and
// accounts, share one Google project through one Redis
// (MAILROOM_FLEET_REDIS_URL) while the project's Gmail units bind: their
// full syncs against Google's floor for the whole project, in units and
// in time, and the fairness between mailrooms.
func benchFleet(ctx context.Context, o Options) (Result, error) {
	var r Result
	sz := fleetSize{mailrooms: 3, accounts: 10, messages: 150, window: 6 * time.Second, project: 6000}
	if o.Quick {
		sz = fleetSize{mailrooms: 3, accounts: 2, messages: 30, window: 3 * time.Second, project: 1000}
	}
	url, stopRedis := o.RedisURL, func() {}
	if url == "" {
		var err error
		if url, stopRedis, err = startBenchRedis(ctx); err != nil {
			// Like the other scenarios' redis-server rows: a note, not a
			// failed run of every scenario.
			r.Notes = append(r.Notes, "not measured: the fleet's Redis: "+err.Error())
			return r, nil
		}
	} else if err := flushRedis(ctx, url); err != nil {
		return r, err
	}
	defer stopRedis()
	o.progress("   %d mailrooms of %d accounts of %d messages, project budget %d units per %s", sz.mailrooms, sz.accounts, sz.messages, sz.project, sz.window)
	fake := googlefake.New(googlefake.Options{GmailQuotaWindow: sz.window, GmailProjectUnitsPerMinute: sz.project})
	if _, err := fake.Start(); err != nil {
		return r, err
	}
	defer fake.Close()
	var floor gmailFloor
	var diff []string
	members := make([]*fleetMember, sz.mailrooms)
	defer func() {
		for _, m := range members {
			if m != nil {
				m.stop()
			}
		}
	}()
	for i := range members {
		m := &fleetMember{name: fmt.Sprintf("mail-%c", 'a'+i)}
		for j := range sz.accounts {
			email := fmt.Sprintf("%s-%02d@example.com", m.name, j)
			m.refresh = append(m.refresh, fake.AddAccount(email))
			if _, err := fake.Gmail.Generate(email, sz.messages, uint64(100*i+j+1)); err != nil {
				return r, err
			}
			floor.add(gmailWork{threads: threadSizes(viewOf(fake, email))}.floor(benchPrices()))
			m.emails = append(m.emails, email)
		}
		a, stop, err := startApp(ctx, func(c *setup) {
			c.Instance, c.FleetRedisURL = m.name, url
			c.GoogleAPIURL, c.GoogleTokenURL = fake.URL(), fake.TokenURL()
			c.PushToken, c.GmailPollInterval, c.ShutdownTimeout = benchPushToken, time.Hour, 2*time.Second
			c.GmailQuotaWindow, c.GmailProjectUnits = sz.window, sz.project
			diff = fleetDiff(settingsDiff(c))
		})
		if err != nil {
			return r, fmt.Errorf("%s: %w", m.name, err)
		}
		m.app, m.stop = a, stop
		members[i] = m
	}
	fake.ResetCounters()
	start := time.Now()
	// Connect every account at once, a mailroom's accounts in turn with
	// the others'.
	for j := range sz.accounts {
		for _, m := range members {
			if err := m.connect(ctx, j); err != nil {
				return r, err
			}
		}
	}
	ended := make([]time.Duration, len(members))
	timeout := 4*floor.least(sz.project, sz.window) + 2*time.Minute
	err := waitFor(ctx, timeout, "every full sync", func() (bool, error) {
		all := true
		for i, m := range members {
			if ended[i] > 0 {
				continue
			}
			done, err := m.synced(fake)
			if err != nil {
				return false, err
			}
			if done {
				ended[i] = time.Since(start)
			}
			all = all && done
		}
		return all, nil
	})
	if err != nil {
		return r, err
	}
	fleetReport(&r, fake, sz, floor, ended, diff)
	return r, nil
}

// connect connects the mailroom's account j (a user of its own).
func (m *fleetMember) connect(ctx context.Context, j int) error {
	var user store.User
	err := m.app.DB().Update(func(tx *store.Tx) (err error) {
		user, err = tx.UserCreate(fmt.Sprintf("owner%02d@%s.example.com", j, m.name), "")
		return err
	})
	if err != nil {
		return err
	}
	acc, _, err := m.app.Gmail().Connect(ctx, gmail.ConnectRequest{UserID: user.ID, Email: m.emails[j], Token: google.Token{RefreshToken: m.refresh[j]}})
	if err != nil {
		return fmt.Errorf("%s: connect %s: %w", m.name, m.emails[j], err)
	}
	m.ids = append(m.ids, acc.ID)
	return nil
}

// synced reports whether every account of the mailroom has its full sync
// done and stores its whole mailbox.
func (m *fleetMember) synced(fake *googlefake.Server) (bool, error) {
	for i, id := range m.ids {
		var acc store.Account
		var counts store.MessageCounts
		err := m.app.DB().View(func(tx *store.Tx) (err error) {
			if acc, err = tx.AccountGet(id); err != nil {
				return err
			}
			counts, err = tx.MessageCounts(id)
			return err
		})
		if err != nil {
			return false, err
		}
		if acc.Status != store.AccountReady || acc.FullSyncCompleted == 0 || counts.Total != fake.Gmail.MessageCount(m.emails[i]) {
			return false, nil
		}
	}
	return true, nil
}

// fleetDiff names the fleet's own settings for every mailroom at once.
func fleetDiff(diff []string) []string {
	for i, d := range diff {
		switch {
		case strings.HasPrefix(d, "Instance="):
			diff[i] = "Instance=mail-a, mail-b or mail-c"
		case strings.HasPrefix(d, "FleetRedisURL="):
			diff[i] = "FleetRedisURL=(the redis-server)"
		}
	}
	return diff
}

// add adds the floor of more work to f.
func (f *gmailFloor) add(more gmailFloor) {
	if f.byMethod == nil {
		f.byMethod = map[string]int{}
	}
	f.units += more.units
	for m, u := range more.byMethod {
		f.byMethod[m] += u
	}
}

// fleetReport adds the fleet scenario's figures and notes.
func fleetReport(r *Result, fake *googlefake.Server, sz fleetSize, floor gmailFloor, ended []time.Duration, diff []string) {
	sorted := slices.Clone(ended)
	slices.Sort(sorted)
	fastest, slowest := sorted[0], sorted[len(sorted)-1]
	units, least := fake.Gmail.TotalQuotaUnits(), floor.least(sz.project, sz.window)
	secs := make([]string, len(ended))
	for i, e := range ended {
		secs[i] = fmt.Sprintf("mail-%c %.1f", 'a'+i, e.Seconds())
	}
	r.addTarget("slowest ÷ fastest mailroom's time to sync all its accounts", slowest.Seconds()/fastest.Seconds(), "ratio", 1.3, false)
	r.add("fastest mailroom's time", fastest.Seconds(), "s")
	r.add("slowest mailroom's time", slowest.Seconds(), "s")
	r.addTarget("Google quota refusals (the emulator's project limit is the mailrooms', so they could happen)", float64(fake.Gmail.TotalQuotaRefusals()), "calls", 0, false)
	r.addTarget("most project units in any window (emulator's count)", float64(fake.Gmail.PeakProjectUnits()), "units", float64(sz.project), false)
	r.add("project units spent by the fleet (emulator's count)", float64(units), "units")
	r.add("Google's floor of units for the whole project", float64(floor.units), "units")
	r.add("project units spent ÷ Google's floor", float64(units)/float64(floor.units), "ratio")
	r.add("Google's floor of time (the floor's units at the project's limit, a window's worth at once each time the last has left it)", least.Seconds(), "s")
	r.add("time until the last mailroom was done ÷ Google's floor of time", slowest.Seconds()/least.Seconds(), "ratio")
	r.Notes = append(r.Notes,
		fmt.Sprintf("%d mailrooms built by app.New in this process, each with its own data dir, embedded broker and MAILROOM_INSTANCE, and one redis-server as MAILROOM_FLEET_REDIS_URL; %d accounts each (%d in all, one user each) of %d messages, connected at once in turn; a mailroom's time is when every account of its own had its full sync done and stored its whole mailbox, from the first connect: %s", sz.mailrooms, sz.accounts, sz.mailrooms*sz.accounts, sz.messages, strings.Join(secs, ", ")),
		fmt.Sprintf("Gmail's minute compressed to %s for the emulator and the mailrooms alike (MAILROOM_GMAIL_QUOTA_WINDOW=%s); the project's limit %d units a window in the emulator and in every mailroom (MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE), far below what the three would spend alone; the emulator at Google's 6,000 per user per window; Google's floor is %s (bench/floor.go, per account labels.list, getProfile, a messages.list page per 500 messages, a threads.get per thread of two messages or more and a messages.get per single one)", sz.window, sz.window, sz.project, floor),
		"settings that differ from serve's defaults: "+strings.Join(diff, ", "))
}
