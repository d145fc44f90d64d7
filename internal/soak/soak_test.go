package soak_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker/brokertest"
)

const (
	// The gap between two kills (and between two Redis losses), drawn
	// uniformly from [killMin, killMax).
	killMin, killMax = 20 * time.Second, 60 * time.Second
	// ciDuration is the load of the soak's CI version, the one make test
	// runs (SOAK_DURATION unset).
	ciDuration = 2 * time.Minute
	// drainTimeout bounds the wait, after the load, for every check to hold.
	drainTimeout = 4 * time.Minute

	// soakQuotaMinute is the minute of Google's quotas (Gmail's and
	// Sheets') in the soak, for the emulator and mailroom alike.
	soakQuotaMinute = 5 * time.Second

	pushAudience = "https://soak.mailroom.test/push/gmail"
	pushTopic    = "projects/mailroom-soak/topics/gmail"
)

// TestSoak runs the built binary under mixed load on each broker (embedded
// and an external redis-server, in parallel unless -parallel 1) for
// SOAK_DURATION (skipped when unset), kills it with SIGKILL every 20 to 60 s, on Redis also
// restarts Redis without persistence and flushes it, and after a drain
// checks that every accepted submission is in its sheet once and in
// order, every mirror equals its mailbox, every rule label is where the
// rules say, and the only dead letters are those of injected permanent
// faults. SOAK_SEED replays a run.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: runs the built binary for minutes")
	}
	// make test runs the CI version (ciDuration); make soak and make
	// soak-short set SOAK_DURATION.
	s := os.Getenv("SOAK_DURATION")
	if s == "" {
		s = ciDuration.String()
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("SOAK_DURATION=%q: want a positive Go duration such as 10m", s)
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("SOAK_SEED"); s != "" {
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("SOAK_SEED=%q: want an unsigned integer", s)
		}
	}
	fmt.Printf("soak: seed %d (SOAK_SEED=%d replays it), %s of load per broker\n", seed, seed, d)
	apptest.Binary(t) // build once, before the parallel subtests
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		runSoak(t, soakConfig{duration: d, seed: seed})
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		rp := brokertest.StartRedisProcess(t)
		runSoak(t, soakConfig{duration: d, seed: seed + 1, redis: rp})
	})
}

type soakConfig struct {
	duration time.Duration
	seed     uint64
	redis    *brokertest.RedisProcess // nil: the embedded broker
}

// world is one soak: the emulator in the test process (it outlives every
// kill), the data dir, and the mailroom child of the moment.
type world struct {
	t    *testing.T
	cfg  soakConfig
	fake *googlefake.Server
	dir  string
	addr string // one listener address for every life, so pushes find it
	env  []string

	mu    sync.Mutex
	proc  *apptest.Proc
	users []*soakUser
	forms []*soakForm
	// permanent holds the ids of messages whose messages.get got an
	// injected permanent fault (and its handle): the only dead letters
	// allowed.
	permanent map[string]*googlefake.FaultHandle
	figures   figures
	trace     *trace
}

func (w *world) current() *apptest.Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.proc
}

// rng returns a generator for one actor of the soak, derived from the seed.
func (w *world) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(w.cfg.seed, stream))
}

func runSoak(t *testing.T, cfg soakConfig) {
	w := newWorld(t, cfg)
	w.setup()
	t.Logf("soak %s: seed %d, %d users, %d accounts, %d forms; load for %s", t.Name(), cfg.seed, len(w.users), w.accounts(), len(w.forms), cfg.duration)

	ctx, cancel := context.WithCancel(context.Background())
	var load sync.WaitGroup
	w.startLoad(ctx, &load)
	w.chaos(cfg.duration)
	cancel()
	load.Wait()
	// The episodes are over (each actor removed its own); the permanent
	// faults of messages not yet fetched stay until they fire.

	w.drain()
	w.report()
}

func newWorld(t *testing.T, cfg soakConfig) *world {
	w := &world{t: t, cfg: cfg, dir: t.TempDir(), addr: apptest.FreeAddr(t), permanent: map[string]*googlefake.FaultHandle{}}
	w.figures.faults, w.figures.episodes = map[string]int{}, map[string]int{}
	w.fake = googlefake.New(googlefake.Options{
		Seed:               cfg.seed,
		PushURL:            "http://" + w.addr + "/push/gmail",
		PushAudience:       pushAudience,
		PushServiceAccount: googlefake.DefaultPushServiceAccount,
		// Google's quota minutes compressed (emulator and mailroom alike): a
		// restart counts the minute before it as fully spent (the embedded
		// broker lost the windows), and with kills every 20 to 60 s a real
		// minute would stop Gmail and Sheets calls for the whole load.
		GmailQuotaWindow: soakQuotaMinute,
		SheetsWindow:     soakQuotaMinute,
	})
	tr, err := newTrace(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	w.trace = tr
	t.Cleanup(func() {
		if p := w.current(); p != nil && t.Failed() {
			w.trace.life(p.Out.String())
			for _, u := range w.users {
				for _, acc := range u.accounts {
					w.trace.event("labels of %s: %v", acc.email, w.fake.Gmail.LabelNames(acc.email))
				}
			}
		}
	})
	hs := httptest.NewServer(tr.gmailWrites(w.fake.Handler()))
	t.Cleanup(hs.Close)
	w.fake.SetBaseURL(hs.URL + "/")
	w.env = []string{
		"MAILROOM_HTTP_ADDR=" + w.addr,
		"MAILROOM_LOG_LEVEL=debug", // "task done" lines count the tasks run
		"MAILROOM_LOG_FORMAT=json",
		"MAILROOM_GOOGLE_API_URL=" + w.fake.URL(),
		"MAILROOM_GOOGLE_TOKEN_URL=" + w.fake.TokenURL(),
		"MAILROOM_GOOGLE_CERTS_URL=" + w.fake.CertsURL(),
		"MAILROOM_PUSH_AUDIENCE=" + pushAudience,
		"MAILROOM_PUSH_SERVICE_ACCOUNT=" + googlefake.DefaultPushServiceAccount,
		"MAILROOM_PUBSUB_TOPIC=" + pushTopic,
		// Settings that differ from serve's defaults, so that a minute
		// holds many cycles of each pipeline (docs/how-it-works.md, reliability).
		"MAILROOM_GMAIL_POLL_INTERVAL=10s",
		"MAILROOM_GMAIL_QUOTA_WINDOW=" + soakQuotaMinute.String(),
		"MAILROOM_SHEETS_QUOTA_WINDOW=" + soakQuotaMinute.String(),
		"MAILROOM_RECLASSIFY_DEBOUNCE=1s",
		"MAILROOM_RECLASSIFY_MAX_WAIT=5s",
		"MAILROOM_RECLASSIFY_TICK=200ms",
		"MAILROOM_RULE_SAVE_WINDOW=5s",
		"MAILROOM_SHEETS_FLUSH_DELAY=500ms",
		"MAILROOM_SHEETS_FLUSH_THRESHOLD=100",
		"MAILROOM_RETRY_INITIAL=200ms",
		"MAILROOM_RETRY_MAX=2s",
		"MAILROOM_MAX_RETRIES=10",
		"MAILROOM_DELAYED_CHECK_INTERVAL=100ms",
	}
	if cfg.redis != nil {
		w.env = append(w.env, "MAILROOM_REDIS_URL="+cfg.redis.URL())
	}
	return w
}

// start runs a new life of mailroom on the data dir and waits until it is
// ready.
func (w *world) start() {
	p := apptest.StartProc(w.t, w.dir, w.env...)
	w.mu.Lock()
	w.proc = p
	w.mu.Unlock()
}

// chaos is the test's own schedule for the load phase: a kill -9 and
// restart every killMin to killMax, and on Redis a loss (a restart without
// persistence, or FLUSHALL, in turn) on a schedule of its own.
func (w *world) chaos(d time.Duration) {
	rng := w.rng(1)
	gap := func() time.Duration { return killMin + time.Duration(rng.Int64N(int64(killMax-killMin))) }
	end := time.Now().Add(d)
	nextKill := time.Now().Add(gap())
	nextLoss := time.Now().Add(gap())
	if w.cfg.redis == nil {
		nextLoss = end.Add(time.Hour)
	}
	flush := rng.IntN(2) == 0
	for {
		next := nextKill
		if nextLoss.Before(next) {
			next = nextLoss
		}
		if next.After(end) {
			waitUntil(end)
			return
		}
		waitUntil(next)
		if next.Equal(nextKill) {
			w.killAndRestart()
			nextKill = time.Now().Add(gap())
			continue
		}
		w.loseRedis(flush, time.Duration(1+rng.IntN(4))*time.Second)
		flush = !flush
		nextLoss = time.Now().Add(gap())
	}
}

// waitUntil blocks until t: the load phase's clock, not a wait for an
// event.
func waitUntil(t time.Time) {
	if d := time.Until(t); d > 0 {
		<-time.After(d)
	}
}

// killAndRestart kills the child with SIGKILL, counts the tasks its life
// ran, and starts the next life.
func (w *world) killAndRestart() {
	p := w.current()
	p.Kill9()
	w.trace.event("kill -9")
	w.trace.life(p.Out.String())
	w.figures.addLife(p.Out.String())
	w.start()
	w.mu.Lock()
	w.figures.kills++
	w.figures.readyMax = max(w.figures.readyMax, w.proc.Ready)
	ready := w.proc.Ready
	w.mu.Unlock()
	w.t.Logf("kill -9 #%d: ready again %s after the restart", w.figures.kills, ready.Round(time.Millisecond))
}

// loseRedis makes the external Redis forget everything: FLUSHALL, or a
// kill of redis-server and, after outage, a start without persistence.
func (w *world) loseRedis(flush bool, outage time.Duration) {
	rp := w.cfg.redis
	if flush {
		c := redis.NewClient(&redis.Options{Addr: rp.Addr()})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.FlushAll(ctx).Err(); err != nil {
			w.t.Fatalf("FLUSHALL: %v", err)
		}
		w.figures.flushes++
		w.trace.event("Redis FLUSHALL")
		w.t.Logf("Redis FLUSHALL #%d", w.figures.flushes)
		return
	}
	rp.Stop()
	w.trace.event("Redis stopped")
	<-time.After(outage)
	rp.Start()
	w.trace.event("Redis started empty")
	w.figures.redisRestarts++
	w.t.Logf("Redis restart #%d without persistence after %s away", w.figures.redisRestarts, outage)
	// Work resumes by itself: /readyz says so within the watch's seconds.
	testkit.Eventually(w.t, 30*time.Second, "/readyz 200 after Redis came back", func() bool {
		return w.current().Readyz() == http.StatusOK
	})
}
