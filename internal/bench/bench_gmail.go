package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

const (
	benchMailbox   = "bench@example.com"
	benchPushToken = "bench-push-token"
)

// gmailBench is the whole app built by app.New as serve builds it
// (defaults of the configuration) against the emulator, with pushes handed
// to the Gmail pipeline directly (no HTTP).
type gmailBench struct {
	fake    *googlefake.Server
	db      *store.DB
	q       *queue.Queue
	p       *gmail.Pipeline
	stop    func()
	addr    string // the app's HTTP listener (its /metrics)
	account string
	// hook receives the events when gmailBenchOptions.webhook is set.
	hook      *hookReceiver
	closeHook func()

	mu      sync.Mutex
	waiting map[string]time.Time // message id -> when its read was pushed
	lat     []time.Duration
}

type gmailBenchOptions struct {
	redisURL string
	// oneQueue puts every Gmail event type in one queue with the same
	// total workers (the isolation baseline).
	oneQueue bool
	// messages in the mailbox at the start, of which the first unread are
	// unread.
	messages, unread int
	// webhook registers one webhook for every event, to an in-process
	// receiver (MAILROOM_WEBHOOK_ALLOW_PRIVATE=true: it listens on loopback).
	webhook bool
}

// gmailEventTypes are the seven event types.
var gmailEventTypes = []string{
	gmail.TypeMessageAdded, gmail.TypeMessageRead, gmail.TypeMessageUnread,
	gmail.TypeMessageTrashed, gmail.TypeMessageRestored, gmail.TypeMessageDeleted,
	gmail.TypeMessageLabeled,
}

// gmailBenchOverrides names the settings the Gmail scenarios override.
const gmailBenchOverrides = "the app built by app.New with serve's defaults except: Google URLs at the emulator, MAILROOM_PUSH_TOKEN, MAILROOM_GMAIL_POLL_INTERVAL=1h, MAILROOM_SHUTDOWN_TIMEOUT=2s, Gmail's quota off, emulator and budget alike (Deps.GmailQuotaOff: the bench measures the pipeline, not Google's 6,000 units a minute per user); events counted from mailroom_gmail_events_total on /metrics, a read's time to applied read from the mirror in bbolt"

func newGmailBench(ctx context.Context, o gmailBenchOptions) (_ *gmailBench, err error) {
	g := &gmailBench{waiting: map[string]time.Time{}}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	// Gmail's quota is off in this scenario (emulator and budget): it
	// measures the pipeline, not Google's ceiling (its note says so).
	g.fake = googlefake.New(googlefake.Options{GmailUserUnitsPerMinute: -1, GmailProjectUnitsPerMinute: -1})
	if _, err := g.fake.Start(); err != nil {
		return nil, err
	}
	refresh := g.fake.AddAccount(benchMailbox)
	if _, err := g.fake.Gmail.Generate(benchMailbox, o.messages, 1); err != nil {
		return nil, err
	}
	for _, m := range g.fake.Gmail.Messages(benchMailbox)[:o.unread] {
		if err := g.fake.Gmail.MarkUnread(benchMailbox, m.ID); err != nil {
			return nil, err
		}
	}
	a, stop, err := startApp(ctx, func(c *setup) {
		c.RedisURL = o.redisURL
		c.GoogleAPIURL, c.GoogleTokenURL = g.fake.URL(), g.fake.TokenURL()
		c.PushToken, c.GmailPollInterval, c.ShutdownTimeout = benchPushToken, time.Hour, 2*time.Second
		c.deps.GmailQuotaOff = true
		c.WebhookAllowPrivate = o.webhook
		if o.oneQueue {
			workers := c.ConcurrencyMessageAdded + 6*c.ConcurrencyState
			c.deps.TaskLayout = func(rows []queue.TaskType) {
				for i := range rows {
					if slices.Contains(gmailEventTypes, rows[i].Name) {
						rows[i].Queue, rows[i].Concurrency = "gmail-events", workers
					}
				}
			}
		}
	})
	if err != nil {
		return nil, err
	}
	g.stop, g.db, g.q, g.p, g.addr = stop, a.DB(), a.Queue(), a.Gmail(), a.Addr()
	var user store.User
	if err := g.db.Update(func(tx *store.Tx) (err error) { user, err = tx.UserCreate("owner@example.com", "Owner"); return err }); err != nil {
		return nil, err
	}
	acc, _, err := g.p.Connect(ctx, gmail.ConnectRequest{UserID: user.ID, Email: benchMailbox, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		return nil, err
	}
	g.account = acc.ID
	if err := g.waitSynced(ctx, 2*time.Minute); err != nil {
		return g, err
	}
	if o.webhook {
		g.hook = newHookReceiver()
		srv := httptest.NewServer(g.hook)
		g.closeHook = srv.Close
		err := g.hook.register("all", func() (string, error) {
			_, secret, err := a.Webhooks().Create(ctx, webhooks.CreateRequest{URL: srv.URL + "/hook/all"})
			return secret, err
		})
		if err != nil {
			return g, err
		}
	}
	return g, nil
}

func (g *gmailBench) close() {
	if g.stop != nil {
		g.stop()
	}
	if g.closeHook != nil {
		g.closeHook()
	}
	if g.fake != nil {
		g.fake.Close()
	}
}

// watchReads records, every millisecond until ctx ends, the time from
// each waiting read's push to its message standing read in the mirror.
func (g *gmailBench) watchReads(ctx context.Context) {
	for sleepCtx(ctx, time.Millisecond) == nil {
		g.mu.Lock()
		ids := slices.Collect(maps.Keys(g.waiting))
		g.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		var read []string
		_ = g.db.View(func(tx *store.Tx) error {
			for _, id := range ids {
				m, err := tx.MessageGet(g.account, id)
				if err == nil && !slices.Contains(m.LabelIDs, googlefake.LabelUnread) {
					read = append(read, id)
				}
			}
			return nil
		})
		now := time.Now()
		g.mu.Lock()
		for _, id := range read {
			g.lat = append(g.lat, now.Sub(g.waiting[id]))
			delete(g.waiting, id)
		}
		g.mu.Unlock()
	}
}

// push hands the pipeline a push of the mailbox's current history id.
func (g *gmailBench) push(ctx context.Context) error {
	return g.p.Push(ctx, gmail.PushRequest{Token: benchPushToken, Body: g.fake.PushEnvelope(benchMailbox, g.fake.Gmail.HistoryID(benchMailbox))})
}

// waitSynced waits until the watermark is the mailbox's history id.
func (g *gmailBench) waitSynced(ctx context.Context, d time.Duration) error {
	want := g.fake.Gmail.HistoryID(benchMailbox)
	return waitFor(ctx, d, "the sync", func() (bool, error) {
		var acc store.Account
		err := g.db.View(func(tx *store.Tx) (err error) { acc, err = tx.AccountGet(g.account); return err })
		return acc.HistoryID >= want && acc.Status == store.AccountReady, err
	})
}

// waitIdle waits until the sync reached the mailbox and no Gmail task is
// left in the outbox.
func (g *gmailBench) waitIdle(ctx context.Context, d time.Duration) error {
	if err := g.waitSynced(ctx, d); err != nil {
		return err
	}
	return waitFor(ctx, d, "every event", func() (bool, error) {
		left, err := gmailWorkWaiting(g.db, g.q)
		return !left, err
	})
}

// gmailWorkWaiting reports whether a Gmail task (a sync, a full sync or an
// event) still waits in the outbox.
func gmailWorkWaiting(db *store.DB, q *queue.Queue) (left bool, err error) {
	err = db.View(func(tx *store.Tx) error {
		for _, typ := range append([]string{gmail.TypeSync, gmail.TypeFullSync}, gmailEventTypes...) {
			waiting, err := q.Waiting(tx, typ)
			if err != nil || waiting {
				left = waiting
				return err
			}
		}
		return nil
	})
	return left, err
}

// measureReads marks unread messages read one at a time, each followed by
// its push, gap apart, and returns the push-to-applied times of the reads.
func (g *gmailBench) measureReads(ctx context.Context, n int, gap time.Duration) ([]time.Duration, error) {
	var ids []string
	for _, m := range g.fake.Gmail.Messages(benchMailbox) {
		if m.Unread() && len(ids) < n {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) < n {
		return nil, fmt.Errorf("only %d unread messages for %d reads", len(ids), n)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go g.watchReads(wctx)
	for _, id := range ids {
		if err := g.fake.Gmail.MarkRead(benchMailbox, id); err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.waiting[id] = time.Now()
		g.mu.Unlock()
		if err := g.push(ctx); err != nil {
			return nil, err
		}
		time.Sleep(gap)
	}
	err := waitFor(ctx, 5*time.Minute, "the reads", func() (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.waiting) == 0, nil
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.lat), err
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// benchGmailIsolation measures read events' push-to-applied time with a
// backlog of slow message-added events, against no backlog, and against
// one queue for every Gmail event type with the same total workers.
func benchGmailIsolation(ctx context.Context, o Options) (Result, error) {
	var r Result
	backlog, reads, gap := 1000, 100, 50*time.Millisecond
	if o.Quick {
		backlog, reads = 200, 20
	}
	const fetch = 200 * time.Millisecond
	r.Notes = append(r.Notes, fmt.Sprintf("%d reads, one push each %s apart; backlog: %d message-added events whose messages.get takes %s (emulator latency); default workers (message-added 3, each state queue 5, baseline one queue of 33: the pipeline's rows laid out again through app.Deps.TaskLayout); task poll interval 100ms (default); %s", reads, gap, backlog, fetch, gmailBenchOverrides))

	run := func(name string, oneQueue bool, backlog int) ([]time.Duration, error) {
		o.progress("   %s", name)
		g, err := newGmailBench(ctx, gmailBenchOptions{redisURL: o.RedisURL, oneQueue: oneQueue, messages: 300, unread: reads})
		if err != nil {
			return nil, err
		}
		defer g.close()
		if _, err := g.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodMessagesGet, Latency: fetch}); err != nil {
			return nil, err
		}
		if backlog > 0 {
			if _, err := googlefake.NewGenerator(2, time.Time{}).Add(g.fake.Gmail, benchMailbox, backlog); err != nil {
				return nil, err
			}
			if err := g.push(ctx); err != nil {
				return nil, err
			}
			if err := g.waitSynced(ctx, time.Minute); err != nil {
				return nil, err
			}
		}
		return g.measureReads(ctx, reads, gap)
	}
	idle, err := run("idle: separate queues, no backlog", false, 0)
	if err != nil {
		return r, fmt.Errorf("idle: %w", err)
	}
	busy, err := run(fmt.Sprintf("separate queues, %d-event backlog", backlog), false, backlog)
	if err != nil {
		return r, fmt.Errorf("backlog: %w", err)
	}
	one, err := run(fmt.Sprintf("one queue, %d-event backlog", backlog), true, backlog)
	if err != nil {
		return r, fmt.Errorf("one queue: %w", err)
	}
	r.add("read p50, idle", ms(percentile(idle, .5)), "ms")
	r.add("read p99, idle", ms(percentile(idle, .99)), "ms")
	r.add("read p50, backlog, separate queues", ms(percentile(busy, .5)), "ms")
	r.add("read p99, backlog, separate queues", ms(percentile(busy, .99)), "ms")
	r.add("read p50, backlog, one queue", ms(percentile(one, .5)), "ms")
	r.add("read p99, backlog, one queue", ms(percentile(one, .99)), "ms")
	idle99 := float64(percentile(idle, .99))
	r.addTarget("read p99 backlog ÷ idle, separate queues", float64(percentile(busy, .99))/idle99, "ratio", 2, false)
	r.add("read p99 backlog ÷ idle, one queue", float64(percentile(one, .99))/idle99, "ratio")
	return r, nil
}

// mixHistory changes the mailbox until it has n more history records: 10%
// new messages, 1% deletes, the rest reads, unreads, trash moves and labels.
func mixHistory(g *googlefake.Gmail, email string, n int, seed uint64) error {
	start := g.HistoryID(email)
	gen := googlefake.NewGenerator(seed, time.Time{})
	rng := rand.New(rand.NewPCG(seed, seed+1))
	label, err := g.CreateLabel(email, fmt.Sprintf("Bench %d", seed))
	if err != nil {
		return err
	}
	msgs := g.Messages(email)
	for g.HistoryID(email)-start < uint64(n) {
		op := rng.IntN(100)
		if op < 10 {
			if _, err := gen.Add(g, email, 1); err != nil {
				return err
			}
			continue
		}
		i := rng.IntN(len(msgs))
		m, ok := g.Message(email, msgs[i].ID)
		if !ok {
			continue
		}
		switch {
		case op < 11 && len(msgs) > 100:
			err = g.Delete(email, m.ID)
			msgs = append(msgs[:i], msgs[i+1:]...)
		case op < 50 && m.Unread():
			err = g.MarkRead(email, m.ID)
		case op < 50:
			err = g.MarkUnread(email, m.ID)
		case op < 70 && m.Trashed():
			err = g.Untrash(email, m.ID)
		case op < 70:
			err = g.Trash(email, m.ID)
		case slices.Contains(m.LabelIDs, label):
			err = g.RemoveLabels(email, m.ID, label)
		default:
			err = g.AddLabels(email, m.ID, label, googlefake.LabelStarred)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// benchGmailThroughput measures a burst of history records of mixed kinds,
// with no emulator latency, from one push to every event applied, on the
// embedded broker and on redis-server.
func benchGmailThroughput(ctx context.Context, o Options) (Result, error) {
	var r Result
	records, mailbox := 10000, 2000
	if o.Quick {
		records, mailbox = 1000, 300
	}
	r.Notes = append(r.Notes, fmt.Sprintf("one-account rows (Gmail's quota off; their names are those of earlier runs): %d history records (10%% adds, 1%% deletes, reads, unreads, trash moves, labels) on a %d-message mailbox, one push; default workers; %s; %s. CPU-s per 1,000 records: this process's user and system time (/proc) from the push to the last event applied (the app, the embedded broker and the in-process emulator; not redis-server's), a figure a busy machine disturbs far less than records/s", records, mailbox, o.GC, gmailBenchOverrides))

	targets, stop := benchTargets(ctx, o, &r)
	defer stop()
	runs := make([]gmailThroughputCase, 0, len(targets)+1)
	for _, tg := range targets {
		runs = append(runs, gmailThroughputCase{target: tg})
	}
	// The same burst with one webhook taking every event: what events cost
	// the path they record (the events are written either way).
	runs = append(runs, gmailThroughputCase{target: targets[0], webhook: true})
	for _, run := range runs {
		if err := gmailThroughputOne(ctx, o, &r, run, records, mailbox); err != nil {
			return r, err
		}
	}
	return r, gmailThroughputFleet(ctx, o, &r, targets, records)
}

// gmailThroughputCase is one one-account run of gmail-throughput.
type gmailThroughputCase struct {
	target  benchTarget
	webhook bool
}

// gmailThroughputOne runs one burst of records on one account and adds its
// figures to r.
func gmailThroughputOne(ctx context.Context, o Options, r *Result, run gmailThroughputCase, records, mailbox int) error {
	tg := run.target
	name := tg.name
	if run.webhook {
		name += ", one webhook"
	}
	o.progress("   %s: %d history records", name, records)
	g, err := newGmailBench(ctx, gmailBenchOptions{redisURL: tg.url, messages: mailbox, unread: mailbox / 4, webhook: run.webhook})
	if err != nil {
		return fmt.Errorf("%s: %w", name, err) // newGmailBench closed what it opened
	}
	defer g.close()
	if err := mixHistory(g.fake.Gmail, benchMailbox, records, 7); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	events0, err := gmailEventsHandled(ctx, g.addr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cpu0, cpuErr := procCPUSeconds(os.Getpid())
	start := time.Now()
	if err := g.push(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := g.waitIdle(ctx, 5*time.Minute); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	elapsed := time.Since(start)
	cpu1, cpuErr1 := procCPUSeconds(os.Getpid())
	events, err := gmailEventsHandled(ctx, g.addr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	events -= events0
	broker := "redis-server"
	if tg.name == "embedded" {
		broker = "embedded broker"
	}
	switch {
	case run.webhook:
		r.add("history records/s push to applied, embedded broker, one webhook taking every event", float64(records)/elapsed.Seconds(), "records/s")
	case tg.name == "embedded":
		r.addTarget("history records/s push to applied, embedded broker", float64(records)/elapsed.Seconds(), "records/s", 1500, true)
	default:
		r.add("history records/s push to applied, redis-server", float64(records)/elapsed.Seconds(), "records/s")
	}
	if run.webhook {
		got, _, _ := g.hook.deliveries()
		delivered := len(got)
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %d records, %d event tasks applied in %s; the webhook had received %d events by then (the rest follow: delivery is not on the path it reports); this run also sets MAILROOM_WEBHOOK_ALLOW_PRIVATE=true (its in-process receiver listens on loopback) and registers one webhook taking every type", name, records, events, elapsed.Round(time.Millisecond), delivered))
		return nil
	}
	r.add("event tasks/s, "+broker, float64(events)/elapsed.Seconds(), "events/s")
	if err := errors.Join(cpuErr, cpuErr1); err != nil {
		r.Notes = append(r.Notes, "CPU per record not measured: "+err.Error())
	} else {
		r.add("CPU-s per 1,000 history records, one account, "+broker, (cpu1-cpu0)*1000/float64(records), "CPU-s")
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s: %d records became %d event tasks after de-duplication, all applied in %s", tg.name, records, events, elapsed.Round(time.Millisecond)))
	return nil
}

// fleetRun is one many-account burst of gmail-throughput.
type fleetRun struct {
	elapsed time.Duration
	cpu     float64 // this process's CPU seconds over the burst

	events          int
	units, refusals int // the emulator's counts over the burst
}

// runFleetBurst connects accounts mailboxes of mailbox messages, waits for
// their first syncs, then makes per history records of the mix in each,
// pushes every account at once and waits until all is applied.
func runFleetBurst(ctx context.Context, fo fleetOptions, accounts, mailbox, per int) (run fleetRun, err error) {
	f, err := newGmailFleet(ctx, fo, fairnessSize{accounts: accounts, messages: mailbox})
	if err != nil {
		return run, err
	}
	defer f.close()
	if err := f.connect(ctx); err != nil {
		return run, err
	}
	if err := f.waitIdle(ctx, 5*time.Minute); err != nil {
		return run, fmt.Errorf("first syncs: %w", err)
	}
	for i, email := range f.emails {
		if err := mixHistory(f.fake.Gmail, email, per, uint64(7+i)); err != nil {
			return run, err
		}
	}
	f.fake.ResetCounters()
	events0, err := gmailEventsHandled(ctx, f.addr)
	if err != nil {
		return run, err
	}
	cpu0, err := procCPUSeconds(os.Getpid())
	if err != nil {
		return run, err
	}
	start := time.Now()
	for i := range f.emails {
		if err := f.push(ctx, i); err != nil {
			return run, err
		}
	}
	if err := f.waitIdle(ctx, 5*time.Minute); err != nil {
		return run, err
	}
	run.elapsed = time.Since(start)
	cpu1, err := procCPUSeconds(os.Getpid())
	if err != nil {
		return run, err
	}
	run.cpu = cpu1 - cpu0
	events, err := gmailEventsHandled(ctx, f.addr)
	if err != nil {
		return run, err
	}
	run.events = events - events0
	run.units, run.refusals = f.fake.Gmail.TotalQuotaUnits(), f.fake.Gmail.TotalQuotaRefusals()
	return run, nil
}

// gmailThroughputFleet adds gmail-throughput's many-account rows: the same
// records spread over accounts, Gmail's quota off and on at serve's
// defaults, with the quota floors (the records a second the quota pays
// for, at the units per record the emulator counted).
func gmailThroughputFleet(ctx context.Context, o Options, r *Result, targets []benchTarget, records int) error {
	accounts, mailbox := 20, 150
	if o.Quick {
		accounts, mailbox = 4, 150
	}
	per := records / accounts
	unitsPerRecord := 0.0
	for _, tg := range targets {
		for _, off := range []bool{true, false} {
			quota := map[bool]string{true: "Gmail quota off", false: "Gmail quota on (serve's defaults)"}[off]
			o.progress("   %s: %d accounts × %d history records, %s", tg.name, accounts, per, quota)
			run, err := runFleetBurst(ctx, fleetOptions{redisURL: tg.url, quotaOff: off}, accounts, mailbox, per)
			if err != nil {
				return fmt.Errorf("%s, %d accounts, %s: %w", tg.name, accounts, quota, err)
			}
			broker := map[string]string{"embedded": "embedded broker", "redis": "redis-server"}[tg.name]
			r.add(fmt.Sprintf("history records/s push to applied, %d accounts, %s, %s", accounts, broker, quota), float64(accounts*per)/run.elapsed.Seconds(), "records/s")
			if tg.name == "embedded" {
				r.add(fmt.Sprintf("CPU-s per 1,000 history records, %d accounts, embedded broker, %s", accounts, quota), run.cpu*1000/float64(accounts*per), "CPU-s")
			}
			if off {
				continue
			}
			r.add(fmt.Sprintf("Google quota refusals, %d accounts, %s, quota on", accounts, broker), float64(run.refusals), "calls")
			if unitsPerRecord == 0 {
				unitsPerRecord = float64(run.units) / float64(accounts*per)
			}
			r.Notes = append(r.Notes, fmt.Sprintf("%s, %d accounts, quota on: %d records became %d event tasks, applied in %s; %d Gmail units (emulator's count)", tg.name, accounts, accounts*per, run.events, run.elapsed.Round(time.Millisecond), run.units))
		}
	}
	if unitsPerRecord == 0 {
		return nil
	}
	r.add("Gmail units per history record of the mix (emulator's count, quota on)", unitsPerRecord, "units")
	r.add("quota floor: history records/s one account's 6,000 units a minute pays for", 6000/60/unitsPerRecord, "records/s")
	r.add(fmt.Sprintf("quota floor: history records/s %d accounts' %d units a minute pay for", accounts, accounts*6000), float64(min(accounts*6000, 1_200_000))/60/unitsPerRecord, "records/s")
	r.add("quota floor: history records/s the project's 1,200,000 units a minute pay for", 1_200_000/60/unitsPerRecord, "records/s")
	r.Notes = append(r.Notes, fmt.Sprintf("many-account rows: the %d records spread over %d accounts of %d messages (%d each, the same mix), one push per account at once; quota off: as the one-account rows; quota on: the budget at serve's defaults (MAILROOM_GMAIL_USER_UNITS_PER_MINUTE=6000, MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE=1200000, a real minute) and the emulator at Google's documented limits (6,000 units per user and 1,200,000 per project a minute, 20 requests of a user in flight); otherwise the settings of the one-account rows. CPU-s per 1,000 records: this process's user and system time over the burst (/proc), on the embedded broker, where the broker, the budget's scripts and the emulator all run in it (the same emulator work in both rows); on a shared machine compare these, not the rates. The floors divide Google's limits by the units per record the emulator counted (Google's table: history.list 2 a page, messages.get 5 a new message, labels.list 1)", accounts*per, accounts, mailbox, per))
	return nil
}
