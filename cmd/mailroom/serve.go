package main

import (
	"context"
	"fmt"
	"io"

	"mailroom/internal/app"
	"mailroom/internal/demo"
)

// serve runs the appliance until ctx ends.
func serve(ctx context.Context, cfg *app.Config, stdout, stderr io.Writer) error {
	logger := app.NewLogger(cfg, stderr)
	app.TuneGC(cfg.GOGC, int64(cfg.MemoryLimit))
	deps := app.Deps{Logger: logger}
	if cfg.Demo {
		// The demo's changes to the config and its parts, before New.
		var err error
		if deps, err = demo.Prepare(ctx, cfg, logger); err != nil {
			return err
		}
	}
	a, err := app.New(ctx, cfg, deps)
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		return err
	}
	logger.Info("mailroom is running", "version", version, "http", a.Addr(), "data_dir", cfg.DataDir,
		"broker", map[bool]string{true: "embedded", false: "external redis"}[a.EmbeddedBroker()], "demo", cfg.Demo)
	fmt.Fprintf(stdout, "mailroom %s is running: open %s/admin\n", version, cfg.BaseURL())
	if p := a.GeneratedPassword(); p != "" {
		fmt.Fprintf(stdout, "  log in with the generated admin password: %s\n  (shown once; set MAILROOM_ADMIN_PASSWORD to choose your own)\n", p)
	}
	<-ctx.Done()
	logger.Info("shutting down (a second signal forces exit)")
	if err := a.Stop(context.Background()); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped cleanly")
	return nil
}
