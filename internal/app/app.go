package main

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
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/store"
	"mailroom/web"
)

// loop is a background service with a lifecycle (tickers, relays, the
// traffic generator). The app starts loops in order and stops them in
// reverse.
type loop interface {
	Start(ctx context.Context) error
	Stop()
}

// app is the whole appliance, built by newApp for serve and for the
// end-to-end tests alike.
type app struct {
	cfg      *config
	log      *slog.Logger
	registry *prometheus.Registry

	db     *store.DB
	broker *broker.Broker
	table  *queue.Table
	queue  *queue.Queue
	alerts *queue.Alerter

	handler    http.Handler
	server     *http.Server
	listener   net.Listener
	loops      []loop
	extensions []web.Extension // the pipelines' routes and pages
	debug      *debugTasks
	gmail      *gmail.Pipeline  // set by wireGmail
	sheets     *sheets.Pipeline // set by wireSheets
	rules      *rules.Pipeline  // set by wireRules

	// generatedPassword is set when the admin password was made on this start.
	generatedPassword string

	cancel context.CancelFunc
	done   chan struct{}
	closed []func() error // reverse-order closers of what newApp opened
}

// newApp opens the store and the broker and builds the task table, the
// pipelines and the web handler. Nothing runs until start.
func newApp(ctx context.Context, cfg *config, logger *slog.Logger) (_ *app, err error) {
	a := &app{cfg: cfg, log: logger, registry: prometheus.NewRegistry(), done: make(chan struct{})}
	defer func() {
		if err != nil {
			a.closeAll()
		}
	}()
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	var key []byte
	if cfg.SecretKey != "" {
		key, _ = store.ParseKey(cfg.SecretKey) // validated
	}
	a.db, err = store.Open(cfg.DataDir, store.Options{SecretKey: key})
	if err != nil {
		return nil, err
	}
	a.closed = append(a.closed, a.db.Close)

	a.broker, err = broker.Open(ctx, broker.Config{
		RedisURL: cfg.RedisURL, ExposeAddr: cfg.BrokerAddr, ExposePassword: cfg.BrokerPassword, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	a.closed = append(a.closed, a.broker.Close)

	a.alerts = queue.NewAlerter(queue.AlertConfig{WebhookURL: cfg.AlertWebhookURL, PublicURL: cfg.publicURL(), Logger: logger})
	a.table = queue.NewTable(queue.TableConfig{
		MaxRetries:              cfg.MaxRetries,
		ConcurrencyMessageAdded: cfg.ConcurrencyMessageAdded,
		ConcurrencyState:        cfg.ConcurrencyState,
		Debug:                   cfg.DebugTasks,
	})
	if err := a.buildPipelines(ctx); err != nil {
		return nil, err
	}
	a.queue, err = queue.New(queue.Config{
		RelayCap:             cfg.RelayCap,
		RetryInitial:         cfg.RetryInitial,
		RetryMultiplier:      cfg.RetryMultiplier,
		RetryMax:             cfg.RetryMax,
		PollInterval:         cfg.TaskPollInterval,
		DelayedCheckInterval: cfg.DelayedCheckInterval,
		ShutdownTimeout:      cfg.ShutdownTimeout,
		Alerts:               a.alerts,
		Logger:               logger,
		Registerer:           a.registry,
	}, a.db, a.broker.RedisConnOpt(), a.table)
	if err != nil {
		return nil, err
	}
	if a.debug != nil {
		a.debug.q, a.debug.db = a.queue, a.db
	}
	if err := a.buildWeb(); err != nil {
		return nil, err
	}
	return a, nil
}

// ready reports whether store, broker and task servers are up.
func (a *app) ready(ctx context.Context) error {
	if err := a.db.Ping(); err != nil {
		return err
	}
	if err := a.broker.Ping(ctx); err != nil {
		return err
	}
	if !a.queue.Ready() {
		return errors.New("task servers are not running")
	}
	return nil
}

// start hands the outbox to the broker, starts the task servers and the
// loops, then serves HTTP on cfg.HTTPAddr.
func (a *app) start(ctx context.Context) error {
	ctx, a.cancel = context.WithCancel(ctx)
	if err := a.queue.Start(ctx); err != nil {
		return err
	}
	go a.alerts.Run(ctx)
	for i, l := range a.loops {
		if err := l.Start(ctx); err != nil {
			for j := i - 1; j >= 0; j-- {
				a.loops[j].Stop()
			}
			a.queue.Stop()
			return err
		}
	}
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		a.stopLoops()
		a.queue.Stop()
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

// addr is the address HTTP listens on (useful with port 0).
func (a *app) addr() string { return a.listener.Addr().String() }

func (a *app) stopLoops() {
	for i := len(a.loops) - 1; i >= 0; i-- {
		a.loops[i].Stop()
	}
}

// stop shuts down senders before receivers: HTTP, loops, task servers
// (bounded by the shutdown timeout), then the broker and bbolt.
func (a *app) stop(ctx context.Context) error {
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
	if a.cancel != nil {
		a.cancel()
	}
	errs = append(errs, a.closeAll())
	return errors.Join(errs...)
}

func (a *app) closeAll() error {
	var errs []error
	for i := len(a.closed) - 1; i >= 0; i-- {
		if err := a.closed[i](); err != nil {
			errs = append(errs, err)
		}
	}
	a.closed = nil
	return errors.Join(errs...)
}

func newLogger(cfg *config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the appliance until ctx ends.
func serve(ctx context.Context, cfg *config, stdout, stderr io.Writer) error {
	logger := newLogger(cfg, stderr)
	tuneGC(cfg.GOGC, int64(cfg.MemoryLimit))
	a, err := newApp(ctx, cfg, logger)
	if err != nil {
		return err
	}
	if err := a.start(ctx); err != nil {
		a.closeAll()
		return err
	}
	logger.Info("mailroom is running", "version", version, "http", a.addr(), "data_dir", cfg.DataDir,
		"broker", map[bool]string{true: "embedded", false: "external redis"}[a.broker.Embedded()], "demo", cfg.Demo)
	fmt.Fprintf(stdout, "mailroom %s is running: open %s/admin\n", version, cfg.publicURL())
	if a.generatedPassword != "" {
		fmt.Fprintf(stdout, "  log in with the generated admin password: %s\n  (shown once; set MAILROOM_ADMIN_PASSWORD to choose your own)\n", a.generatedPassword)
	}
	<-ctx.Done()
	logger.Info("shutting down (a second signal forces exit)")
	if err := a.stop(context.Background()); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped cleanly")
	return nil
}
