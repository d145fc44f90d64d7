// Package gmail keeps a mirror of connected Gmail mailboxes in bbolt: push
// intake, account sync (history and full), the classifier of history records
// into the seven event types, their handlers with per-attribute history-id
// ordering, watch renewal and polling.
//
// How a change travels: Gmail pushes {emailAddress, historyId} → Push
// records the wanted history id and one gmail:sync task per account in one
// transaction → the sync reads history from the account's watermark (or,
// while the account's full sync runs in its own gmail:full-sync task, from
// the history id that full sync started at), turns
// each page into event tasks (message-added, -read, -unread, -trashed,
// -restored, -deleted, -labeled) and moves the watermark in the same
// transaction → each event's handler applies its change to the stored
// message unless the message already took a newer change of that attribute.
package gmail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/google/accounts"
	"mailroom/queue/googleerr"
	"mailroom/queue/rules"
	"mailroom/store"
)

// Sentinel errors.
var (
	// ErrAccountGone: the task's account was deleted (permanent).
	ErrAccountGone = accounts.ErrAccountGone
	// ErrInvalid: a request field is missing or malformed (see InvalidError).
	ErrInvalid = errors.New("gmail: invalid request")
	// ErrOAuthUnavailable: no OAuth client is configured.
	ErrOAuthUnavailable = errors.New("gmail: no Google OAuth client is configured (MAILROOM_GOOGLE_CLIENT_ID and _SECRET)")
)

// InvalidError names the offending field of a request.
type InvalidError struct {
	Field, Message string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("gmail: %s: %s", e.Field, e.Message) }
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// RuleApplier is how the pipeline hands new mail to the label rules: one
// message at a time as it arrives, a whole account after a full sync. The
// rules pipeline implements it; without it NoRules does nothing.
type RuleApplier interface {
	// NeedsBody reports whether a rule of the account's user reads message
	// bodies; message-added then fetches the full message.
	NeedsBody(ctx context.Context, accountID string) (bool, error)
	// ApplyNew applies the user's rules to a message that just arrived,
	// after it was stored. body is the text/plain body when NeedsBody said
	// so, else empty (empty too when msg holds the verdicts of every rule
	// that reads bodies: BodyRules). It may be called more than once for a message (a task
	// that runs again), so its effects must be idempotent (label set
	// operations). An error makes the message-added task retry.
	ApplyNew(ctx context.Context, accountID string, msg store.Message, body string) error
	// BodyRules returns the rules of the account's user that read bodies,
	// as they are now; nil when none does. A read of a body for them (a
	// full sync's, message-added's) stores their verdicts with the
	// message, so that neither the label pass nor a message-added of a
	// message the mirror holds reads that body again.
	BodyRules(ctx context.Context, accountID string) (*rules.BodyRules, error)
	// ReclassifyAccount schedules the user's rules over the account's
	// mail, in tx: the transaction that records a full sync of the account
	// complete (the mail a full sync brings in never passes ApplyNew). A
	// full sync that runs again calls it again, so it must be idempotent.
	ReclassifyAccount(tx *store.Tx, userID, accountID string) error
}

// NoRules is the RuleApplier of an appliance without label rules.
type NoRules struct{}

// NeedsBody implements RuleApplier.
func (NoRules) NeedsBody(context.Context, string) (bool, error) { return false, nil }

// ApplyNew implements RuleApplier.
func (NoRules) ApplyNew(context.Context, string, store.Message, string) error { return nil }

// BodyRules implements RuleApplier.
func (NoRules) BodyRules(context.Context, string) (*rules.BodyRules, error) { return nil, nil }

// ReclassifyAccount implements RuleApplier.
func (NoRules) ReclassifyAccount(*store.Tx, string, string) error { return nil }

// Enqueuer records tasks in the caller's transaction, says whether one of
// a type and key is waiting and counts the tasks of a type and group (the
// queue's enqueue side, *queue.Queue).
type Enqueuer interface {
	Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (queue.Record, bool, error)
	Pending(tx *store.Tx, typ, key string) bool
	Queued(tx *store.Tx, typ, group string) (queue.Count, error)
}

var _ Enqueuer = (*queue.Queue)(nil)

// TokenVerifier checks a push request's OIDC token (*google.PushVerifier).
type TokenVerifier interface {
	Verify(ctx context.Context, token string) error
}

// Config tunes the pipeline. Zero values take the defaults named.
type Config struct {
	// PubSubTopic is given to users.watch. Empty: no watch; accounts are
	// kept in sync by polling alone.
	PubSubTopic string
	// PollInterval: each account is synced this often without a push.
	// Default 15m.
	PollInterval time.Duration
	// FastPollInterval: an account whose pushes have stopped, or never
	// came, is synced this often. Default DefaultFastPollInterval.
	FastPollInterval time.Duration
	// TrailingRead: a sync after pushes that found changes is followed by
	// one more read this much later, for a change whose own push Gmail
	// dropped (it sends at most one a second per user). Default 3s.
	TrailingRead time.Duration
	// Alert raises an operator alert (Alerter.Raise): when pushes stop for
	// watched accounts, and when they come back. Nil: only logged.
	Alert func(text string)
	// WatchRenew: users.watch is renewed this often. Default 24h.
	WatchRenew time.Duration
	// TombstoneRetention: the record of a deleted message (kept so that
	// late events for it do nothing) is pruned this long after the delete.
	// Default 30 days (Gmail keeps history about a week).
	TombstoneRetention time.Duration
	// PushToken, when set, is accepted as ?token= on the push URL.
	PushToken string
	// HistoryPageSize is history.list's page size. Default 500.
	HistoryPageSize int
	// FullSyncWorkers fetch messages in parallel during a full sync.
	// Default 8.
	FullSyncWorkers int
	// FullSyncSlice is how many messages one gmail:full-sync run fetches
	// before it re-enqueues the account's full sync behind the other
	// accounts' (they take turns); the ids come from messages.list pages of
	// 500 kept between runs, so a small slice costs no extra list call.
	// Default 25: accounts that share the project's budget progress
	// evenly, in turns of about 125 units.
	FullSyncSlice int
	// FullSyncRunMax is how many messages one run fetches, slice after
	// slice, while no other account's full sync is recorded (nobody waits
	// for a turn): each hand-on is a task's round trip through the broker,
	// which took about four fifths of a lone first sync's time in runs of
	// 25 (10,000 units in 8 s at the 2025 prices, against 1.5 s in runs of
	// 500). Default 1,000; at most FullSyncSlice when lower.
	FullSyncRunMax int
	// GoogleTimeout bounds calls made outside a task (delete's watch stop).
	// Default 10s.
	GoogleTimeout time.Duration
	Logger        *slog.Logger
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// Defaults of Config, which serve's flag table reads.
const (
	DefaultPollInterval       = 15 * time.Minute
	DefaultFastPollInterval   = 2 * time.Minute
	DefaultTrailingRead       = 3 * time.Second
	DefaultWatchRenew         = 24 * time.Hour
	DefaultTombstoneRetention = 30 * 24 * time.Hour
	DefaultHistoryPageSize    = 500
	DefaultFullSyncWorkers    = 8
	DefaultFullSyncSlice      = 25
	DefaultFullSyncRunMax     = 1000
	DefaultGoogleTimeout      = 10 * time.Second
)

func (c *Config) defaults() {
	if c.PollInterval <= 0 {
		c.PollInterval = DefaultPollInterval
	}
	if c.FastPollInterval <= 0 {
		c.FastPollInterval = DefaultFastPollInterval
	}
	if c.TrailingRead <= 0 {
		c.TrailingRead = DefaultTrailingRead
	}
	if c.WatchRenew <= 0 {
		c.WatchRenew = DefaultWatchRenew
	}
	if c.TombstoneRetention <= 0 {
		c.TombstoneRetention = DefaultTombstoneRetention
	}
	if c.HistoryPageSize <= 0 {
		c.HistoryPageSize = DefaultHistoryPageSize
	}
	if c.FullSyncWorkers <= 0 {
		c.FullSyncWorkers = DefaultFullSyncWorkers
	}
	if c.FullSyncSlice <= 0 {
		c.FullSyncSlice = DefaultFullSyncSlice
	}
	if c.FullSyncRunMax <= 0 {
		c.FullSyncRunMax = DefaultFullSyncRunMax
	}
	if c.GoogleTimeout <= 0 {
		c.GoogleTimeout = DefaultGoogleTimeout
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
	// Accounts gives each account's Gmail adapter (and the OAuth client).
	// Required.
	Accounts *accounts.Service
	// Queue records tasks. Required.
	Queue Enqueuer
	// Verifier checks push OIDC tokens. Nil: only the shared ?token= is
	// accepted (when Config.PushToken is set).
	Verifier TokenVerifier
	// Rules receive new mail. Nil: NoRules.
	Rules RuleApplier
}

// Pipeline is the Gmail pipeline.
type Pipeline struct {
	loops    []lifecycle.Service // Services
	cfg      Config
	db       *store.DB
	accounts *accounts.Service
	google   *google.Client
	queue    Enqueuer
	verifier TokenVerifier
	rules    RuleApplier
	log      *slog.Logger
	metrics  *metrics
	writes   *store.GroupCommit

	mu          sync.Mutex
	pushAlerted bool                       // an alert says pushes stopped (maintain)
	labelsAt    map[string]time.Time       // account \x00 label id -> when an unknown label was last looked up
	known       map[string]map[string]bool // account -> ids of its label map
}

// New builds the pipeline.
func New(cfg Config, deps Deps) (*Pipeline, error) {
	cfg.defaults()
	if deps.DB == nil || deps.Accounts == nil || deps.Queue == nil {
		return nil, errors.New("gmail: Deps.DB, Deps.Accounts and Deps.Queue are required")
	}
	if deps.Rules == nil {
		deps.Rules = NoRules{}
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{
		cfg: cfg, db: deps.DB, accounts: deps.Accounts, google: deps.Accounts.Google(), queue: deps.Queue, verifier: deps.Verifier, rules: deps.Rules,
		log:      cfg.Logger.With("component", "gmail"),
		metrics:  m,
		writes:   &store.GroupCommit{DB: deps.DB},
		labelsAt: map[string]time.Time{},
		known:    map[string]map[string]bool{},
	}
	p.loops = []lifecycle.Service{p.maintainer(), p.tombstonePruner()}
	return p, nil
}

// Services are the pipeline's loops: the maintainer (polls and watch
// renewals) and the tombstone pruner, made once by New: every call
// returns the same ones.
func (p *Pipeline) Services() []lifecycle.Service { return slices.Clone(p.loops) }

// Register attaches the handlers of every gmail:* task type to the table.
func (p *Pipeline) Register(t *queue.Table) error {
	handlers := map[string]queue.Handler{
		TypeSync:            p.handleSync,
		TypeFullSync:        p.handleFullSync,
		TypeMessageAdded:    p.handleAdded,
		TypeMessageRead:     p.stateHandler(TypeMessageRead),
		TypeMessageUnread:   p.stateHandler(TypeMessageUnread),
		TypeMessageTrashed:  p.stateHandler(TypeMessageTrashed),
		TypeMessageRestored: p.stateHandler(TypeMessageRestored),
		TypeMessageDeleted:  p.stateHandler(TypeMessageDeleted),
		TypeMessageLabeled:  p.stateHandler(TypeMessageLabeled),
		TypeWatchRenew:      p.handleWatchRenew,
	}
	for _, typ := range taskTypes {
		if err := t.Handle(typ, handlers[typ]); err != nil {
			return err
		}
	}
	return t.OnDead(TypeFullSync, p.fullSyncDead)
}

// taskTypes are the pipeline's task types.
var taskTypes = []string{
	TypeSync, TypeFullSync, TypeMessageAdded, TypeMessageRead,
	TypeMessageUnread, TypeMessageTrashed, TypeMessageRestored,
	TypeMessageDeleted, TypeMessageLabeled, TypeWatchRenew,
}

// WatchEnabled reports whether accounts are watched (a Pub/Sub topic is
// set); without it they are kept in sync by polling alone.
func (p *Pipeline) WatchEnabled() bool { return p.cfg.PubSubTopic != "" }

// PollInterval is how often each account whose pushes arrive is synced
// without a push.
func (p *Pipeline) PollInterval() time.Duration { return p.cfg.PollInterval }

// FastPollInterval is how often an account whose pushes have stopped, or
// never came, is synced.
func (p *Pipeline) FastPollInterval() time.Duration {
	return min(p.cfg.FastPollInterval, p.cfg.PollInterval)
}

// client returns the account's Gmail adapter (the accounts service keeps
// it, with the account's token).
func (p *Pipeline) client(ctx context.Context, acc store.Account) (*google.Gmail, error) {
	gm, err := p.accounts.Client(ctx, acc)
	return gm, googleerr.ToQueue(err)
}

// forgetClient drops the account's connection and this pipeline's label
// caches of it (the account was reconnected or deleted).
func (p *Pipeline) forgetClient(accountID string) {
	p.accounts.Forget(accountID)
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.known, accountID)
	for k := range p.labelsAt {
		if strings.HasPrefix(k, accountID+"\x00") {
			delete(p.labelsAt, k)
		}
	}
}
