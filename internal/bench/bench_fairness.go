package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/googlefake"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

// fairnessSize is the gmail-fairness scenario's size: accounts, messages
// in each mailbox, live messages per account during the first half
// window, Gmail's (compressed) minute, and the project budget per window.
type fairnessSize struct {
	accounts, messages, live int
	window                   time.Duration
	project                  int
}

// gmailFleet is the emulator with one mailbox per account and the app
// built by app.New against it, for the scenarios of many accounts.
type gmailFleet struct {
	size    fairnessSize
	fake    *googlefake.Server
	db      *store.DB
	q       *queue.Queue
	p       *gmail.Pipeline
	stop    func()
	emails  []string
	refresh []string
	ids     []string // account ids, in connect order
	addr    string   // the app's HTTP listener (its /metrics)
	floor   gmailFloor
	app     *app.App
	diff    []string // the app's settings that differ from serve's defaults
}

// fleetOptions: the broker (empty: embedded) and whether Gmail's quota is
// off, emulator and budget alike.
type fleetOptions struct {
	redisURL string
	quotaOff bool
	// allowPrivate sets MAILROOM_WEBHOOK_ALLOW_PRIVATE (a receiver on
	// loopback).
	allowPrivate bool
}

func (f *gmailFleet) close() {
	if f.stop != nil {
		f.stop()
	}
	if f.fake != nil {
		f.fake.Close()
	}
}

// newGmailFleet seeds the mailboxes and starts the app; no account is
// connected yet. With the quota on, the emulator is at Google's documented
// limits (6,000 units per user and 1,200,000 per project per window) and
// the budget at serve's, both with sz.window as the minute and the
// budget's project limit at sz.project (zero: serve's default).
func newGmailFleet(ctx context.Context, fo fleetOptions, sz fairnessSize) (_ *gmailFleet, err error) {
	f := &gmailFleet{size: sz}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	// The emulator's project limit is the budget's: a project whose quota
	// is that low, so that Google's refusals could happen.
	opts := googlefake.Options{GmailQuotaWindow: sz.window, GmailProjectUnitsPerMinute: sz.project}
	if fo.quotaOff {
		opts.GmailUserUnitsPerMinute, opts.GmailProjectUnitsPerMinute = -1, -1
	}
	f.fake = googlefake.New(opts)
	if _, err := f.fake.Start(); err != nil {
		return nil, err
	}
	for i := range sz.accounts {
		email := fmt.Sprintf("user%02d@example.com", i)
		f.emails = append(f.emails, email)
		f.refresh = append(f.refresh, f.fake.AddAccount(email))
		if _, err := f.fake.Gmail.Generate(email, sz.messages, uint64(i+1)); err != nil {
			return nil, err
		}
		fl := gmailWork{threads: threadSizes(viewOf(f.fake, email)), newMail: sz.live}.floor(benchPrices())
		f.floor.units += fl.units
		for m, u := range fl.byMethod {
			if f.floor.byMethod == nil {
				f.floor.byMethod = map[string]int{}
			}
			f.floor.byMethod[m] += u
		}
	}
	a, stop, err := startApp(ctx, func(c *setup) {
		c.RedisURL = fo.redisURL
		c.GoogleAPIURL, c.GoogleTokenURL = f.fake.URL(), f.fake.TokenURL()
		c.PushToken, c.GmailPollInterval, c.ShutdownTimeout = benchPushToken, time.Hour, 2*time.Second
		if sz.window > 0 {
			c.GmailQuotaWindow = sz.window
		}
		if sz.project > 0 {
			c.GmailProjectUnits = sz.project
		}
		c.deps.GmailQuotaOff = fo.quotaOff
		c.WebhookAllowPrivate = fo.allowPrivate
		f.diff = settingsDiff(c)
	})
	if err != nil {
		return nil, err
	}
	f.stop, f.db, f.q, f.p, f.addr, f.app = stop, a.DB(), a.Queue(), a.Gmail(), a.Addr(), a
	return f, nil
}

// connect connects every account (one user each), which records their
// full syncs.
func (f *gmailFleet) connect(ctx context.Context) error {
	for i, email := range f.emails {
		var user store.User
		err := f.db.Update(func(tx *store.Tx) (err error) {
			user, err = tx.UserCreate(fmt.Sprintf("owner%02d@example.com", i), "")
			return err
		})
		if err != nil {
			return err
		}
		acc, _, err := f.p.Connect(ctx, gmail.ConnectRequest{UserID: user.ID, Email: email, Token: google.Token{RefreshToken: f.refresh[i]}})
		if err != nil {
			return fmt.Errorf("connect %s: %w", email, err)
		}
		f.ids = append(f.ids, acc.ID)
	}
	return nil
}

// liveMail delivers size.live new messages to every account at random
// moments of the first half window, each followed by its push, and
// returns when the last is pushed.
func (f *gmailFleet) liveMail(ctx context.Context, start time.Time) error {
	type arrival struct {
		at time.Duration
		i  int
	}
	rng := rand.New(rand.NewPCG(11, 12))
	var plan []arrival
	for i := range f.emails {
		for range f.size.live {
			plan = append(plan, arrival{time.Duration(rng.Int64N(int64(f.size.window / 2))), i})
		}
	}
	slices.SortFunc(plan, func(a, b arrival) int { return int(a.at - b.at) })
	gen := googlefake.NewGenerator(13, time.Time{})
	for _, a := range plan {
		if err := sleepUntil(ctx, start.Add(a.at)); err != nil {
			return err
		}
		email := f.emails[a.i]
		if _, err := gen.Add(f.fake.Gmail, email, 1); err != nil {
			return err
		}
		body := f.fake.PushEnvelope(email, f.fake.Gmail.HistoryID(email))
		if err := f.p.Push(ctx, gmail.PushRequest{Token: benchPushToken, Body: body}); err != nil {
			return err
		}
	}
	return nil
}

func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// converged reports whether account i's mirror is its mailbox: its full
// sync done, its watermark at the mailbox's history id, and as many
// messages stored as the mailbox lists.
func (f *gmailFleet) converged(i int) (bool, error) {
	var acc store.Account
	var counts store.MessageCounts
	err := f.db.View(func(tx *store.Tx) (err error) {
		if acc, err = tx.AccountGet(f.ids[i]); err != nil {
			return err
		}
		counts, err = tx.MessageCounts(f.ids[i])
		return err
	})
	if err != nil || acc.Status != store.AccountReady || acc.FullSyncCompleted == 0 ||
		acc.HistoryID < f.fake.Gmail.HistoryID(f.emails[i]) {
		return false, err
	}
	return counts.Total == len(f.fake.Gmail.Messages(f.emails[i])), nil
}

// watch polls every account until each has converged and the live mail is
// all delivered (done closed), or until timeout, and returns each
// account's time to converge from start (the last time it became
// converged) and whether it had converged at the end.
func (f *gmailFleet) watch(ctx context.Context, start time.Time, done <-chan struct{}, timeout time.Duration) ([]time.Duration, []bool, error) {
	at := make([]time.Duration, len(f.ids))
	ok := make([]bool, len(f.ids))
	liveDone := false
	for {
		all := true
		for i := range f.ids {
			c, err := f.converged(i)
			if err != nil {
				return nil, nil, err
			}
			if c && !ok[i] {
				at[i] = time.Since(start)
			}
			ok[i] = c
			all = all && c
		}
		select {
		case <-done:
			liveDone = true
		default:
		}
		if (all && liveDone) || time.Since(start) > timeout {
			return at, ok, nil
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return nil, nil, err
		}
	}
}

// benchGmailFairness: many accounts do their first full sync at once,
// with some live mail, under a project budget that binds; every account
// should converge, none much later than another, and no window of the
// project spend more than the budget.
func benchGmailFairness(ctx context.Context, o Options) (Result, error) {
	var r Result
	sz := fairnessSize{accounts: 50, messages: 150, live: 2, window: 30 * time.Second, project: 12_500}
	if o.Quick {
		sz = fairnessSize{accounts: 8, messages: 30, live: 1, window: 6 * time.Second, project: 500}
	}
	o.progress("   %d accounts of %d messages, project budget %d units per %s", sz.accounts, sz.messages, sz.project, sz.window)
	f, err := newGmailFleet(ctx, fleetOptions{redisURL: o.RedisURL}, sz)
	if err != nil {
		return r, err
	}
	defer f.close()
	f.fake.ResetCounters()
	start := time.Now()
	if err := f.connect(ctx); err != nil {
		return r, err
	}
	done := make(chan struct{})
	liveErr := make(chan error, 1)
	go func() { liveErr <- f.liveMail(ctx, start); close(done) }()
	times, ok, err := f.watch(ctx, start, done, f.timeout())
	if err != nil {
		return r, err
	}
	if err := <-liveErr; err != nil {
		return r, fmt.Errorf("live mail: %w", err)
	}
	f.report(&r, times, ok, time.Since(start))
	return r, nil
}

// leastUnits is Google's floor of the work (bench/floor.go): for each
// account labels.list, getProfile, a messages.list page per 500 messages,
// a threads.get per thread of two messages or more and a messages.get per
// single one, and a messages.get per live message.
func (f *gmailFleet) leastUnits() int { return f.floor.units }

// leastTime is the least time the project budget allows for leastUnits:
// the first window's budget may be spent at once, then one budget a window.
func (f *gmailFleet) leastTime() time.Duration {
	return f.floor.least(f.size.project, f.size.window)
}

// timeout is how long the scenario waits for every account: four times
// the least time, and two minutes.
func (f *gmailFleet) timeout() time.Duration { return 4*f.leastTime() + 2*time.Minute }

// report adds the scenario's figures and notes.
// An account that never converged counts as converging at the end.
func (f *gmailFleet) report(r *Result, times []time.Duration, ok []bool, elapsed time.Duration) {
	sz := f.size
	converged := 0
	secs := make([]string, len(times))
	for i, t := range times {
		secs[i] = "never"
		if ok[i] {
			converged++
			secs[i] = fmt.Sprintf("%.1f", t.Seconds())
		} else {
			times[i] = elapsed
		}
	}
	sorted := slices.Clone(times)
	slices.Sort(sorted)
	fastest, slowest := sorted[0], sorted[len(sorted)-1]
	units, peak := f.fake.Gmail.TotalQuotaUnits(), f.fake.Gmail.PeakProjectUnits()
	calls := viewOf(f.fake, f.emails[0]).gmailCalls()
	floor := f.leastTime()
	r.addTarget("accounts converged", float64(converged), "accounts", float64(sz.accounts), true)
	r.addTarget("slowest ÷ fastest account's time to converge", slowest.Seconds()/fastest.Seconds(), "ratio", 1.5, false)
	r.add("fastest account's time to converge", fastest.Seconds(), "s")
	r.add("median account's time to converge", sorted[len(sorted)/2].Seconds(), "s")
	r.add("slowest account's time to converge", slowest.Seconds(), "s")
	r.addTarget("most project units in any window (emulator's count)", float64(peak), "units", float64(sz.project), false)
	r.add("project units spent (emulator's count)", float64(units), "units")
	r.add("Google's floor of units (the least Google's table and call limits allow)", float64(f.leastUnits()), "units")
	r.add("project units spent ÷ Google's floor", float64(units)/float64(f.leastUnits()), "ratio")
	r.add("Google's floor of time (the floor's units at the project's budget, a window's worth at once each time the last has left it)", floor.Seconds(), "s")
	r.add("time until the last account converged ÷ Google's floor of time", slowest.Seconds()/floor.Seconds(), "ratio")
	r.add("Google quota refusals (the emulator's project limit is the budget's, so they could happen)", float64(f.fake.Gmail.TotalQuotaRefusals()), "calls")
	r.add("Gmail calls", float64(calls), "calls")
	r.Notes = append(r.Notes,
		fmt.Sprintf("%d accounts (one user each) connected at once, each with %d messages to sync and %d new messages (each with its push) at random moments of the first half window; an account has converged when its full sync is done, its watermark is its mailbox's history id and it stores as many messages as the mailbox lists (the time is the last time it became so, from the first connect; the scenario waits at most %s, four times the least time and two minutes, and an account not converged by then counts as converging at the end, \"never\" below); Google's floor of the work is %s (bench/floor.go: per account labels.list, getProfile, a messages.list page per 500 messages, a threads.get per thread of two messages or more, a messages.get per single one and per live message); %d calls in all over %s", sz.accounts, sz.messages, sz.live, f.timeout().Round(time.Second), f.floor, calls, elapsed.Round(time.Millisecond)),
		fmt.Sprintf("Gmail's minute compressed to %s, for the emulator and the budget alike (MAILROOM_GMAIL_QUOTA_WINDOW=%s); budget MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE=%d per that window, below what the %d accounts would spend (so it binds); the user budget at serve's 6,000; the emulator at Google's documented 6,000 per user per window and at the budget's project limit (a project with that quota, so Google's refusals could happen), counting the units exactly over a sliding window; settings not compressed: the budget's 20 s longest in-task wait (a full sync waits in its task up to 2 min a call for the project's window), the 5 s delayed-task check, the 100 ms task poll", sz.window, sz.window, sz.project, sz.accounts),
		"the app built by app.New with serve's defaults (4 gmail-full-sync and 4 gmail-sync workers, 8 fetches in parallel per full sync, full syncs in runs of 25 messages from list pages of 500 that take turns, work below live paced at most a tenth of the window ahead of the account's rate and a hundredth ahead of the project's) except: Google URLs at the emulator, MAILROOM_PUSH_TOKEN, MAILROOM_GMAIL_POLL_INTERVAL=1h, MAILROOM_SHUTDOWN_TIMEOUT=2s and the two quota settings above",
		"times to converge (s), in connect order: "+strings.Join(secs, " "),
		fmt.Sprintf("Gmail units by method, all accounts (emulator's count): %v; calls by method: %v", f.unitsByMethod(), f.fake.CallCounts()))
}

// unitsByMethod sums the emulator's units by method over every account.
func (f *gmailFleet) unitsByMethod() map[string]int {
	sum := map[string]int{}
	for _, email := range f.emails {
		for m, u := range f.fake.Gmail.QuotaUnitsByMethod(email) {
			sum[m] += u
		}
	}
	return sum
}

// push hands the pipeline a push of account i's current history id.
func (f *gmailFleet) push(ctx context.Context, i int) error {
	body := f.fake.PushEnvelope(f.emails[i], f.fake.Gmail.HistoryID(f.emails[i]))
	return f.p.Push(ctx, gmail.PushRequest{Token: benchPushToken, Body: body})
}

// waitIdle waits until no Gmail task is left in the outbox and every
// account has converged (checked in that order: the outbox is the cheap
// look while work runs).
func (f *gmailFleet) waitIdle(ctx context.Context, d time.Duration) error {
	return waitFor(ctx, d, "every account and event", func() (bool, error) {
		left, err := gmailWorkWaiting(f.db, f.q)
		if err != nil || left {
			return false, err
		}
		for i := range f.ids {
			if ok, err := f.converged(i); err != nil || !ok {
				return false, err
			}
		}
		return true, nil
	})
}
