package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"mailroom/internal/app"
)

// moveHelp is what a webhook receiver sees across a move (also in the
// docs/operations.md).
const moveHelp = `Webhooks: the user's events delivered by the source are not sent again; the
export waits until none is left undelivered (--force drops them). On the
target the webhooks take the target's events from the import on, with new
event ids.`

// exportUserCommand writes one user to a file and marks it moved here (the
// service stopped).
func exportUserCommand(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	dataDir, secretKey, fs, err := moveFlags("export-user", getenv, stderr)
	if err != nil {
		return err
	}
	user := fs.String("user", "", "id of the user to move (required)")
	out := fs.String("out", "", "file to write, mode 0600 (required)")
	force := fs.Bool("force", false, "export although the user has work in flight here (undelivered webhook events, unfinished tasks), dropping it")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: mailroom export-user --user ID --out FILE [--force]\n\nMoves one user out of this mailroom (service stopped) for import-user on another\nmailroom of the fleet, which must use the same MAILROOM_SECRET_KEY.\n%s\n\n", moveHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &usageError{err}
	}
	if *user == "" || *out == "" {
		return &usageError{errors.New("export-user: --user ID and --out FILE are required")}
	}
	db, err := app.MoveStore(*dataDir, *secretKey)
	if err != nil {
		return fmt.Errorf("export-user: %w", err)
	}
	defer db.Close()
	m, err := app.ExportUser(db, *user, *out, *force)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "export-user: wrote user %s (%s) to %s; it is marked moved here: import it with mailroom import-user on the target\n", m.UserID, m.Email, *out)
	return nil
}

// importUserCommand writes a user exported by another mailroom (the
// service stopped).
func importUserCommand(_ context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	dataDir, secretKey, fs, err := moveFlags("import-user", getenv, stderr)
	if err != nil {
		return err
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: mailroom import-user FILE\n\nImports a user made by export-user (service stopped). When the service starts,\neach account resumes from its watermark (no new full sync) and waiting form\nrows are written once.\n%s\n\n", moveHelp)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &usageError{err}
	}
	if fs.NArg() != 1 {
		return &usageError{errors.New("import-user: give one FILE")}
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return fmt.Errorf("import-user: %w", err)
	}
	defer f.Close()
	m, err := app.ReadMove(f)
	if err != nil {
		return err
	}
	db, err := app.MoveStore(*dataDir, *secretKey)
	if err != nil {
		return fmt.Errorf("import-user: %w", err)
	}
	defer db.Close()
	got, err := app.ImportUser(db, m)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "import-user: user %s (%s) imported with %d account(s), %d form(s) with rows waiting; start the service to resume them\n",
		got.User.ID, got.User.Email, len(got.Accounts), len(got.Forms))
	return nil
}

// moveFlags are the flags both commands share: serve's data dir and key.
func moveFlags(name string, getenv func(string) string, stderr io.Writer) (dataDir, secretKey *string, fs *flag.FlagSet, err error) {
	dataDirDef, dataDirEnv, err := app.Setting("data-dir", getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	key, _, err := app.Setting("secret-key", getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	fs = flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dataDir = fs.String("data-dir", dataDirDef, "data dir of the database ("+dataDirEnv+")")
	return dataDir, &key, fs, nil
}
