package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"mailroom/internal/app"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/google/googlefake"
	"mailroom/store"
)

const (
	benchMailbox   = "bench@example.com"
	benchPushToken = "bench-push-token"
)

// gmailBench is the Gmail pipeline over its own bbolt file, broker, task
// servers and emulator, as serve builds it (defaults of the configuration),
// with pushes handed to the pipeline directly (no HTTP).
type gmailBench struct {
	fake    *googlefake.Server
	db      *store.DB
	b       *broker.Broker
	q       *queue.Queue
	p       *gmail.Pipeline
	dir     string
	account string

	mu      sync.Mutex
	applied int
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
}

// gmailEventTypes are the seven event types.
var gmailEventTypes = []string{
	queue.TypeGmailMessageAdded, queue.TypeGmailMessageRead, queue.TypeGmailMessageUnread,
	queue.TypeGmailMessageTrashed, queue.TypeGmailMessageRestored, queue.TypeGmailMessageDeleted,
	queue.TypeGmailMessageLabeled,
}

func newGmailBench(ctx context.Context, o gmailBenchOptions) (_ *gmailBench, err error) {
	cfg, err := app.ParseConfig("bench", nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		return nil, err
	}
	g := &gmailBench{waiting: map[string]time.Time{}}
	defer func() {
		if err != nil {
			g.close()
		}
	}()
	g.fake = googlefake.New(googlefake.Options{})
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
	if g.dir, err = os.MkdirTemp("", "mailroom-bench-gmail-"); err != nil {
		return nil, err
	}
	if g.db, err = store.Open(g.dir, store.Options{SecretKey: make([]byte, 32)}); err != nil {
		return nil, err
	}
	if g.b, err = broker.Open(ctx, broker.Config{RedisURL: o.redisURL}); err != nil {
		return nil, err
	}
	table := queue.NewTable(queue.TableConfig{MaxRetries: cfg.MaxRetries, ConcurrencyMessageAdded: cfg.ConcurrencyMessageAdded, ConcurrencyState: cfg.ConcurrencyState})
	if o.oneQueue {
		rows := table.Types()
		workers := cfg.ConcurrencyMessageAdded + 6*cfg.ConcurrencyState
		for i := range rows {
			if slices.Contains(gmailEventTypes, rows[i].Name) {
				rows[i].Queue, rows[i].Concurrency = "gmail-events", workers
			}
		}
		table = queue.NewTableFromRows(rows)
	}
	gc := google.New(google.Config{APIURL: g.fake.URL(), TokenURL: g.fake.TokenURL(), HTTPClient: &http.Client{Timeout: 30 * time.Second}})
	g.p, err = gmail.New(gmail.Config{
		PushToken: benchPushToken, PollInterval: time.Hour,
		// The emulator has no quota; the bench measures the pipeline.
		QuotaPerSecond: 1e6,
		OnApplied:      g.onApplied,
	}, gmail.Deps{DB: g.db, Google: gc, Queue: benchEnqueuer{g}})
	if err != nil {
		return nil, err
	}
	if err := g.p.Register(table); err != nil {
		return nil, err
	}
	for _, tt := range table.Types() {
		if tt.Handler == nil {
			if err := table.Handle(tt.Name, func(context.Context, *queue.Task) error { return nil }); err != nil {
				return nil, err
			}
		}
	}
	g.q, err = queue.New(queue.Config{
		RelayCap: cfg.RelayCap, RetryInitial: cfg.RetryInitial, RetryMultiplier: cfg.RetryMultiplier, RetryMax: cfg.RetryMax,
		PollInterval: cfg.TaskPollInterval, DelayedCheckInterval: cfg.DelayedCheckInterval, ShutdownTimeout: 2 * time.Second,
	}, g.db, g.b.RedisConnOpt(), table)
	if err != nil {
		return nil, err
	}
	if err := g.q.Start(ctx); err != nil {
		g.q = nil
		return nil, err
	}
	var user store.User
	if err := g.db.Update(func(tx *store.Tx) (err error) { user, err = tx.UserCreate("owner@example.com", "Owner"); return err }); err != nil {
		return nil, err
	}
	acc, _, err := g.p.Connect(ctx, gmail.ConnectRequest{UserID: user.ID, Email: benchMailbox, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		return nil, err
	}
	g.account = acc.ID
	return g, g.waitSynced(ctx, 2*time.Minute)
}

type benchEnqueuer struct{ g *gmailBench }

func (e benchEnqueuer) Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (store.OutboxRecord, bool, error) {
	return e.g.q.Enqueue(tx, typ, payload, opts...)
}

func (g *gmailBench) close() {
	if g.q != nil {
		g.q.Stop()
	}
	if g.b != nil {
		g.b.Close()
	}
	if g.db != nil {
		g.db.Close()
	}
	if g.fake != nil {
		g.fake.Close()
	}
	if g.dir != "" {
		os.RemoveAll(g.dir)
	}
}

func (g *gmailBench) onApplied(a gmail.Applied) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.applied++
	if a.Type != queue.TypeGmailMessageRead {
		return
	}
	if at, ok := g.waiting[a.MessageID]; ok {
		delete(g.waiting, a.MessageID)
		g.lat = append(g.lat, a.At.Sub(at))
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
		left := false
		err := g.db.View(func(tx *store.Tx) error {
			for _, qi := range g.q.Table().Queues() {
				if strings.HasPrefix(qi.Name, "gmail") && !left {
					// One record read: cheap enough to poll.
					if err := tx.OutboxScan(qi.Name, "", 1, func(store.OutboxRecord) bool { left = true; return false }); err != nil {
						return err
					}
				}
			}
			return nil
		})
		return !left, err
	})
}

func waitFor(ctx context.Context, d time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(d)
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", d, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
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
	r.Notes = append(r.Notes, fmt.Sprintf("%d reads, one push each %s apart; backlog: %d message-added events whose messages.get takes %s (emulator latency); default workers (message-added 3, each state queue 5, baseline one queue of 33); task poll interval 100ms (default)", reads, gap, backlog, fetch))

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
	r.Notes = append(r.Notes, fmt.Sprintf("%d history records (10%% adds, 1%% deletes, reads, unreads, trash moves, labels) on a %d-message mailbox, one push; default workers; %s", records, mailbox, o.GC))

	targets, stop := benchTargets(ctx, o, &r)
	defer stop()
	for _, tg := range targets {
		o.progress("   %s: %d history records", tg.name, records)
		g, err := newGmailBench(ctx, gmailBenchOptions{redisURL: tg.url, messages: mailbox, unread: mailbox / 4})
		if err != nil {
			return r, fmt.Errorf("%s: %w", tg.name, err)
		}
		err = mixHistory(g.fake.Gmail, benchMailbox, records, 7)
		if err == nil {
			g.mu.Lock()
			g.applied = 0
			g.mu.Unlock()
			start := time.Now()
			if err = g.push(ctx); err == nil {
				err = g.waitIdle(ctx, 5*time.Minute)
			}
			elapsed := time.Since(start)
			g.mu.Lock()
			events := g.applied
			g.mu.Unlock()
			if err == nil {
				if tg.name == "embedded" {
					r.addTarget("history records/s push to applied, embedded broker", float64(records)/elapsed.Seconds(), "records/s", 1500, true)
					r.add("event tasks/s, embedded broker", float64(events)/elapsed.Seconds(), "events/s")
				} else {
					r.add("history records/s push to applied, redis-server", float64(records)/elapsed.Seconds(), "records/s")
					r.add("event tasks/s, redis-server", float64(events)/elapsed.Seconds(), "events/s")
				}
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %d records became %d event tasks after de-duplication, all applied in %s", tg.name, records, events, elapsed.Round(time.Millisecond)))
			}
		}
		g.close()
		if err != nil {
			return r, fmt.Errorf("%s: %w", tg.name, err)
		}
	}
	return r, nil
}
