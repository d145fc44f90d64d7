package app

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/store"
)

// ErrMoveBusy: the user still has work in flight on the source.
var ErrMoveBusy = errors.New("the user still has work in flight here")

// MoveStore opens the store of a stopped mailroom for export-user and
// import-user, with serve's secret key (empty: the key file of the data
// dir). A running mailroom holds the file: the open fails at once with
// "stop the service first".
func MoveStore(dataDir, secretKey string) (*store.DB, error) {
	var opts store.Options
	if secretKey != "" {
		key, err := store.ParseKey(secretKey)
		if err != nil {
			return nil, fmt.Errorf("MAILROOM_SECRET_KEY: %w", err)
		}
		opts.SecretKey = key
	}
	opts.Timeout = time.Second
	db, err := store.Open(dataDir, opts)
	if errors.Is(err, store.ErrLocked) {
		return nil, fmt.Errorf("a mailroom is running on %s: stop the service first (%w)", dataDir, err)
	}
	return db, err
}

// movedTypes are the task types import records anew (MoveFollowUps), so an
// export does not wait for them.
var movedTypes = map[string]bool{
	gmail.TypeSync: true, gmail.TypeFullSync: true, gmail.TypeWatchRenew: true,
	sheets.TypeFlush: true,
}

// ExportUser writes the user's records to out (gzip'd JSON, mode 0600) and,
// in the same transaction, marks the user moved here (MoveRetire), so that
// this mailroom, started again, neither writes the moved rows nor delivers
// the user's events. Without force it refuses while the user has work in
// flight (ErrMoveBusy, listing it); with force that work is dropped.
func ExportUser(db *store.DB, userID, out string, force bool) (*store.Move, error) {
	if _, err := os.Stat(out); err == nil {
		return nil, fmt.Errorf("export-user: %s exists; give a new file", out)
	}
	var m *store.Move
	err := db.Update(func(tx *store.Tx) error {
		busy, err := tx.MoveBusy(userID, func(typ string) bool { return movedTypes[typ] })
		if err != nil {
			return err
		}
		if len(busy) > 0 && !force {
			return fmt.Errorf("%w: %s; start the service and let it finish, or pass --force to drop it", ErrMoveBusy, strings.Join(busy, "; "))
		}
		if m, err = tx.MoveExport(userID); err != nil {
			return err
		}
		if err := writeMove(out, m); err != nil {
			return err
		}
		return tx.MoveRetire(userID, time.Now())
	})
	if err != nil {
		return nil, fmt.Errorf("export-user: %w", err)
	}
	return m, nil
}

// writeMove writes the file and syncs it before the export commits.
func writeMove(out string, m *store.Move) error {
	tmp := out + ".partial"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	zw := gzip.NewWriter(f)
	err = json.NewEncoder(zw).Encode(m)
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return os.Rename(tmp, out)
}

// ReadMove reads an export file.
func ReadMove(r io.Reader) (*store.Move, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("import-user: not an export-user file: %w", err)
	}
	var m store.Move
	if err := json.NewDecoder(zr).Decode(&m); err != nil {
		return nil, fmt.Errorf("import-user: not an export-user file: %w", err)
	}
	return &m, nil
}

// ReadMoveFile reads an export file by name.
func ReadMoveFile(name string) (*store.Move, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("import-user: %w", err)
	}
	defer f.Close()
	return ReadMove(f)
}

// ImportUser writes the moved user in one transaction with its follow-up
// tasks (MoveFollowUps), which run when this mailroom serves.
func ImportUser(db *store.DB, m *store.Move) (store.MoveImported, error) {
	var got store.MoveImported
	table, err := queue.NewTable(pipelineTasks(Defaults())...)
	if err != nil {
		return got, err
	}
	rec := queue.NewOffline(table)
	err = db.Update(func(tx *store.Tx) error {
		var err error
		if got, err = tx.MoveImport(m); err != nil {
			return err
		}
		return MoveFollowUps(tx, rec, got, time.Now())
	})
	if err != nil {
		return got, fmt.Errorf("import-user: %w", err)
	}
	return got, nil
}

// MoveFollowUps records what a moved user needs on its new mailroom: each
// account's watch renewed and its history sync from the watermark (no full
// sync unless one was under way), the flush of each form with rows
// waiting, and the writer of each account with label changes waiting.
// Webhooks need nothing: they take this mailroom's events as they come.
func MoveFollowUps(tx *store.Tx, rec *queue.Offline, got store.MoveImported, now time.Time) error {
	for _, a := range got.Accounts {
		if err := gmail.MovedIn(tx, rec, a); err != nil {
			return err
		}
	}
	for _, id := range got.Forms {
		if err := sheets.MovedIn(tx, rec, id, now); err != nil {
			return err
		}
	}
	for _, id := range got.LabelWrites {
		if err := rules.MovedIn(tx, rec, id, now); err != nil {
			return err
		}
	}
	return nil
}
