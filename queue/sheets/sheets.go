// Package sheets is the Google Sheets pipeline: forms, submissions intake,
// one buffer of submission ids per sheet, the flush policy, the per-account
// write quota and the flush handler that writes each row to its sheet
// exactly once and in order.
//
// The flow (DESIGN.md, story 3): a submission is validated, then in one
// bbolt transaction it is stored, its id appended to its form's buffer, and
// a sheets:flush for that form put in the outbox (one per form, by key): at
// its first waiting row + FlushDelay, or now when Threshold rows wait. The
// broker only ever holds that one task per sheet, never submissions. The
// flush waits for the account's write quota, writes up to Threshold rows
// in one values.update, records what it wrote and schedules the next flush
// if rows remain. See flush.go for why a row cannot be lost or doubled.
package sheets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// Errors.
var (
	// ErrFormNotFound: no form has that id (404).
	ErrFormNotFound = errors.New("no such form")
	// ErrSheetTaken: another form already writes that sheet (409).
	ErrSheetTaken = errors.New("another form already writes this sheet")
	// ErrRowsWaiting: a form to delete still has rows to write (409); see
	// WaitingError.
	ErrRowsWaiting = errors.New("rows still wait to be written")
	// ErrGoogleUnavailable: Google did not answer usefully (503).
	ErrGoogleUnavailable = errors.New("Google Sheets did not answer")
	// ErrQuota: the account's or the project's Sheets quota (of reads or
	// of writes) is used up for now.
	ErrQuota = errors.New("the Sheets quota is used up for now")
	// errGridChanged: a write found its sheet's grid smaller than known;
	// the next run reads the grid and grows it.
	errGridChanged = errors.New("the sheet's grid is smaller than mailroom knew")
	// errNotDue: the flush ran before its time (asynq schedules in whole
	// seconds and may run a task up to a second early).
	errNotDue = errors.New("flush not due yet")
)

// Limits of a form's definition.
const (
	MaxColumns    = 200
	maxColumnName = 200
	maxSheetName  = 100
)

// SheetsClient is one Google account's Sheets, as the pipeline uses it
// (google.Sheets).
type SheetsClient interface {
	Tabs(ctx context.Context, spreadsheetID string) ([]google.Tab, error)
	ReadRange(ctx context.Context, spreadsheetID, a1 string) ([][]string, error)
	WriteRange(ctx context.Context, spreadsheetID, a1 string, rows [][]string) error
	Grow(ctx context.Context, spreadsheetID string, sheetID int64, rows, cols int) error
}

var _ SheetsClient = (*google.Sheets)(nil)

// Clients gives the Sheets client of a connected Google account. An
// unknown account is an error wrapping store.ErrNotFound; a revoked one
// one wrapping google.ErrRevoked.
type Clients interface {
	Sheets(ctx context.Context, accountID string) (SheetsClient, error)
}

// enqueuer records tasks in the caller's transaction (queue.Queue).
type enqueuer interface {
	Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (queue.Record, bool, error)
	Pending(tx *store.Tx, typ, key string) bool
}

// Defaults of Config, which serve's flag table reads.
const (
	DefaultFlushDelay             = 10 * time.Second
	DefaultThreshold              = 500
	DefaultWritesPerMinute        = 60
	DefaultReadsPerMinute         = 60
	DefaultProjectWritesPerMinute = 300
	DefaultProjectReadsPerMinute  = 300
	DefaultQuotaWindow            = time.Minute
	DefaultCallTimeout            = 30 * time.Second
	DefaultRecheckMax             = 10 * time.Minute
	DefaultMaxWaiting             = 10000
	// DefaultBrokerTick is serve's MAILROOM_DELAYED_CHECK_INTERVAL.
	DefaultBrokerTick = queue.DefaultDelayedCheckInterval
)

// Defaults of the submission limits (see Config).
const (
	DefaultSubmitsPerForm = 5000
	DefaultSubmitsPerUser = 20000
	DefaultSubmitWindow   = time.Minute
	// MinDefaultUserBytes and MaxDefaultUserBytes bound DefaultUserBytes.
	MinDefaultUserBytes = 64 << 20
	MaxDefaultUserBytes = 4 << 30
)

// DefaultUserBytes is MaxUserBytes sized from the free bytes of the data
// dir's disk at start: a tenth of them, at least MinDefaultUserBytes and at
// most MaxDefaultUserBytes, so that no one user can fill the disk.
func DefaultUserBytes(free uint64) int64 {
	return int64(min(max(free/10, MinDefaultUserBytes), MaxDefaultUserBytes))
}

// Config tunes the pipeline. Zero values take the defaults named.
type Config struct {
	// FlushDelay: a sheet's buffer is flushed at most this long after its
	// first waiting row. Default 10s (MAILROOM_SHEETS_FLUSH_DELAY).
	FlushDelay time.Duration
	// Threshold: a buffer this full is flushed at once; also the most rows
	// one write carries. Default 500 (MAILROOM_SHEETS_FLUSH_THRESHOLD).
	Threshold int
	// WritesPerMinute: Sheets write calls per QuotaWindow per Google
	// account. Default 60 (MAILROOM_SHEETS_WRITES_PER_MINUTE).
	WritesPerMinute int
	// ReadsPerMinute: Sheets read calls per QuotaWindow per Google
	// account. Default 60 (MAILROOM_SHEETS_READS_PER_MINUTE).
	ReadsPerMinute int
	// ProjectWritesPerMinute and ProjectReadsPerMinute: Sheets write and
	// read calls per QuotaWindow of all accounts together. Default 300
	// each (MAILROOM_SHEETS_PROJECT_WRITES_PER_MINUTE,
	// MAILROOM_SHEETS_PROJECT_READS_PER_MINUTE).
	ProjectWritesPerMinute, ProjectReadsPerMinute int
	// QuotaWindow is the "minute" of the quotas. Default one minute;
	// tests compress it.
	QuotaWindow time.Duration
	// Retention: a submission whose row is in its sheet is deleted this
	// long after it was submitted; zero keeps them for ever
	// (MAILROOM_SHEETS_RETENTION).
	Retention time.Duration
	// CallTimeout bounds one Sheets call. Default 30s; a write call is
	// also bounded by 9/10 of QuotaWindow (see Quota).
	CallTimeout time.Duration
	// RecheckMax is the longest wait between two checks of a form in
	// error (its sheet gone, unshared, missing its tab or full); the
	// first comes after RecheckMax/20, doubling. Default 10m
	// (MAILROOM_SHEETS_RECHECK_MAX).
	RecheckMax time.Duration
	// GrowStep is how many rows beyond a write's last row a grid grows
	// when the write needs it to (one grow serves many writes). Default
	// max(1000, 4 x Threshold).
	GrowStep int
	// SubmitsPerForm and SubmitsPerUser: the submissions one form, and
	// all the forms of one user together, accept at once (a burst); the
	// allowance refills at that many per SubmitWindow, and past it
	// submissions are refused (429). Defaults DefaultSubmitsPerForm and
	// DefaultSubmitsPerUser (MAILROOM_SUBMISSIONS_PER_FORM,
	// MAILROOM_SUBMISSIONS_PER_USER).
	SubmitsPerForm, SubmitsPerUser int
	// SubmitWindow is the time in which an allowance refills from empty.
	// Default DefaultSubmitWindow (MAILROOM_SUBMISSIONS_WINDOW).
	SubmitWindow time.Duration
	// MaxUserBytes bounds the bytes the submissions of one user's forms
	// take in the store, waiting or written and kept; past it the user's
	// forms refuse submissions (429) until pruning or a deleted form frees
	// room. Default MaxDefaultUserBytes; serve sizes it from the disk
	// (DefaultUserBytes, MAILROOM_SUBMISSIONS_USER_BYTES).
	MaxUserBytes int64
	// MaxWaiting is how many rows may wait to be written for one form; a
	// form with that many (one in error, whose rows wait for its sheet to
	// be fixed) refuses new submissions (409) until rows are written.
	// Default 10000 (MAILROOM_SHEETS_MAX_WAITING).
	MaxWaiting int
	// BrokerTick is how often the broker makes scheduled and retrying
	// tasks ready (MAILROOM_DELAYED_CHECK_INTERVAL). The broker keeps a
	// task's time in whole seconds, cut down, and looks every BrokerTick,
	// so a task handed to it runs up to a second early or BrokerTick late.
	// A flush is therefore handed to it BrokerTick before it is due and
	// waits in its task for the rest, and a quota refusal that lifts
	// within a second and a tick is waited in the task too: through the
	// broker it would come back up to a second and a tick late, and a
	// quiet form with a short flush delay would wait twice its delay.
	// Default 1s (serve's).
	BrokerTick time.Duration
	// SpentUntil, when set, says until when a quota window kept in the
	// broker counts as fully spent because the broker lost its log
	// (queue.Watch.SpentUntil); nil: the broker's log is trusted.
	SpentUntil func(window time.Duration) time.Time
	// Logger; nil: discard.
	Logger *slog.Logger
	// Registerer receives the metrics; nil: a private registry.
	Registerer prometheus.Registerer
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

func (c *Config) defaults() {
	if c.FlushDelay <= 0 {
		c.FlushDelay = DefaultFlushDelay
	}
	if c.Threshold <= 0 {
		c.Threshold = DefaultThreshold
	}
	if c.WritesPerMinute <= 0 {
		c.WritesPerMinute = DefaultWritesPerMinute
	}
	if c.ReadsPerMinute <= 0 {
		c.ReadsPerMinute = DefaultReadsPerMinute
	}
	if c.ProjectWritesPerMinute <= 0 {
		c.ProjectWritesPerMinute = DefaultProjectWritesPerMinute
	}
	if c.ProjectReadsPerMinute <= 0 {
		c.ProjectReadsPerMinute = DefaultProjectReadsPerMinute
	}
	if c.QuotaWindow <= 0 {
		c.QuotaWindow = DefaultQuotaWindow
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = DefaultCallTimeout
	}
	if c.BrokerTick <= 0 {
		c.BrokerTick = DefaultBrokerTick
	}
	if c.RecheckMax <= 0 {
		c.RecheckMax = DefaultRecheckMax
	}
	if c.SubmitsPerForm <= 0 {
		c.SubmitsPerForm = DefaultSubmitsPerForm
	}
	if c.SubmitsPerUser <= 0 {
		c.SubmitsPerUser = DefaultSubmitsPerUser
	}
	if c.SubmitWindow <= 0 {
		c.SubmitWindow = DefaultSubmitWindow
	}
	if c.MaxUserBytes <= 0 {
		c.MaxUserBytes = MaxDefaultUserBytes
	}
	if c.MaxWaiting <= 0 {
		c.MaxWaiting = DefaultMaxWaiting
	}
	if c.GrowStep <= 0 {
		c.GrowStep = max(1000, 4*c.Threshold)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Deps are the pipeline's collaborators.
type Deps struct {
	DB *store.DB
	// Queue records flush tasks (the queue's enqueue side). Required.
	Queue enqueuer
	// Broker holds the write quota (broker.Broker.Client()), or a fleet's
	// Redis (the project's quotas shared by its mailrooms).
	Broker scripter
	// Fallback, with a fleet's Redis as Broker, holds this mailroom's
	// share of the project's quotas while that Redis does not answer
	// (this mailroom's broker); Share is how many mailrooms share the
	// project. See QuotaConfig.
	Fallback scripter
	Share    func() int
	// Clients gives each account's Sheets client.
	Clients Clients
	// Alerts announces forms that enter the error state; nil: none.
	Alerts Alerts
}

// Pipeline is the Sheets pipeline.
type Pipeline struct {
	loops   []lifecycle.Service // Services
	cfg     Config
	db      *store.DB
	clients Clients
	alerts  Alerts
	quota   *Quota // writes
	reads   *Quota
	log     *slog.Logger
	metrics *metrics

	queue enqueuer

	forms sync.Map // id -> store.Form (forms never change)

	submits *submitLimiter

	// afterWrite, when set (tests), runs after a successful write call and
	// before its bookkeeping; an error stands for a crash in between.
	afterWrite func() error
	// afterGrow, when set (tests), runs after a grow is recorded and
	// before the write; an error stands for a crash in between.
	afterGrow func() error
}

// FleetDown reports whether the Sheets quotas are kept in this mailroom's
// broker, within its share of the project's, because the fleet's Redis
// does not answer (false without a fleet).
func (p *Pipeline) FleetDown() bool { return p.quota.FleetDown() || p.reads.FleetDown() }

// New builds the pipeline.
func New(cfg Config, deps Deps) (*Pipeline, error) {
	cfg.defaults()
	if deps.DB == nil || deps.Queue == nil || deps.Broker == nil || deps.Clients == nil {
		return nil, errors.New("sheets: New needs a store, a queue, a broker and a Clients")
	}
	p := &Pipeline{
		cfg:     cfg,
		db:      deps.DB,
		clients: queueClients{deps.Clients},
		alerts:  deps.Alerts,
		queue:   deps.Queue,
		log:     cfg.Logger.With("component", "sheets"),
		submits: newSubmitLimiter(cfg.SubmitsPerForm, cfg.SubmitsPerUser, cfg.SubmitWindow),
		quota: NewQuota(QuotaConfig{Kind: "writes", Limit: cfg.WritesPerMinute, ProjectLimit: cfg.ProjectWritesPerMinute,
			Window: cfg.QuotaWindow, Now: cfg.Now, SpentUntil: cfg.SpentUntil,
			Fallback: deps.Fallback, Share: deps.Share, Logger: cfg.Logger}, deps.Broker),
		reads: NewQuota(QuotaConfig{Kind: "reads", Limit: cfg.ReadsPerMinute, ProjectLimit: cfg.ProjectReadsPerMinute,
			Window: cfg.QuotaWindow, Now: cfg.Now, SpentUntil: cfg.SpentUntil,
			Fallback: deps.Fallback, Share: deps.Share, Logger: cfg.Logger}, deps.Broker),
	}
	m, err := newMetrics(cfg.Registerer, p.bufferedGauge)
	if err != nil {
		return nil, fmt.Errorf("sheets: metrics: %w", err)
	}
	p.metrics = m
	if pruner := p.pruner(); pruner != nil {
		p.loops = []lifecycle.Service{pruner}
	}
	return p, nil
}

// Register gives the task table the pipeline's flush handler.
func (p *Pipeline) Register(t *queue.Table) error {
	return t.Handle(TypeFlush, p.HandleFlush)
}

// Services are the pipeline's loops: the pruner of written submissions,
// when Retention is set, made once by New: every call returns the same.
func (p *Pipeline) Services() []lifecycle.Service { return slices.Clone(p.loops) }

// Quota returns the write quota (per account and per project).
func (p *Pipeline) Quota() *Quota { return p.quota }

// ReadQuota returns the read quota (per account and per project).
func (p *Pipeline) ReadQuota() *Quota { return p.reads }

// Config returns the pipeline's settings, defaults applied.
func (p *Pipeline) Config() Config { return p.cfg }

func (p *Pipeline) bufferedGauge() float64 {
	var n int
	if err := p.db.View(func(tx *store.Tx) error {
		var err error
		n, err = tx.SheetsBuffered()
		return err
	}); err != nil {
		return 0
	}
	return float64(n)
}

// ---- forms ----

// FormInput is a form to create.
type FormInput struct {
	UserID        string `json:"userId"`
	AccountID     string `json:"accountId"`
	SpreadsheetID string `json:"spreadsheetId"`
	// Sheet is the sheet's title; empty: the spreadsheet's first sheet.
	Sheet   string   `json:"sheet"`
	Columns []string `json:"columns"`
}

// FormView is a form with its write bookkeeping, as the API shows it.
type FormView struct {
	ID            string `json:"id"`
	UserID        string `json:"userId"`
	AccountID     string `json:"accountId"`
	SpreadsheetID string `json:"spreadsheetId"`
	// Title is the spreadsheet's title, read when the form was made or
	// pointed at its sheet.
	Title       string    `json:"title,omitempty"`
	Sheet       string    `json:"sheet"`
	Columns     []string  `json:"columns"`
	StartRow    int       `json:"startRow"`
	NextRow     int       `json:"nextRow"`
	CreatedAt   time.Time `json:"createdAt"`
	Buffered    int       `json:"buffered"`
	RowsWritten int       `json:"rowsWritten"`
	WriteCalls  int       `json:"writeCalls"`
	// GridGrows counts the grows of the sheet's grid mailroom made for the
	// form (not in WriteCalls, though each spends a write of the quota).
	GridGrows int `json:"gridGrows"`
	// LastFlushAt is RFC 3339, or empty before the first write.
	LastFlushAt string `json:"lastFlushAt"`
	// State is "ok", or "error" while the sheet cannot take rows (gone,
	// unshared, missing its tab or full): rows wait, and LastError says
	// what happened and how to fix it.
	State     string `json:"state"`
	LastError string `json:"lastError"`
	// Quota is the use of the Sheets quotas by the form's account and by
	// the project, filled by WithQuota (GET answers); absent elsewhere and
	// when the broker cannot be asked.
	Quota *QuotaView `json:"quota,omitempty"`
}

func view(f store.Form, w store.SheetWrites) FormView {
	v := FormView{
		ID: f.ID, UserID: f.UserID, AccountID: f.AccountID, SpreadsheetID: f.SpreadsheetID, Title: f.Title, Sheet: f.Sheet,
		Columns: f.Columns, StartRow: f.StartRow, NextRow: w.NextRow, CreatedAt: f.CreatedAt,
		Buffered: w.Buffered, RowsWritten: w.RowsWritten, WriteCalls: w.Calls, GridGrows: w.Grows, LastError: w.LastError,
	}
	v.State = "ok"
	if w.State == store.FormError {
		v.State = "error"
	}
	if !w.LastFlushAt.IsZero() {
		v.LastFlushAt = w.LastFlushAt.UTC().Format(time.RFC3339)
	}
	return v
}

var spreadsheetIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// checkInput validates a form's definition alone (no store, no Google).
func checkInput(in *FormInput) error {
	in.UserID, in.AccountID = strings.TrimSpace(in.UserID), strings.TrimSpace(in.AccountID)
	in.SpreadsheetID = strings.TrimSpace(in.SpreadsheetID)
	switch {
	case in.UserID == "":
		return inputErr("userId", "required", "Name the user who owns the form.")
	case in.AccountID == "":
		return inputErr("accountId", "required", "Name the connected Google account that writes the sheet.")
	case in.SpreadsheetID == "":
		return inputErr("spreadsheetId", "required", "Give the spreadsheet's id (the long part of its URL after /d/).")
	case !spreadsheetIDPattern.MatchString(in.SpreadsheetID):
		return inputErr("spreadsheetId", "invalid", "A spreadsheet id holds only letters, digits, - and _ (the part of its URL after /d/).")
	case utf8.RuneCountInString(in.Sheet) > maxSheetName:
		return inputErr("sheet", "invalid", "A sheet name has at most %d characters.", maxSheetName)
	case strings.ContainsFunc(in.Sheet, unicode.IsControl):
		return inputErr("sheet", "invalid", "A sheet name cannot hold control characters.")
	case len(in.Columns) == 0:
		return inputErr("columns", "required", "List the form's columns, in the order they go in the sheet.")
	case len(in.Columns) > MaxColumns:
		return inputErr("columns", "invalid", "A form has at most %d columns.", MaxColumns)
	}
	seen := map[string]bool{}
	for i, c := range in.Columns {
		field := fmt.Sprintf("columns[%d]", i)
		switch {
		case strings.TrimSpace(c) == "":
			return inputErr(field, "invalid", "A column needs a name.")
		case c != strings.TrimSpace(c):
			return inputErr(field, "invalid", "A column name cannot start or end with spaces.")
		case utf8.RuneCountInString(c) > maxColumnName:
			return inputErr(field, "invalid", "A column name has at most %d characters.", maxColumnName)
		case seen[strings.ToLower(c)]:
			return inputErr(field, "invalid", "The column %q is listed twice.", c)
		}
		seen[strings.ToLower(c)] = true
	}
	return nil
}

// CreateForm checks a form's definition, its user and account, and that
// the spreadsheet and sheet exist and the account may open them
// (spreadsheets.get); it then finds the first row below any data in the
// form's columns, and stores the form. Its rows are written from there.
func (p *Pipeline) CreateForm(ctx context.Context, in FormInput) (FormView, error) {
	if err := checkInput(&in); err != nil {
		return FormView{}, err
	}
	var acct store.Account
	err := p.db.View(func(tx *store.Tx) error {
		if _, err := tx.UserGet(in.UserID); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return inputErr("userId", "not_found", "There is no user %q.", in.UserID)
			}
			return err
		}
		a, err := tx.AccountGet(in.AccountID)
		if errors.Is(err, store.ErrNotFound) {
			return inputErr("accountId", "not_found", "There is no connected Google account %q.", in.AccountID)
		} else if err != nil {
			return err
		}
		if a.UserID != in.UserID {
			return inputErr("accountId", "invalid", "The account %s belongs to another user.", a.Email)
		}
		if a.Status == store.AccountDisconnected {
			return inputErr("accountId", "invalid", "The account %s is disconnected; connect it again first.", a.Email)
		}
		acct = a
		return nil
	})
	if err != nil {
		return FormView{}, err
	}
	tab, startRow, err := p.checkSheet(ctx, acct, in)
	if err != nil {
		return FormView{}, err
	}
	sheet := tab.Title
	f := store.Form{
		UserID: in.UserID, AccountID: in.AccountID, SpreadsheetID: in.SpreadsheetID, Title: tab.Spreadsheet, Sheet: sheet,
		Columns: slices.Clone(in.Columns), StartRow: startRow, CreatedAt: p.cfg.Now().UTC(),
	}
	var w store.SheetWrites
	err = p.db.Update(func(tx *store.Tx) error {
		var err error
		if f, err = tx.FormCreate(f); err != nil {
			return err
		}
		if err := tx.SheetGrid(f.ID, tab.Rows, tab.Cols, false); err != nil {
			return err
		}
		w, err = tx.SheetWrites(f.ID)
		return err
	})
	if errors.Is(err, store.ErrConflict) {
		return FormView{}, fmt.Errorf("sheets: sheet %q of %s: %w", sheet, in.SpreadsheetID, ErrSheetTaken)
	}
	if err != nil {
		return FormView{}, fmt.Errorf("sheets: create form: %w", err)
	}
	p.forms.Store(f.ID, f)
	p.log.Info("form created", "form_id", f.ID, "account_id", f.AccountID, "spreadsheet_id", f.SpreadsheetID, "sheet", f.Sheet, "start_row", f.StartRow)
	return view(f, w), nil
}

// googleInputErr explains why a form's spreadsheet could not be checked.
func (p *Pipeline) googleInputErr(acct store.Account, in FormInput, err error) error {
	switch {
	case errors.Is(err, google.ErrSpreadsheetNotFound):
		return inputErr("spreadsheetId", "not_found", "Google has no spreadsheet %q that %s can see; check the id and that it is shared with that account.", in.SpreadsheetID, acct.Email)
	case errors.Is(err, google.ErrSpreadsheetForbidden):
		return inputErr("spreadsheetId", "forbidden", "The spreadsheet is not shared with %s; share it with edit rights.", acct.Email)
	case errors.Is(err, google.ErrRevoked):
		return inputErr("accountId", "invalid", "Google refused the access of %s; connect the account again.", acct.Email)
	case errors.Is(err, store.ErrNotFound):
		return inputErr("accountId", "not_found", "There is no connected Google account %q.", in.AccountID)
	}
	if _, limited := queue.RetryAfter(err); limited {
		return err
	}
	return fmt.Errorf("%w: %w", ErrGoogleUnavailable, err)
}

// form returns a form, from the cache when it can (forms never change).
func (p *Pipeline) form(id string) (store.Form, error) {
	if f, ok := p.forms.Load(id); ok {
		return f.(store.Form), nil
	}
	var f store.Form
	err := p.db.View(func(tx *store.Tx) error {
		var err error
		f, err = tx.FormGet(id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return f, fmt.Errorf("sheets: form %q: %w", id, ErrFormNotFound)
	}
	if err != nil {
		return f, err
	}
	p.forms.Store(id, f)
	return f, nil
}

// Form returns one form with its bookkeeping.
func (p *Pipeline) Form(id string) (FormView, error) {
	var v FormView
	err := p.db.View(func(tx *store.Tx) error {
		f, err := tx.FormGet(id)
		if err != nil {
			return err
		}
		w, err := tx.SheetWrites(id)
		v = view(f, w)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return v, fmt.Errorf("sheets: form %q: %w", id, ErrFormNotFound)
	}
	return v, err
}

// Forms lists every form (of one user when userID is set), oldest first.
func (p *Pipeline) Forms(userID string) ([]FormView, error) {
	var out []FormView
	err := p.db.View(func(tx *store.Tx) error {
		forms, err := tx.Forms()
		if err != nil {
			return err
		}
		for _, f := range forms {
			if userID != "" && f.UserID != userID {
				continue
			}
			w, err := tx.SheetWrites(f.ID)
			if err != nil {
				return err
			}
			out = append(out, view(f, w))
		}
		return nil
	})
	slices.SortFunc(out, func(a, b FormView) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, err
}

// WaitingError is the refusal to delete a form whose rows still wait; it
// wraps ErrRowsWaiting.
type WaitingError struct{ Rows int }

func (e *WaitingError) Error() string {
	return fmt.Sprintf("%d rows of the form still wait to be written", e.Rows)
}

func (e *WaitingError) Unwrap() error { return ErrRowsWaiting }

// DeleteForm deletes a form, the submissions it keeps and its bookkeeping,
// and frees its sheet for another form; the rows already in the sheet stay
// there. When more than dropAtMost rows wait to be written it refuses with
// a *WaitingError; otherwise the waiting rows are dropped, and dropped says
// how many. A flush of the form still queued ends as stale.
func (p *Pipeline) DeleteForm(id string, dropAtMost int) (dropped int, err error) {
	err = p.db.Update(func(tx *store.Tx) error {
		dropped, err = tx.FormDelete(id, dropAtMost)
		return err
	})
	p.forms.Delete(id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return 0, fmt.Errorf("sheets: form %q: %w", id, ErrFormNotFound)
	case errors.Is(err, store.ErrConflict):
		return 0, &WaitingError{Rows: dropped}
	case err != nil:
		return 0, fmt.Errorf("sheets: delete form %s: %w", id, err)
	}
	p.log.Info("form deleted", "form_id", id, "rows_dropped", dropped)
	return dropped, nil
}

// ---- submissions ----

// flushPayload is a sheets:flush task's payload.
type flushPayload struct {
	FormID string `json:"formId"`
}

func flushKey(formID string) string { return TypeFlush + ":" + formID }

// Submit validates answers against the form's columns and, in one bbolt
// transaction (batched with concurrent submissions), stores the submission,
// appends its id to the form's buffer and makes sure a flush of the form is
// in the outbox. Once it returns, the row will reach the sheet.
func (p *Pipeline) Submit(ctx context.Context, formID string, answers map[string]json.RawMessage) (store.Submission, error) {
	f, err := p.form(formID)
	if err != nil {
		return store.Submission{}, err
	}
	if !f.MovedAt.IsZero() {
		// Its user lives on another mailroom now (mailroom export-user).
		return store.Submission{}, fmt.Errorf("sheets: form %s: %w", formID, store.ErrMoved)
	}
	values, err := Answers(f.Columns, answers)
	if err != nil {
		p.metrics.submissions.WithLabelValues("invalid").Inc()
		return store.Submission{}, err
	}
	// After a failed commit (a full disk), new rows wait until a probe
	// finds that writes work again: the rows that do fit in the pages the
	// file holds would take the room the flushes need to send and forget
	// the rows already accepted, and a client would see 202s and 503s by
	// turns.
	if _, err := p.db.WriteHealth(); err != nil {
		return store.Submission{}, err
	}
	q := p.queue
	now := p.cfg.Now().UTC()
	if err := p.submits.take(f.ID, f.UserID, now); err != nil {
		p.metrics.submissions.WithLabelValues("rate_limited").Inc()
		return store.Submission{}, err
	}
	var sub store.Submission
	err = p.db.Batch(func(tx *store.Tx) error {
		w, err := tx.SheetWrites(f.ID)
		if err != nil {
			return err
		}
		if w.Buffered >= p.cfg.MaxWaiting {
			full := &BacklogFullError{Waiting: w.Buffered, Limit: p.cfg.MaxWaiting}
			if w.State == store.FormError {
				full.LastError = w.LastError
			}
			return full
		}
		if n := tx.UserSubmissionBytes(f.UserID); n >= p.cfg.MaxUserBytes {
			return &UserBytesError{Stored: n, Limit: p.cfg.MaxUserBytes, RetryAfter: p.pruneEvery()}
		}
		s, w, err := tx.SubmissionAdd(store.Submission{FormID: f.ID, SubmittedAt: now, Values: values})
		if err != nil {
			return err
		}
		sub = s
		return p.scheduleFlush(tx, q, f.ID, w, now)
	})
	if err != nil {
		p.submits.giveBack(f.ID, f.UserID)
	}
	if errors.Is(err, ErrBacklogFull) {
		p.metrics.submissions.WithLabelValues("backlog_full").Inc()
		return store.Submission{}, fmt.Errorf("sheets: form %s: %w", formID, err)
	}
	if errors.Is(err, ErrUserBytesFull) {
		p.metrics.submissions.WithLabelValues("user_bytes_full").Inc()
		return store.Submission{}, fmt.Errorf("sheets: form %s: %w", formID, err)
	}
	if errors.Is(err, store.ErrNotFound) {
		// Deleted since it was read.
		p.forms.Delete(formID)
		return store.Submission{}, fmt.Errorf("sheets: form %q: %w", formID, ErrFormNotFound)
	}
	if err != nil {
		return store.Submission{}, fmt.Errorf("sheets: store submission of form %s: %w", formID, err)
	}
	p.metrics.submissions.WithLabelValues("accepted").Inc()
	return sub, nil
}

// shortWait is the longest a flush waits in its task, for its time or for
// quota, rather than going back to the broker: a second (the broker's
// whole seconds) and a tick (see Config.BrokerTick).
func (p *Pipeline) shortWait() time.Duration { return p.cfg.BrokerTick + time.Second }

// scheduleFlush makes sure a flush of the form is in the outbox when rows
// wait: at the oldest waiting row + FlushDelay, or now (brought forward if
// one waits) when Threshold rows wait. While a flush record lives (waiting
// or running), its key makes this a no-op: the running flush schedules the
// next one itself when it commits, in a transaction serialized with this
// one, so no row is left without a flush.
func (p *Pipeline) scheduleFlush(tx *store.Tx, q enqueuer, formID string, w store.SheetWrites, now time.Time) error {
	if w.Buffered == 0 {
		return nil
	}
	key := flushKey(formID)
	if (w.Buffered < p.cfg.Threshold || w.State == store.FormError) && q.Pending(tx, TypeFlush, key) {
		return nil // the usual case: the flush (or a form in error's next check) is already waiting
	}
	opts := []queue.Option{queue.Key(key)}
	if w.Buffered >= p.cfg.Threshold {
		opts = append(opts, queue.RunAt(now), queue.BringForward())
	} else {
		oldest, ok, err := tx.SheetOldestWaiting(formID)
		if err != nil {
			return err
		}
		if !ok {
			return nil // nothing actually waits
		}
		// Handed to the broker a tick early, so that it is never late; the
		// flush waits in its task until it is due (HandleFlush).
		at := oldest.Add(p.cfg.FlushDelay - p.cfg.BrokerTick)
		if at.Before(now) {
			at = now
		}
		opts = append(opts, queue.RunAt(at))
	}
	if _, _, err := q.Enqueue(tx, TypeFlush, flushPayload{FormID: formID}, opts...); err != nil {
		return fmt.Errorf("sheets: schedule flush of form %s: %w", formID, err)
	}
	return nil
}
