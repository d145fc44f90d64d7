package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"mailroom/internal/app"
)

// Set by the linker (make build).
var (
	version = "dev"
	commit  = "unknown"
)

// usageError is a bad command line or configuration: exit code 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var u *usageError
	if errors.As(err, &u) {
		return 2
	}
	return 1
}

const usage = `mailroom — a self-hosted background-job appliance for mail and forms

Usage:
  mailroom serve [flags]          run the appliance (--demo: with a simulated Google)
  mailroom bench [SCENARIO...]    run benchmark scenarios and print a table
  mailroom backup --out FILE      write a consistent copy of the database
  mailroom compact                give the data file's free space back (service stopped)
  mailroom export-user --user ID --out FILE
                                  move a user out (service stopped); --force drops its undelivered webhook events
  mailroom import-user FILE       move that user in (service stopped; same MAILROOM_SECRET_KEY as the source)
  mailroom reset-password         print a new admin password, ending every session (service stopped)
  mailroom version                print version, commit and Go version

Run "mailroom serve -h" for the configuration flags and their MAILROOM_* twins.
`

// run is the whole program; main only maps its error to an exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return &usageError{errors.New("no command given")}
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "serve":
		cfg, err := app.ParseConfig("serve", rest, getenv, stderr)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return &usageError{err}
		}
		// The reason printed on exit never holds a secret.
		return cfg.Redactor().Error(serve(ctx, cfg, stdout, stderr))
	case "bench":
		return benchCommand(ctx, rest, getenv, stdout, stderr)
	case "backup":
		return backupCommand(ctx, rest, getenv, stdout, stderr)
	case "compact":
		return compactCommand(ctx, rest, getenv, stdout, stderr)
	case "export-user":
		return exportUserCommand(ctx, rest, getenv, stdout, stderr)
	case "import-user":
		return importUserCommand(ctx, rest, getenv, stdout, stderr)
	case "reset-password":
		return resetPasswordCommand(ctx, rest, getenv, stdout, stderr)
	case "version", "--version", "-v":
		fmt.Fprintf(stdout, "mailroom %s (commit %s, %s)\n", version, commit, goVersion())
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return &usageError{fmt.Errorf("unknown command %q", cmd)}
	}
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.GoVersion != "" {
		return bi.GoVersion
	}
	return runtime.Version()
}
