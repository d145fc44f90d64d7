package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"mailroom/internal/app"
	"mailroom/store"
)

// compactCommand rewrites the data file without its free space (the
// service stopped): bbolt never shrinks its file by itself.
func compactCommand(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	dataDirDef, dataDirEnv, err := app.Setting("data-dir", getenv) // serve's default and variable
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("compact", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", dataDirDef, "data dir of the database ("+dataDirEnv+")")
	keep := fs.Bool("keep-backup", false, "keep the old file as mailroom.db.bak")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &usageError{err}
	}
	start := time.Now()
	res, err := store.Compact(*dataDir, 2*time.Second, *keep)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "compacted %s in %s: %s → %s\n", *dataDir, time.Since(start).Round(time.Millisecond), mib(res.Before), mib(res.After))
	if res.Backup != "" {
		fmt.Fprintf(stdout, "the old file is kept as %s\n", res.Backup)
	}
	return nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
