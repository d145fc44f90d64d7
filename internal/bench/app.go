package bench

import (
	"context"
	"io"
	"log/slog"
	"os"

	"mailroom/internal/app"
	"mailroom/queue/broker"
)

// setup is what a scenario changes before app.New: serve's settings
// (Config) and the app's Deps, where what no operator sets lives (task
// types of the bench's own, the Gmail quota off, a Google transport). A
// note names both (settingsDiff).
type setup struct {
	*app.Config
	deps app.Deps
}

// startApp builds and starts the appliance through app.New, as serve
// does: serve's defaults (the environment ignored), a fresh data dir, a
// free loopback port, no logs, then the scenario's overrides (mutate),
// which its note names. stop stops it and removes the data dir.
func startApp(ctx context.Context, mutate func(*setup)) (a *app.App, stop func(), err error) {
	cfg, err := app.ParseConfig("bench", nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		return nil, nil, err
	}
	dir, err := os.MkdirTemp("", "mailroom-bench-")
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	cfg.DataDir, cfg.HTTPAddr, cfg.LogLevel = dir, "127.0.0.1:0", "error"
	s := &setup{Config: cfg, deps: app.Deps{Logger: slog.New(slog.DiscardHandler)}}
	if mutate != nil {
		mutate(s)
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	a, err = app.New(ctx, cfg, s.deps)
	if err != nil {
		return nil, nil, err
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, func() { _ = a.Stop(context.Background()); os.RemoveAll(dir) }, nil
}

// flushRedis empties the Redis at url, so a run starts from nothing.
func flushRedis(ctx context.Context, url string) error {
	b, err := broker.Open(ctx, broker.Config{RedisURL: url})
	if err != nil {
		return err
	}
	defer b.Close()
	return b.Client().FlushDB(ctx).Err()
}
