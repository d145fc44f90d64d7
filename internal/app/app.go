package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
	"mailroom/store"
	"mailroom/web"
)

// App is the whole appliance, built by New for serve, the demo, the
// end-to-end tests and every benchmark alike.
type App struct {
	cfg      *Config
	deps     Deps // what New was given besides cfg (wireAccounts reads the Google ones)
	log      *slog.Logger
	registry *prometheus.Registry

	db     *store.DB
	broker *broker.Broker
	lease  *broker.Lease
	// fleet is this mailroom's membership of its fleet (nil without
	// MAILROOM_FLEET_REDIS_URL); its Redis holds the project's budgets.
	fleet  *broker.Fleet
	table  *queue.Table
	queue  *queue.Queue
	alerts *queue.Alerter
	watch  *queue.Watch // the broker's health and memory (health.go)

	handler    http.Handler
	http       *httpService
	demoSource web.DemoSource // the demo pages' view of the emulator, with --demo
	debug      *debugTasks
	accounts   *accounts.Service  // set by wireAccounts
	gmail      *gmail.Pipeline    // set by wireGmail
	sheets     *sheets.Pipeline   // set by wireSheets
	rules      *rules.Pipeline    // set by wireRules
	webhooks   *webhooks.Pipeline // set by wireEvents

	// services are every background part, in start order: the broker's
	// own (the embedded store's clock), its lease, the alerter (before the
	// task servers, whose dead letters it announces), the broker watch, the queue, the pipelines' loops, the caller's services
	// (the demo's traffic), HTTP. Start starts them in order, Stop stops
	// them in reverse: senders before receivers.
	services lifecycle.Sequence

	// generatedPassword is set when the admin password was made on this start.
	generatedPassword string

	closed     []func() error // reverse-order closers of what New opened
	depClosers []func() error // Deps.Closers, run first
}

// New validates cfg and builds the finished app from it and deps: it opens
// the store and the broker and builds the task table, the pipelines, the
// web handler and the ordered list of services. Nothing is changed after
// New returns, and nothing runs until Start. New owns deps.Closers: a
// failed New runs them.
func New(ctx context.Context, cfg *Config, deps Deps) (_ *App, err error) {
	a := &App{cfg: cfg, deps: deps, log: deps.Logger, registry: prometheus.NewRegistry(), demoSource: deps.DemoSource, depClosers: deps.Closers}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	logger := a.log
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	if err := a.openStore(cfg, logger); err != nil {
		return nil, err
	}

	a.broker, err = broker.Open(ctx, broker.Config{
		RedisURL: cfg.RedisURL, ExposeAddr: cfg.BrokerAddr, ExposePassword: cfg.BrokerPassword, Logger: logger,
		TLS:      broker.TLSFiles{CAFile: cfg.RedisTLSCAFile, CertFile: cfg.RedisTLSCertFile, KeyFile: cfg.RedisTLSKeyFile},
		Sentinel: broker.Sentinel{Addrs: cfg.RedisSentinels, Master: cfg.RedisSentinelMaster},
	})
	if err != nil {
		return nil, err
	}
	a.closed = append(a.closed, a.broker.Close)
	if err := a.claimBroker(ctx, cfg); err != nil {
		return nil, err
	}

	alerts := queue.AlertConfig{WebhookURL: cfg.AlertWebhookURL, PublicURL: cfg.BaseURL(), Logger: logger, DB: a.db}
	if deps.AlertURL != "" {
		alerts.WebhookURL, alerts.Client = deps.AlertURL, deps.AlertClient
	}
	a.alerts = queue.NewAlerter(alerts)
	if a.table, err = taskTable(cfg, deps); err != nil {
		return nil, err
	}
	a.watch = queue.NewWatch(queue.WatchConfig{Logger: logger, Raise: a.alerts.Raise}, a.db, a.broker.Client())
	if err := a.openQueue(cfg, logger); err != nil {
		return nil, err
	}
	// The broker's clock first (the embedded store's TTLs run down from
	// then on), then the lease on it.
	a.services = append(lifecycle.Sequence(a.broker.Services()), a.lease, a.alerts, a.watch, a.queue)
	if a.fleet != nil {
		a.services = append(a.services, a.fleet)
	}
	if err := a.buildPipelines(ctx); err != nil {
		return nil, err
	}
	if err := a.registerFleetMetrics(); err != nil {
		return nil, err
	}
	a.services = append(a.services, deps.Services...)
	if err := a.buildWeb(); err != nil {
		return nil, err
	}
	if deps.UseHandler != nil {
		deps.UseHandler(a.handler)
	}
	a.http = newHTTPService(cfg.HTTPAddr, a.handler, a.log)
	a.services = append(a.services, a.http)
	return a, nil
}

// claimBroker takes this mailroom's lease on an external broker before
// anything is written there: another mailroom's live lease refuses the
// start, naming it.
func (a *App) claimBroker(ctx context.Context, cfg *Config) error {
	dataID, err := a.db.DataID()
	if err != nil {
		return err
	}
	owner := broker.Owner{Instance: cfg.Instance, DataID: dataID, Host: hostname(), PID: os.Getpid()}
	a.lease = broker.NewLease(a.broker, owner)
	if err := a.lease.Claim(ctx); err != nil {
		return err
	}
	if cfg.FleetRedisURL == "" {
		return nil
	}
	fb, err := broker.Open(ctx, broker.Config{RedisURL: cfg.FleetRedisURL, Unchecked: true, Logger: a.log.With("redis", "fleet")})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	a.closed = append(a.closed, fb.Close)
	a.fleet = broker.NewFleet(fb, owner)
	return nil
}

// budgetStores are where the project's budgets are kept: the fleet's
// Redis, falling back to this mailroom's broker; or the broker alone.
func (a *App) budgetStores() (store, fallback google.BudgetStore, share func() int) {
	if a.fleet == nil {
		return a.broker.Client(), nil, nil
	}
	return a.fleet.Client(), a.broker.Client(), a.fleet.Share
}

// openStore opens the store in the data dir, tightening the dir's mode
// first, and registers the store's metrics.
func (a *App) openStore(cfg *Config, logger *slog.Logger) error {
	var key []byte
	if cfg.SecretKey != "" {
		key, _ = store.ParseKey(cfg.SecretKey) // validated
	}
	loose, err := store.SecureDir(cfg.DataDir)
	if err != nil {
		return err
	}
	if loose != 0 {
		logger.Warn("the data dir was readable by others; tightened to 0700", "data_dir", cfg.DataDir, "was", fmt.Sprintf("%04o", loose))
	}
	a.db, err = store.Open(cfg.DataDir, store.Options{SecretKey: key})
	if err != nil {
		return err
	}
	a.closed = append(a.closed, a.db.Close)
	return a.registerStoreMetrics()
}

// openQueue makes the app's task machinery.
func (a *App) openQueue(cfg *Config, logger *slog.Logger) error {
	// The enqueue side works from here on; the task servers start in Start,
	// once buildPipelines has given every task type its handler.
	var err error
	a.queue, err = queue.New(queue.Config{
		RelayCap:             cfg.RelayCap,
		RetryInitial:         cfg.RetryInitial,
		RetryMultiplier:      cfg.RetryMultiplier,
		RetryMax:             cfg.RetryMax,
		PollInterval:         cfg.TaskPollInterval,
		DelayedCheckInterval: cfg.DelayedCheckInterval,
		ShutdownTimeout:      cfg.ShutdownTimeout,
		ServerLinger:         cfg.TaskServerLinger,
		AlwaysOnServers:      cfg.TaskServersAlwaysOn,
		Alerts:               a.alerts,
		Watch:                a.watch,
		Logger:               logger,
		Registerer:           a.registry,
	}, a.db, a.broker.RedisConnOpt(), a.table)
	return err
}

// ready reports whether store, broker and task servers are up (the
// servers' manager: a queue's own server sleeps while it has nothing to do).
func (a *App) ready(ctx context.Context) error {
	if err := a.db.Ping(); err != nil {
		return &web.Unready{Part: "store", Err: err}
	}
	if err := a.broker.Ping(ctx); err != nil {
		return &web.Unready{Part: "broker", Err: err}
	}
	if !a.queue.Ready() {
		return &web.Unready{Part: "task servers", Err: errors.New("task servers are not running")}
	}
	return nil
}

// Start starts the services in order: the broker's clock and lease, the
// alerter, the broker watch, the queue (handing the outbox to the broker and starting the task servers),
// the pipelines' loops, the caller's services, then HTTP on cfg.HTTPAddr.
// When one fails to start, the ones that had started are stopped in
// reverse order. A second Start does nothing (each service's does
// nothing while it runs).
func (a *App) Start(ctx context.Context) error { return a.services.Start(ctx) }

// Addr is the address HTTP listens on (useful with port 0).
func (a *App) Addr() string { return a.http.Addr() }

// Stop stops the services in reverse order, senders before receivers:
// HTTP, the caller's services, the pipelines' loops, the task servers
// (bounded by the shutdown timeout), the watch, the alerter (posting what
// the shutdown dead-lettered); then it closes the broker and bbolt.
func (a *App) Stop(ctx context.Context) error {
	return errors.Join(a.services.Stop(ctx), a.Close())
}

// Close closes what New opened (Deps.Closers first); Stop calls it, and so
// must whoever calls New and then fails to Start.
func (a *App) Close() error {
	var errs []error
	for _, list := range [][]func() error{a.depClosers, a.closed} {
		for i := len(list) - 1; i >= 0; i-- {
			if err := list[i](); err != nil {
				errs = append(errs, err)
			}
		}
	}
	a.depClosers, a.closed = nil, nil
	return errors.Join(errs...)
}

// NewLogger is the process's logger at cfg's level and format.
func NewLogger(cfg *Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if cfg.LogFormat == "json" {
		h = slog.NewJSONHandler(w, opts)
	}
	// No secret reaches the log: every record is redacted.
	return slog.New(cfg.Redactor().Handler(h))
}

// Config is the configuration the app runs with.
func (a *App) Config() *Config { return a.cfg }

// GeneratedPassword is the admin password made on this start, or "".
func (a *App) GeneratedPassword() string { return a.generatedPassword }

// EmbeddedBroker reports whether the broker is the in-process one.
func (a *App) EmbeddedBroker() bool { return a.broker.Embedded() }

// DB is the app's store.
func (a *App) DB() *store.DB { return a.db }

// Queue is the app's task machinery.
func (a *App) Queue() *queue.Queue { return a.queue }

// Gmail, Rules and Sheets are the app's pipelines.
func (a *App) Gmail() *gmail.Pipeline   { return a.gmail }
func (a *App) Rules() *rules.Pipeline   { return a.rules }
func (a *App) Sheets() *sheets.Pipeline { return a.sheets }

// Webhooks is the app's webhooks pipeline.
func (a *App) Webhooks() *webhooks.Pipeline { return a.webhooks }

// Broker is the app's broker.
func (a *App) Broker() *broker.Broker { return a.broker }

// Services are the app's services, in start order: the same instances at
// every call (New makes them once).
func (a *App) Services() []lifecycle.Service { return append([]lifecycle.Service(nil), a.services...) }
