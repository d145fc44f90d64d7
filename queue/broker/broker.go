// Package broker provides the Redis that asynq and mailroom's own scripts talk
// to: either an embedded, in-memory store (miniredis, reached in process over
// net.Pipe, no TCP port) or an external Redis given by MAILROOM_REDIS_URL.
//
// The rest of mailroom cannot tell the two apart: it gets an
// asynq.RedisConnOpt for asynq's servers, clients and inspectors, and a
// shared redis.UniversalClient for its own scripts.
//
// The embedded store differs from a real Redis in ways this package hides or
// bounds:
//
//   - Time: miniredis never lets TTLs run down by itself. A clock (a
//     service: Services, started by the broker's owner) advances it by the
//     real elapsed time every Config.ClockTick, so unique
//     locks, heartbeats and rate-limit windows expire. A TTL ends on a tick,
//     so it may end up to one ClockTick early (a key set just before a tick
//     loses that whole tick); keep TTLs that matter several ticks long.
//   - INFO: answered with the fields Redis tools expect (redis_version,
//     connected_clients, used_memory, role, ...), not miniredis's three.
//   - State: nothing survives a restart. bbolt is the source of truth; the
//     broker holds derived work only.
package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
)

// Errors.
var (
	// ErrClosed is returned by Ping, and by the dialer of every client the
	// broker made, after Close.
	ErrClosed = errors.New("broker: closed")
)

const (
	defaultClockTick = time.Second
	// pingTimeout bounds the first ping of an external Redis, unless the
	// context given to Open ends earlier.
	pingTimeout = 5 * time.Second
	// embeddedAddr is the address go-redis reports for the embedded store. It
	// is never dialled: the Dialer ignores it.
	embeddedAddr = "embedded"
)

// Config configures a Broker.
type Config struct {
	// RedisURL is an external Redis as redis://[user:password@]host:port/db
	// (or rediss://, unix://). Empty (the default): the embedded store.
	RedisURL string

	// TLS adds a private CA and a client certificate to a rediss:// URL
	// (or to the Sentinels and master of a Sentinel setup).
	TLS TLSFiles

	// Sentinel, when its Addrs and Master are set, finds the master
	// through Redis Sentinel (RedisURL then may give the master's password
	// and db). A redis-sentinel:// RedisURL does the same.
	Sentinel Sentinel

	// ExposeAddr, when set, also serves the embedded store on this loopback
	// TCP address (for example "127.0.0.1:6380") so redis-cli can look in.
	// It must be a loopback IP or "localhost", and ExposePassword must be
	// set. Empty (the default): in process only, no TCP port. Ignored with
	// RedisURL.
	ExposeAddr string

	// ExposePassword is the password every connection to the embedded store
	// needs once ExposeAddr is set (AUTH). Required with ExposeAddr.
	ExposePassword string

	// ClockTick is how often the embedded store's clock advances TTLs. Zero
	// (the default): 1s. Each tick walks every key under miniredis's global
	// lock (about 2 ms at 10k keys), and a TTL may end up to one tick early.
	ClockTick time.Duration

	// Logger receives the broker's few log lines. Nil (the default): discard.
	Logger *slog.Logger

	// Unchecked opens an external Redis without failing when the first
	// ping does (a fleet's Redis: its users fall back while it is down).
	Unchecked bool
}

// Broker is an open connection to the Redis mailroom uses. It is safe for
// concurrent use.
type Broker struct {
	logger *slog.Logger
	// opts is the template every client the broker makes is copied from.
	opts   redis.Options
	client *redis.Client
	// ext makes the clients of an external Redis (one server or Sentinel).
	ext *externalClient

	// Embedded store only.
	mr      *miniredis.Miniredis
	clock   *clock
	exposed string

	// mu guards closed. The embedded dialer holds it for reading while it
	// dials, so that no dial reaches miniredis after Close: miniredis.Dial on
	// a closed store would quietly start a fresh one.
	mu     sync.RWMutex
	closed bool

	closeOnce sync.Once
	closeErr  error
}

// Open connects to the external Redis in cfg.RedisURL, or starts the embedded
// store when it is empty. ctx bounds only the opening (the first ping); the
// broker then lives until Close.
func Open(ctx context.Context, cfg Config) (*Broker, error) {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "broker")
	if cfg.ClockTick < 0 {
		return nil, fmt.Errorf("broker: clock tick %s: must not be negative", cfg.ClockTick)
	}
	if cfg.ClockTick == 0 {
		cfg.ClockTick = defaultClockTick
	}
	if cfg.RedisURL != "" || len(cfg.Sentinel.Addrs) > 0 || cfg.Sentinel.Master != "" {
		return openExternal(ctx, cfg, logger)
	}
	return openEmbedded(ctx, cfg, logger)
}

func openExternal(ctx context.Context, cfg Config, logger *slog.Logger) (*Broker, error) {
	ext, err := parseExternal(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.ExposeAddr != "" {
		logger.Warn("expose address ignored: an external Redis is in use", "expose_addr", cfg.ExposeAddr)
	}
	b := &Broker{logger: logger, ext: &ext}
	b.client = ext.newClient()

	pctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := b.client.Ping(pctx).Err(); err != nil {
		if cfg.Unchecked {
			logger.Warn("the Redis does not answer yet", "redis", ext.describe(), "err", err)
			return b, nil
		}
		_ = b.client.Close()
		return nil, fmt.Errorf("broker: cannot reach the Redis at %s given by MAILROOM_REDIS_URL: %w", ext.describe(), err)
	}
	logger.Info("using external redis", "redis", ext.describe(), "tls", b.client.Options().TLSConfig != nil)
	checkProduction(pctx, b.client, logger)
	return b, nil
}

func openEmbedded(ctx context.Context, cfg Config, logger *slog.Logger) (*Broker, error) {
	exposeAddr, err := checkExpose(cfg.ExposeAddr, cfg.ExposePassword)
	if err != nil {
		return nil, err
	}

	m := miniredis.NewMiniRedis()
	b := &Broker{logger: logger, mr: m}
	if exposeAddr != "" {
		m.RequireAuth(cfg.ExposePassword)
		if err := m.StartAddr(exposeAddr); err != nil {
			return nil, fmt.Errorf("broker: expose embedded store on %s: %w", exposeAddr, err)
		}
		b.exposed = m.Addr()
	} else {
		// Start the in-process server (m.Server() is nil until then).
		conn, err := m.Dial()
		if err != nil {
			return nil, fmt.Errorf("broker: start embedded store: %w", err)
		}
		_ = conn.Close()
	}
	// Set once above and only reset by m.Close, so reading it here is safe.
	srv := m.Server()
	srv.SetPreHook(newInfoShim(srv, b.exposed, time.Now()).hook)

	b.opts = redis.Options{
		Addr:            embeddedAddr,
		Dialer:          b.dialEmbedded,
		DisableIdentity: true, // miniredis has no CLIENT SETINFO
		// An in-process pipe needs no large socket buffers: with one asynq
		// server per queue there are well over a hundred connections, and
		// go-redis's default 32 KiB each way would cost ~10 MiB of heap.
		ReadBufferSize:  4 << 10,
		WriteBufferSize: 4 << 10,
	}
	if exposeAddr != "" {
		// RequireAuth applies to in-process connections too.
		b.opts.Password = cfg.ExposePassword
	}
	b.client = redis.NewClient(b.options())
	if err := b.client.Ping(ctx).Err(); err != nil {
		_ = b.client.Close()
		m.Close()
		return nil, fmt.Errorf("broker: ping embedded store: %w", err)
	}

	// The clock runs as a service (Services), in its owner's ordered list.
	b.clock = newClock(m, cfg.ClockTick, logger)

	if b.exposed != "" {
		logger.Info("embedded store started", "exposed_addr", b.exposed, "clock_tick", cfg.ClockTick)
	} else {
		logger.Info("embedded store started", "clock_tick", cfg.ClockTick)
	}
	return b, nil
}

// checkExpose validates an ExposeAddr and returns the address to listen on
// ("" for none).
func checkExpose(addr, password string) (string, error) {
	if addr == "" {
		return "", nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("broker: expose address %q: %w", addr, err)
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("broker: expose address %q: must be a loopback address (127.0.0.1, ::1 or localhost); the embedded store is not meant to be reached from other machines", addr)
	}
	if password == "" {
		return "", fmt.Errorf("broker: expose address %q: a password is required to expose the embedded store", addr)
	}
	return net.JoinHostPort(host, port), nil
}

// dialEmbedded is the go-redis Dialer of every client of the embedded store.
func (b *Broker) dialEmbedded(ctx context.Context, _, _ string) (net.Conn, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return b.mr.Dial()
}

// options returns a fresh copy of the client options template.
func (b *Broker) options() *redis.Options {
	o := b.opts
	return &o
}

// RedisConnOpt returns the connection option for asynq.NewServer, NewClient,
// NewInspector and NewScheduler. Each of them gets its own client, which it
// closes itself.
func (b *Broker) RedisConnOpt() asynq.RedisConnOpt {
	return connOpt{b: b}
}

// connOpt is the asynq.RedisConnOpt of a Broker.
type connOpt struct{ b *Broker }

var _ asynq.RedisConnOpt = connOpt{}

// MakeRedisClient returns a new *redis.Client over the broker's connection.
func (o connOpt) MakeRedisClient() interface{} {
	if o.b.ext != nil {
		return o.b.ext.newClient()
	}
	return redis.NewClient(o.b.options())
}

// Client returns the broker's shared client, for mailroom's own commands and
// scripts (rate limits, quotas). Do not close it; Close does.
func (b *Broker) Client() redis.UniversalClient {
	return b.client
}

// Embedded reports whether the broker is the in-process store.
func (b *Broker) Embedded() bool {
	return b.mr != nil
}

// ExposedAddr returns the loopback address the embedded store also listens
// on, or "" when it is not exposed (or the broker is external).
func (b *Broker) ExposedAddr() string {
	return b.exposed
}

// Ping checks that the broker answers, for readiness checks.
func (b *Broker) Ping(ctx context.Context) error {
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	if err := b.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("broker: ping: %w", err)
	}
	return nil
}

// Services are the broker's own: the embedded store's clock, which its
// owner starts first and stops last (it advances TTLs: without it, keys
// never expire); none for an external Redis. Every call returns the same.
func (b *Broker) Services() []lifecycle.Service {
	if b.clock == nil {
		return nil
	}
	return []lifecycle.Service{b.clock}
}

// Close stops the clock (if its owner has not), closes the shared client and, for the embedded
// store, shuts it down (its data is gone). Close asynq's servers, clients and
// inspectors first: their connections to the embedded store break here.
// Calling Close again returns the first call's result.
func (b *Broker) Close() error {
	b.closeOnce.Do(func() {
		b.mu.Lock()
		b.closed = true
		b.mu.Unlock()

		if b.clock != nil {
			_ = b.clock.Stop(context.Background()) // its loop returns within a tick
		}
		var errs []error
		if err := b.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("broker: close client: %w", err))
		}
		if b.mr != nil {
			b.mr.Close()
		}
		b.closeErr = errors.Join(errs...)
		b.logger.Info("broker closed")
	})
	return b.closeErr
}
