package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
	"mailroom/store"
)

// ErrBrokerUnavailable marks errors caused by a broker that does not
// answer: the web layer answers them with 503 and Retry-After.
var ErrBrokerUnavailable = errors.New("the broker (Redis) is unavailable")

// BrokerUnavailable wraps err (a failed broker call) as ErrBrokerUnavailable.
func BrokerUnavailable(err error) error {
	if err == nil || errors.Is(err, ErrBrokerUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrBrokerUnavailable, err)
}

// epochKeyPrefix + the data file's instance id holds the random epoch the
// watch marked the broker with. A broker without it has forgotten what it
// held.
const epochKeyPrefix = "mailroom:broker:epoch:"

// WatchConfig configures a Watch. Zero values take the defaults named.
type WatchConfig struct {
	// Interval is how often the broker is pinged and its epoch checked.
	// Default 1s.
	Interval time.Duration
	// Heartbeat is how often the time the broker was last seen alive is
	// written to bbolt (the bound on how early a lost window may have been
	// spent after a crash). Default 5s.
	Heartbeat time.Duration
	// PingTimeout bounds one check. Default 2s.
	PingTimeout time.Duration
	Logger      *slog.Logger
	// Raise is called with an alert's text when the store stops (and
	// starts again) committing writes (Alerter.Raise). Nil: only logged.
	Raise func(text string)
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// BrokerHealth is what the watch knows of the broker.
type BrokerHealth struct {
	// Up is false while the broker does not answer.
	Up bool `json:"up"`
	// Error is the last failed check's error while down.
	Error string `json:"error,omitempty"`
	// DownSince is when the current outage began (zero while up).
	DownSince time.Time `json:"downSince,omitzero"`
	// ForgotAt is the latest time the broker was found to have lost what it
	// held (zero: never since this process started).
	ForgotAt time.Time `json:"forgotAt,omitzero"`
	// Losses counts the losses found while this process ran.
	Losses int `json:"losses"`
	// LostBeforeStart is set when the broker had forgotten, at start, what
	// an earlier run left there (always so with the embedded store).
	LostBeforeStart bool `json:"lostBeforeStart"`
}

// Watch keeps an eye on the broker: it pings it, marks it with an epoch so
// that a broker that forgot everything (restarted without persistence,
// flushed, failed over to an empty replica, or the embedded store of an
// earlier process) is noticed, and tells its subscribers (the relays, which
// then reconcile the outbox with the broker) when the broker comes back or
// forgot. It also answers, for the windows kept in the broker (rate limits,
// quotas), until when a window must be treated as fully spent because the
// broker lost its log (SpentUntil).
type Watch struct {
	cfg WatchConfig
	db  *store.DB
	rdb redis.UniversalClient
	log *slog.Logger

	mu        sync.Mutex
	health    BrokerHealth
	epoch     string
	instance  string    // the data file's id (BrokerState.Instance)
	epochKey  string    // epochKeyPrefix + instance
	lastAlive time.Time // last heartbeat written
	subs      []chan struct{}
	storeDown bool // the store's commits fail (checkStore)

	lifecycle.Base // Start and Stop
}

var _ lifecycle.Service = (*Watch)(nil)

// NewWatch returns a watch of the broker rdb, keeping its state in db.
func NewWatch(cfg WatchConfig, db *store.DB, rdb redis.UniversalClient) *Watch {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 5 * time.Second
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 2 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Watch{cfg: cfg, db: db, rdb: rdb, log: cfg.Logger.With("component", "broker-watch"), health: BrokerHealth{Up: true}}
}

// Subscribe returns a channel that receives a signal (coalesced) each time
// the broker comes back after an outage or is found to have forgotten what
// it held.
func (w *Watch) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	w.subs = append(w.subs, ch)
	w.mu.Unlock()
	return ch
}

func (w *Watch) notify() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ch := range w.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Health returns what the watch knows of the broker now.
func (w *Watch) Health() BrokerHealth {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.health
}

// SpentUntil returns until when a window of the given length kept in the
// broker must be treated as fully spent because the broker lost its log:
// the latest loss plus one window, or the zero time when that is past (or
// nothing was lost). This is the hook for every window kept in the broker
// (the rule save limit, the Google quotas): check it before the broker's
// own count, and refuse (or wait) until it is past.
func (w *Watch) SpentUntil(window time.Duration) time.Time {
	w.mu.Lock()
	forgot := w.health.ForgotAt
	w.mu.Unlock()
	if forgot.IsZero() {
		return time.Time{}
	}
	until := forgot.Add(window)
	if !until.After(w.cfg.Now()) {
		return time.Time{}
	}
	return until
}

// Start checks the broker once (finding a memory lost since the last run)
// and then watches it every Interval until Stop. It does not fail when the
// broker is down: that is what it watches for.
func (w *Watch) Start(ctx context.Context) error {
	r, ok := w.Begin(ctx)
	if !ok {
		return nil // running already
	}
	if err := w.first(r.Context()); err != nil {
		w.log.Warn("first broker check", "err", err)
	}
	r.Go(func(ctx context.Context) {
		lifecycle.Tick(ctx, w.cfg.Interval, func(ctx context.Context) {
			w.check(ctx)
			w.checkStore()
		})
	})
	return nil
}

// Stop ends the watch and records the broker as last seen alive now.
func (w *Watch) Stop(ctx context.Context) error {
	r := w.Ending()
	if r == nil {
		return nil
	}
	w.mu.Lock()
	up, epoch := w.health.Up, w.epoch
	w.mu.Unlock()
	err := r.End(ctx)
	if up && epoch != "" {
		w.heartbeat(epoch, true)
	}
	return err
}

// first compares the broker's epoch with the one stored in bbolt: a broker
// without it forgot what an earlier run left there, possibly spent from a
// window up to the last heartbeat.
func (w *Watch) first(ctx context.Context) error {
	var prev store.BrokerState
	if err := w.db.View(func(tx *store.Tx) error {
		var err error
		prev, err = tx.BrokerState()
		return err
	}); err != nil {
		return err
	}
	w.instance = prev.Instance
	if w.instance == "" {
		w.instance = store.NewID()
	}
	w.epochKey = epochKeyPrefix + w.instance
	cctx, cancel := context.WithTimeout(ctx, w.cfg.PingTimeout)
	defer cancel()
	got, err := w.rdb.Get(cctx, w.epochKey).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		// Whether it kept its memory is known when it answers (check).
		w.down(err)
		w.mu.Lock()
		w.epoch = prev.Epoch
		w.mu.Unlock()
		return BrokerUnavailable(err)
	}
	if prev.Epoch != "" && got == prev.Epoch {
		w.mu.Lock()
		w.epoch = got
		w.mu.Unlock()
		w.heartbeat(got, true)
		return nil
	}
	if prev.Epoch != "" {
		at := w.lostAt(prev)
		// Routine with the embedded store; the outbox is handed over at
		// start anyway.
		w.log.Info("the broker does not hold what the last run left there; windows kept there resume as if fully spent", "last_alive", prev.AliveAt, "lost_at", at)
		w.mu.Lock()
		w.health.ForgotAt, w.health.LostBeforeStart = at, true
		w.mu.Unlock()
	}
	return w.mark(ctx)
}

// lostAt is the latest time a previous run may have spent from a window:
// its last heartbeat plus one heartbeat, at most now.
func (w *Watch) lostAt(prev store.BrokerState) time.Time {
	at := prev.AliveAt.Add(w.cfg.Heartbeat)
	if now := w.cfg.Now(); at.After(now) || prev.AliveAt.IsZero() {
		return now
	}
	return at
}

func (w *Watch) forgot(at time.Time) {
	w.mu.Lock()
	if at.After(w.health.ForgotAt) {
		w.health.ForgotAt = at
	}
	w.health.Losses++
	w.mu.Unlock()
}

// mark gives the broker a new epoch and stores it.
func (w *Watch) mark(ctx context.Context) error {
	epoch := store.NewID()
	cctx, cancel := context.WithTimeout(ctx, w.cfg.PingTimeout)
	defer cancel()
	if err := w.rdb.Set(cctx, w.epochKey, epoch, 0).Err(); err != nil {
		w.down(err)
		return BrokerUnavailable(err)
	}
	w.mu.Lock()
	w.epoch = epoch
	w.mu.Unlock()
	w.heartbeat(epoch, true)
	return nil
}

func (w *Watch) down(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.health.Up {
		w.health.DownSince = w.cfg.Now()
		w.log.Warn("the broker does not answer; work waits in the outbox", "err", err)
	}
	w.health.Up = false
	w.health.Error = err.Error()
}

// check pings the broker and reads its epoch.
func (w *Watch) check(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, w.cfg.PingTimeout)
	got, err := w.rdb.Get(cctx, w.epochKey).Result()
	cancel()
	if ctx.Err() != nil {
		return
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		w.down(err)
		return
	}
	w.mu.Lock()
	wasDown, epoch := !w.health.Up, w.epoch
	if wasDown {
		w.log.Info("the broker answers again", "down_for", w.cfg.Now().Sub(w.health.DownSince).Round(time.Millisecond))
	}
	w.health.Up, w.health.Error, w.health.DownSince = true, "", time.Time{}
	w.mu.Unlock()
	if epoch == "" {
		// Down at the first start of a new data file: nothing to lose.
		if w.mark(ctx) == nil {
			w.notify()
		}
		return
	}
	if got != epoch {
		w.log.Warn("the broker forgot what it held (restarted without persistence, flushed or failed over); handing the outbox again", "epoch_found", got != "")
		w.forgot(w.cfg.Now())
		if err := w.mark(ctx); err != nil {
			return
		}
		w.notify()
		return
	}
	if wasDown {
		w.notify()
	}
	w.heartbeat(epoch, false)
}

// checkStore notices when the store's commits start or stop failing (a
// full disk): it probes with a small write while they fail, so the store
// recovers by itself when space returns, and raises an alert at each
// change.
func (w *Watch) checkStore() {
	_, err := w.db.WriteHealth()
	if err != nil {
		err = w.db.Probe()
	}
	w.mu.Lock()
	was := w.storeDown
	w.storeDown = err != nil
	w.mu.Unlock()
	switch {
	case err != nil && !was:
		w.log.Error("the store cannot write; requests that must store answer 503 store_unavailable", "err", err)
		if w.cfg.Raise != nil {
			w.cfg.Raise(fmt.Sprintf("the data file cannot be written (disk full or I/O error): %v. Requests that must store something answer 503 until writes work again; free space on the data dir's disk.", err))
		}
	case err == nil && was:
		w.log.Info("the store writes again")
		if w.cfg.Raise != nil {
			w.cfg.Raise("the data file can be written again; requests are accepted.")
		}
	}
}

// heartbeat records the broker as alive now, at most once per Heartbeat
// unless forced. A failed write (a full disk) is only logged: the next
// beat tries again.
func (w *Watch) heartbeat(epoch string, force bool) {
	now := w.cfg.Now()
	w.mu.Lock()
	due := force || now.Sub(w.lastAlive) >= w.cfg.Heartbeat
	w.mu.Unlock()
	if !due {
		return
	}
	err := w.db.Update(func(tx *store.Tx) error {
		return tx.PutBrokerState(store.BrokerState{Instance: w.instance, Epoch: epoch, AliveAt: now.UTC()})
	})
	if err != nil {
		w.log.Debug("record the broker alive", "err", err)
		return
	}
	w.mu.Lock()
	w.lastAlive = now
	w.mu.Unlock()
}
