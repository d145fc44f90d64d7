package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"mailroom/queue"
	"mailroom/queue/broker"
	"mailroom/queue/gmail"
	"mailroom/queue/google/accounts"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
	"mailroom/store"
	"mailroom/web"
)

// Loop is a background service with a lifecycle (tickers, relays, the
// demo's traffic generator). The app starts loops in order and stops them
// in reverse.
type Loop interface {
	Start(ctx context.Context) error
	Stop()
}

// App is the whole appliance, built by New for serve, the demo, the
// end-to-end tests and every benchmark alike.
type App struct {
	cfg      *Config
	log      *slog.Logger
	registry *prometheus.Registry

	db     *store.DB
	broker *broker.Broker
	table  *queue.Table
	queue  *queue.Queue
	alerts *queue.Alerter
	watch  *queue.Watch // the broker's health and memory (health.go)

	handler    http.Handler
	server     *http.Server
	listener   net.Listener
	loops      []Loop
	demoSource web.DemoSource // the demo pages' view of the emulator, with --demo
	debug      *debugTasks
	accounts   *accounts.Service  // set by wireAccounts
	gmail      *gmail.Pipeline    // set by wireGmail
	sheets     *sheets.Pipeline   // set by wireSheets
	rules      *rules.Pipeline    // set by wireRules
	webhooks   *webhooks.Pipeline // set by wireEvents

	// generatedPassword is set when the admin password was made on this start.
	generatedPassword string

	cancel context.CancelFunc
	done   chan struct{}
	closed []func() error // reverse-order closers of what New opened
}

// New opens the store and the broker and builds the task table, the
// pipelines and the web handler; each option (the demo world is one) runs
// before the pipelines are built. Nothing runs until Start.
func New(ctx context.Context, cfg *Config, logger *slog.Logger, opts ...Option) (_ *App, err error) {
	a := &App{cfg: cfg, log: logger, registry: prometheus.NewRegistry(), done: make(chan struct{})}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
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

	a.alerts = queue.NewAlerter(queue.AlertConfig{WebhookURL: cfg.AlertWebhookURL, PublicURL: cfg.BaseURL(), Logger: logger, DB: a.db})
	a.table = queue.NewTable(queue.TableConfig{
		MaxRetries:              cfg.MaxRetries,
		ConcurrencyMessageAdded: cfg.ConcurrencyMessageAdded,
		ConcurrencyState:        cfg.ConcurrencyState,
		Debug:                   cfg.DebugTasks,
	})
	if cfg.Overrides.Tasks != nil {
		a.table = queue.NewTableFromRows(cfg.Overrides.Tasks(a.table.Types()))
	}
	// Raise reaches a.alerts at call time: the demo may replace it.
	a.watch = queue.NewWatch(queue.WatchConfig{Logger: logger, Raise: func(text string) { a.alerts.Raise(text) }}, a.db, a.broker.Client())
	b := &Builder{a: a}
	for _, o := range opts {
		if err := o(ctx, b); err != nil {
			return nil, err
		}
	}
	if err := a.openQueue(cfg, logger); err != nil {
		return nil, err
	}
	if err := a.buildPipelines(ctx); err != nil {
		return nil, err
	}
	if err := a.buildWeb(); err != nil {
		return nil, err
	}
	return a, nil
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

// Start starts the alerter (before the task servers, whose dead letters
// it announces), hands the outbox to the broker and starts the task
// servers and the loops, then serves HTTP on cfg.HTTPAddr.
func (a *App) Start(ctx context.Context) error {
	ctx, a.cancel = context.WithCancel(ctx)
	if err := a.alerts.Start(ctx); err != nil {
		return err
	}
	if err := a.watch.Start(ctx); err != nil {
		a.alerts.Stop()
		return err
	}
	if err := a.queue.Start(ctx); err != nil {
		a.watch.Stop()
		a.alerts.Stop()
		return err
	}
	for i, l := range a.loops {
		if err := l.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				a.loops[j].Stop()
			}
			a.queue.Stop()
			a.watch.Stop()
			a.alerts.Stop()
			return err
		}
	}
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		a.stopLoops()
		a.queue.Stop()
		a.watch.Stop()
		a.alerts.Stop()
		return fmt.Errorf("listen on --http-addr %s: %w", a.cfg.HTTPAddr, err)
	}
	a.listener = ln
	a.server = &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	go func() {
		defer close(a.done)
		if err := a.server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("http server", "err", err)
		}
	}()
	return nil
}

// Addr is the address HTTP listens on (useful with port 0).
func (a *App) Addr() string { return a.listener.Addr().String() }

func (a *App) stopLoops() {
	for i := len(a.loops) - 1; i >= 0; i-- {
		a.loops[i].Stop()
	}
}

// Stop shuts down senders before receivers: HTTP, loops, task servers
// (bounded by the shutdown timeout), the alerter (posting what the
// shutdown dead-lettered), then the broker and bbolt.
func (a *App) Stop(ctx context.Context) error {
	var errs []error
	if a.server != nil {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := a.server.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		cancel()
		<-a.done
	}
	a.stopLoops()
	a.queue.Stop()
	a.watch.Stop()
	a.alerts.Stop()
	if a.cancel != nil {
		a.cancel()
	}
	errs = append(errs, a.Close())
	return errors.Join(errs...)
}

// Close closes what New opened; Stop calls it, and so must whoever calls
// New and then fails to Start.
func (a *App) Close() error {
	var errs []error
	for i := len(a.closed) - 1; i >= 0; i-- {
		if err := a.closed[i](); err != nil {
			errs = append(errs, err)
		}
	}
	a.closed = nil
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

// Config is the configuration the app runs with (options may have
// changed it).
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

// Loops are the app's loops, in start order.
func (a *App) Loops() []Loop { return append([]Loop(nil), a.loops...) }
