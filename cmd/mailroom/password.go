package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"mailroom/internal/app"
	"mailroom/store"
	"mailroom/web"
)

// resetPasswordCommand gives the admin a new generated password (the
// service stopped: it opens the database): for a first start's password
// that was missed, or a forgotten one. Every admin session ends.
func resetPasswordCommand(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	dataDirDef, dataDirEnv, err := app.Setting("data-dir", getenv) // serve's default and variable
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("reset-password", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir := fs.String("data-dir", dataDirDef, "data dir of the database ("+dataDirEnv+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &usageError{err}
	}
	var opts store.Options
	if v := getenv("MAILROOM_SECRET_KEY"); v != "" {
		key, err := store.ParseKey(v)
		if err != nil {
			return &usageError{fmt.Errorf("MAILROOM_SECRET_KEY: %w", err)}
		}
		opts.SecretKey = key
	}
	db, err := store.Open(*dataDir, opts)
	if err != nil {
		return err
	}
	password, err := web.ResetAdminPassword(db)
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "new admin password for %s: %s\nevery admin session is ended; sign in with it at /admin/login\n", *dataDir, password)
	if getenv("MAILROOM_ADMIN_PASSWORD") != "" {
		fmt.Fprintln(stderr, "note: MAILROOM_ADMIN_PASSWORD is set in this environment; while it is set, serve replaces this password with it at start")
	}
	return nil
}
