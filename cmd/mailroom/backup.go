package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	bolterrors "go.etcd.io/bbolt/errors"

	"mailroom/internal/app"
	"mailroom/store"
)

// backupCommand writes a consistent copy of the database. When no server
// holds the file it is read directly; while mailroom serves, the copy comes
// from the running server's GET /api/v1/backup (bbolt allows one process).
func backupCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	// Defaults and variables come from serve's settings.
	dataDirDef, dataDirEnv, err := app.Setting("data-dir", getenv)
	if err != nil {
		return err
	}
	httpAddr, httpAddrEnv, err := app.Setting("http-addr", getenv)
	if err != nil {
		return err
	}
	tokenDef, tokenEnv, err := app.Setting("api-token", getenv)
	if err != nil {
		return err
	}
	fs := flag.NewFlagSet("backup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "file to write the copy to (required)")
	dataDir := fs.String("data-dir", dataDirDef, "data dir of the database ("+dataDirEnv+")")
	addr := fs.String("url", "", "URL of the running server (default http:// + "+httpAddrEnv+")")
	token := fs.String("token", tokenDef, "API token for the running server ("+tokenEnv+")")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return &usageError{err}
	}
	if *out == "" {
		return &usageError{errors.New("backup: --out FILE is required")}
	}
	tmp := *out + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer os.Remove(tmp)
	n, err := store.BackupFile(filepath.Join(*dataDir, store.FileName), f)
	via := "file"
	if errors.Is(err, bolterrors.ErrTimeout) {
		// A server holds the lock: ask it.
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			f.Close()
			return serr
		}
		if terr := f.Truncate(0); terr != nil {
			f.Close()
			return terr
		}
		base := *addr
		if base == "" {
			base = "http://" + httpAddr
		}
		via = base
		n, err = backupFromServer(ctx, base, *token, f)
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("backup: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := store.Verify(tmp); err != nil {
		return fmt.Errorf("backup: the copy failed its check: %w", err)
	}
	if err := os.Rename(tmp, *out); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "backup: wrote %d bytes to %s (from %s), checked\n", n, *out, via)
	return nil
}

func backupFromServer(ctx context.Context, base, token string, w io.Writer) (int64, error) {
	if token == "" {
		return 0, errors.New("the database is in use by a running server; pass --token (or MAILROOM_API_TOKEN) to copy it through the API")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/backup", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return 0, fmt.Errorf("server answered %s: %s", resp.Status, msg)
	}
	return io.Copy(w, resp.Body)
}
