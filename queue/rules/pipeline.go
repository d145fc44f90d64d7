package rules

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// Config tunes the pipeline. Zero values take the defaults named (the
// contract's defaults of the MAILROOM_* settings in brackets).
type Config struct {
	// Debounce is the quiet time after a user's last save before the
	// reclassify fires [MAILROOM_RECLASSIFY_DEBOUNCE]. Default 60s.
	Debounce time.Duration
	// MaxWait bounds the wait after the first unsent save
	// [MAILROOM_RECLASSIFY_MAX_WAIT]. Default 10m.
	MaxWait time.Duration
	// Tick is how often the publisher looks for due jobs
	// [MAILROOM_RECLASSIFY_TICK]. Default 10s.
	Tick time.Duration
	// BatchSize is the threads per batch task [MAILROOM_RECLASSIFY_BATCH].
	// Default 50.
	BatchSize int
	// SaveLimit saves per SaveWindow per user [MAILROOM_RULE_SAVE_LIMIT,
	// MAILROOM_RULE_SAVE_WINDOW]. Defaults 20 and 60s.
	SaveLimit  int
	SaveWindow time.Duration
	// PublishPerTick bounds the jobs one tick publishes (the rest wait for
	// the next tick, which comes at once when this one was full). Default 100.
	PublishPerTick int
	// BodyFetchers is how many message bodies a batch fetches at once when
	// a rule looks at the body. Default 8.
	BodyFetchers int
	// GmailCalls is how many label changes (batchModify calls) a batch
	// makes at once (they touch different labels; against Google each call waits
	// on the network). Default 4.
	GmailCalls int
	// WriteDelay is how long a reclassify's label change may wait in the
	// account's writer for others of its label and direction before it
	// goes to Gmail in a call of fewer than 1,000 ids (a group that reaches
	// 1,000, or whose job's batches have all run, goes at once). Default 2s.
	WriteDelay time.Duration
	// SpentUntil, when set, is asked before each save until when the save
	// window must be treated as fully spent because the broker lost its log
	// (queue.Watch.SpentUntil). Nil: the broker's log is trusted.
	SpentUntil func(window time.Duration) time.Time
	// Now is the clock of saves and the publisher. Nil: time.Now.
	Now    func() time.Time
	Logger *slog.Logger
	// Registerer receives the metrics. Nil: a private registry.
	Registerer prometheus.Registerer
}

// Defaults of Config, which serve's flag table reads.
const (
	DefaultDebounce       = 60 * time.Second
	DefaultMaxWait        = 10 * time.Minute
	DefaultTick           = 10 * time.Second
	DefaultBatchSize      = 50
	DefaultSaveLimit      = 20
	DefaultSaveWindow     = 60 * time.Second
	DefaultPublishPerTick = 100
	DefaultBodyFetchers   = 8
	DefaultGmailCalls     = 4
	DefaultWriteDelay     = 2 * time.Second
)

func (c *Config) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&c.Debounce, DefaultDebounce)
	def(&c.MaxWait, DefaultMaxWait)
	def(&c.Tick, DefaultTick)
	def(&c.SaveWindow, DefaultSaveWindow)
	def(&c.WriteDelay, DefaultWriteDelay)
	n := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	n(&c.BatchSize, DefaultBatchSize)
	n(&c.SaveLimit, DefaultSaveLimit)
	n(&c.PublishPerTick, DefaultPublishPerTick)
	n(&c.BodyFetchers, DefaultBodyFetchers)
	n(&c.GmailCalls, DefaultGmailCalls)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
}

// Gmail is the part of one account's Gmail API the pipeline calls;
// *google.Gmail has it.
type Gmail interface {
	Labels(ctx context.Context) ([]google.Label, error)
	CreateLabel(ctx context.Context, name string) (google.Label, error)
	Modify(ctx context.Context, id string, add, remove []string) (historyID uint64, err error)
	Profile(ctx context.Context) (email string, historyID uint64, err error)
	BatchModify(ctx context.Context, ids, add, remove []string) error
	GetMessage(ctx context.Context, id string, withBody bool) (google.Message, error)
}

var _ Gmail = (*google.Gmail)(nil)

// GmailOpener returns the Gmail API of an account (the Google-accounts
// service, queue/google/accounts, knows how: token, refresh, saving it).
type GmailOpener func(ctx context.Context, accountID string) (Gmail, error)

// Enqueuer records batch tasks in a transaction, cancels those a newer job
// supersedes, and archives those whose label changes Gmail refused for good
// once the writer sent them; *queue.Queue is one.
type Enqueuer interface {
	Enqueue(tx *store.Tx, typ string, payload any, opts ...queue.Option) (queue.Record, bool, error)
	Cancel(tx *store.Tx, typ, id string) error
	BuryTx(tx *store.Tx, d store.DeadLetter) error
}

var _ Enqueuer = (*queue.Queue)(nil)

// Deps are what the pipeline is built over.
type Deps struct {
	// DB is the store. Required.
	DB *store.DB
	// Broker holds the save limit's windows (broker.Broker.Client()).
	// Required.
	Broker RedisClient
	// Gmail opens an account's Gmail (the Google-accounts service).
	Gmail GmailOpener
	// Queue records the batch tasks of published jobs and the accounts'
	// writer tasks (the queue's enqueue side). Nil: the pipeline has no
	// publisher among its Services, and batches send their own label
	// changes.
	Queue Enqueuer
}

// Pipeline is the label rules pipeline. Its methods are safe for
// concurrent use.
type Pipeline struct {
	cfg       Config
	db        *store.DB
	publisher *Publisher // nil without Deps.Queue
	queue     Enqueuer   // nil: batches send their own label changes
	limiter   *Limiter
	gmail     GmailOpener
	log       *slog.Logger
	metrics   *metrics
	gate      *gate
	// writers keep one writer run per account at a time in this process.
	// The task's key keeps one task per account, but asynq delivers a task
	// at least once: after a broker loss the relay hands a writer task out
	// again while its first run may still be sending, and two runs of one
	// account could then land an older change (an add a newer plan
	// replaced) after the newer one (its remove), leaving Gmail wrong while
	// the records say it is right. Runs in several processes (an external
	// Redis) are not ordered by it, like the reclassify gate.
	writers keyedLocks
	// writeLocks: one Gmail write of a label of an account in flight
	// (lockLabels, writer.gate).
	writeLocks keyedLocks
	// labelLocks give label creation of one account's label one caller
	// at a time (labelIDs).
	labelLocks keyedLocks

	mu       sync.Mutex
	compiled map[string]*compiledRule // by rule id, the latest version seen
}

// New builds the pipeline over its deps. Nothing runs until its Services
// start; its task's handler reaches the table through Register.
func New(cfg Config, deps Deps) (*Pipeline, error) {
	cfg.defaults()
	if deps.DB == nil || deps.Broker == nil {
		return nil, errors.New("rules: New needs Deps.DB and Deps.Broker")
	}
	if cfg.MaxWait < cfg.Debounce {
		return nil, fmt.Errorf("rules: max wait %s is shorter than the debounce %s", cfg.MaxWait, cfg.Debounce)
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{
		cfg:      cfg,
		db:       deps.DB,
		limiter:  &Limiter{rdb: deps.Broker, limit: cfg.SaveLimit, window: cfg.SaveWindow, spent: cfg.SpentUntil},
		gmail:    queueOpener(deps.Gmail),
		log:      cfg.Logger.With("component", "rules"),
		metrics:  m,
		gate:     newGate(),
		compiled: map[string]*compiledRule{},
	}
	if deps.Queue != nil {
		p.publisher = p.Publisher(deps.Queue)
		p.queue = deps.Queue
	}
	return p, nil
}

// Register gives the task table the pipeline's handlers of reclassify
// batches and of the accounts' label writers, and the batches' dead-letter
// hook.
func (p *Pipeline) Register(t *queue.Table) error {
	if err := t.Handle(TypeReclassifyBatch, p.HandleBatch); err != nil {
		return err
	}
	if err := t.Handle(TypeLabelWrite, p.HandleLabelWrite); err != nil {
		return err
	}
	return t.OnDead(TypeReclassifyBatch, p.BatchDead)
}

// Services are the pipeline's loops: the publisher of due reclassify jobs
// (with Deps.Queue).
func (p *Pipeline) Services() []lifecycle.Service {
	if p.publisher == nil {
		return nil
	}
	return []lifecycle.Service{p.publisher}
}

// Config returns the pipeline's configuration with its defaults filled.
func (p *Pipeline) Config() Config { return p.cfg }

type metrics struct {
	saves      *prometheus.CounterVec
	publishes  prometheus.Counter
	batches    *prometheus.CounterVec
	threads    *prometheus.CounterVec
	labels     *prometheus.CounterVec
	gmailCalls *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_rule_saves_total", Help: "Rule saves (create, update, delete) by outcome.",
		}, []string{"outcome"}),
		publishes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_reclassify_publishes_total", Help: "Reclassify jobs published.",
		}),
		batches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_reclassify_batches_total", Help: "Reclassify batches that ran, or were skipped because every rule they carried had a newer job.",
		}, []string{"outcome"}),
		threads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_reclassify_threads_total", Help: "Threads in which a reclassify added (labeled) or removed (unlabeled) a label.",
		}, []string{"change"}),
		labels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_rule_label_changes_total", Help: "Labels rules added to or removed from messages, by source (new_mail, reclassify).",
		}, []string{"source", "change"}),
		gmailCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mailroom_rules_gmail_calls_total", Help: "Gmail API calls made by the rules pipeline, by method.",
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.saves, m.publishes, m.batches, m.threads, m.labels, m.gmailCalls} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("rules: register metrics: %w", err)
		}
	}
	for _, o := range []string{"accepted", "rate_limited", "invalid"} {
		m.saves.WithLabelValues(o)
	}
	for _, o := range []string{"run", "stale"} {
		m.batches.WithLabelValues(o)
	}
	for _, o := range []string{"labeled", "unlabeled"} {
		m.threads.WithLabelValues(o)
	}
	for _, src := range []string{"new_mail", "reclassify"} {
		m.labels.WithLabelValues(src, "added")
		m.labels.WithLabelValues(src, "removed")
	}
	for _, method := range []string{"getProfile", "labels.list", "labels.create", "messages.get", "modify", "batchModify"} {
		m.gmailCalls.WithLabelValues(method)
	}
	return m, nil
}

// Rule is a saved rule: the spec and its identity.
type Rule struct {
	ID        string
	UserID    string
	Version   int
	Spec      Spec
	CreatedAt time.Time
	UpdatedAt time.Time
}

func ruleOf(r store.Rule) (Rule, error) {
	out := Rule{ID: r.ID, UserID: r.UserID, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
	if err := json.Unmarshal(r.Spec, &out.Spec); err != nil {
		return out, fmt.Errorf("rules: decode rule %s: %w", r.ID, err)
	}
	return out, nil
}

// Saved is the answer to a save: the rule as stored (zero after a delete)
// and the user's pending reclassify it joined.
type Saved struct {
	Rule    Rule
	Pending store.ReclassifyPending
}

// Errors of the pipeline's API besides *ValidationError and *RefusedError,
// and the package's own.
var (
	// ErrLabelTaken: the user has a rule for that label already.
	ErrLabelTaken = errors.New("the user already has a rule for that label")
	// ErrNotFound: no such user or rule.
	ErrNotFound = errors.New("not found")

	// errStopPreview ends a preview's walk of the mail.
	errStopPreview = errors.New("rules: preview: enough messages read")
)

// ParseSpec reads a rule from its JSON text (see Parse). A rejected rule
// counts as an invalid save.
func (p *Pipeline) ParseSpec(raw []byte) (Spec, error) {
	s, err := Parse(raw)
	if err != nil {
		p.metrics.saves.WithLabelValues("invalid").Inc()
	}
	return s, err
}

// Create validates spec and stores it as a new rule of userID. Validation
// comes before the rate limit, so a rejected rule does not count; a save
// that fails after the limit let it through gives its place back.
func (p *Pipeline) Create(ctx context.Context, userID string, spec Spec) (Saved, error) {
	return p.save(ctx, userID, "", &spec, func(tx *store.Tx, raw []byte, now time.Time) (store.Rule, error) {
		return tx.RuleCreate(userID, spec.Label, raw, now)
	})
}

// Update validates spec and stores it as the next version of rule id.
func (p *Pipeline) Update(ctx context.Context, id string, spec Spec) (Saved, error) {
	r, err := p.liveRule(id)
	if err != nil {
		return Saved{}, err
	}
	return p.save(ctx, r.UserID, id, &spec, func(tx *store.Tx, raw []byte, now time.Time) (store.Rule, error) {
		return tx.RuleUpdate(id, spec.Label, raw, now)
	})
}

// Delete deletes rule id. The reclassify it joins removes the labels the
// rule applied; labels a person applied stay.
func (p *Pipeline) Delete(ctx context.Context, id string) (Saved, error) {
	r, err := p.liveRule(id)
	if err != nil {
		return Saved{}, err
	}
	return p.save(ctx, r.UserID, id, nil, func(tx *store.Tx, _ []byte, now time.Time) (store.Rule, error) {
		return tx.RuleDelete(id, now)
	})
}

func (p *Pipeline) liveRule(id string) (store.Rule, error) {
	var r store.Rule
	err := p.db.View(func(tx *store.Tx) (err error) {
		r, err = tx.RuleGet(id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) || err == nil && r.Deleted {
		return r, fmt.Errorf("rules: rule %s: %w", id, ErrNotFound)
	}
	return r, err
}

// save is the one path of every save: validate, rate limit, then one
// transaction that stores the rule version and merges it into the user's
// pending reclassify.
func (p *Pipeline) save(ctx context.Context, userID, ruleID string, spec *Spec, write func(*store.Tx, []byte, time.Time) (store.Rule, error)) (Saved, error) {
	var raw []byte
	if spec != nil {
		spec.Normalize()
		if err := spec.Validate(); err != nil {
			p.metrics.saves.WithLabelValues("invalid").Inc()
			return Saved{}, err
		}
		var err error
		if raw, err = json.Marshal(spec); err != nil {
			return Saved{}, err
		}
	}
	res, err := p.limiter.Reserve(ctx, userID)
	var refused *RefusedError
	if errors.As(err, &refused) {
		p.metrics.saves.WithLabelValues("rate_limited").Inc()
		return Saved{}, err
	}
	if err != nil {
		return Saved{}, err
	}
	var out Saved
	now := p.cfg.Now()
	err = p.db.Update(func(tx *store.Tx) error {
		r, err := write(tx, raw, now)
		if err != nil {
			return err
		}
		if out.Pending, err = tx.ReclassifyMerge(userID, r.ID, "", now, p.cfg.Debounce, p.cfg.MaxWait); err != nil {
			return err
		}
		if !r.Deleted {
			out.Rule, err = ruleOf(r)
		}
		return err
	})
	if err != nil {
		if cerr := res.Cancel(context.WithoutCancel(ctx)); cerr != nil {
			p.log.Warn("give back a rule save place", "user_id", userID, "err", cerr)
		}
		switch {
		case errors.Is(err, store.ErrConflict):
			return Saved{}, fmt.Errorf("rules: label %q: %w", spec.Label, ErrLabelTaken)
		case errors.Is(err, store.ErrNotFound) && ruleID == "":
			return Saved{}, fmt.Errorf("rules: user %s: %w", userID, ErrNotFound)
		case errors.Is(err, store.ErrNotFound):
			return Saved{}, fmt.Errorf("rules: rule %s: %w", ruleID, ErrNotFound)
		}
		return Saved{}, err
	}
	p.metrics.saves.WithLabelValues("accepted").Inc()
	return out, nil
}

// ReclassifyAccount schedules a reclassify of every live rule of the user
// in tx, merged into the user's pending reclassify as saving each would,
// but without counting toward the save limit, and due at once unless the
// user's own saves are pending: the debounce gathers a user's edits, and a
// finished full sync is not one (its mail would otherwise wait a debounce
// for its labels, with the account's quota idle). The gmail pipeline calls
// it in the transaction that records a full sync of accountID complete: the
// mail a full sync brings in never passes ApplyNew. The job covers that
// account only (the user's other accounts follow the rules already), unless
// a rule is saved before it is published. Calling it again merges the same
// rules, so it only moves the fire time.
func (p *Pipeline) ReclassifyAccount(tx *store.Tx, userID, accountID string) error {
	rs, err := tx.Rules(userID)
	if err != nil {
		return fmt.Errorf("rules: reclassify after a full sync of account %s: %w", accountID, err)
	}
	now := p.cfg.Now()
	debounce := time.Duration(0)
	pending, err := tx.ReclassifyPendingGet(userID)
	switch {
	case err == nil && pending.FiresAt.After(now):
		debounce = p.cfg.Debounce // the user is editing: their debounce governs
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("rules: reclassify after a full sync of account %s: %w", accountID, err)
	}
	for _, r := range rs {
		if _, err := tx.ReclassifyMerge(userID, r.ID, accountID, now, debounce, p.cfg.MaxWait); err != nil {
			return fmt.Errorf("rules: reclassify after a full sync of account %s: %w", accountID, err)
		}
	}
	if debounce == 0 && len(rs) > 0 && p.publisher != nil {
		// Due now: published once committed, not at the next tick (up to
		// Tick with the account's quota idle at the end of its first sync).
		tx.OnCommit(p.publisher.Kick)
	}
	return nil
}

// Rules lists a user's live rules, oldest first. ErrNotFound when the user
// does not exist.
func (p *Pipeline) Rules(userID string) ([]Rule, error) {
	var out []Rule
	err := p.db.View(func(tx *store.Tx) error {
		if _, err := tx.UserGet(userID); err != nil {
			return fmt.Errorf("rules: user %s: %w", userID, ErrNotFound)
		}
		rs, err := tx.Rules(userID)
		if err != nil {
			return err
		}
		out = make([]Rule, 0, len(rs))
		for _, r := range rs {
			rule, err := ruleOf(r)
			if err != nil {
				return err
			}
			out = append(out, rule)
		}
		return nil
	})
	return out, err
}

// Rule returns one live rule.
func (p *Pipeline) Rule(id string) (Rule, error) {
	r, err := p.liveRule(id)
	if err != nil {
		return Rule{}, err
	}
	return ruleOf(r)
}

// Job states.
const (
	JobRunning    = "running"
	JobDone       = "done"
	JobSuperseded = "superseded"
)

// Job is a published reclassify as the status shows it.
type Job struct {
	store.ReclassifyJob
	// State is running (batches wait), done, or superseded (every rule it
	// carried has a newer job).
	State string
}

// Status is a user's reclassify state: the pending job, if any, and the
// recent jobs, newest first.
type Status struct {
	Pending *store.ReclassifyPending
	Jobs    []Job
}

// Status returns the user's pending reclassify and up to limit recent jobs.
func (p *Pipeline) Status(userID string, limit int) (Status, error) {
	var st Status
	err := p.db.View(func(tx *store.Tx) error {
		if _, err := tx.UserGet(userID); err != nil {
			return fmt.Errorf("rules: user %s: %w", userID, ErrNotFound)
		}
		pending, err := tx.ReclassifyPendingGet(userID)
		switch {
		case err == nil:
			st.Pending = &pending
		case !errors.Is(err, store.ErrNotFound):
			return err
		}
		jobs, err := tx.ReclassifyJobs(userID, limit)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			st.Jobs = append(st.Jobs, Job{ReclassifyJob: j, State: jobState(tx, j)})
		}
		return nil
	})
	return st, err
}

func jobState(tx *store.Tx, j store.ReclassifyJob) string {
	superseded := len(j.RuleIDs) > 0
	for _, id := range j.RuleIDs {
		if tx.RuleLatestJob(id) == j.ID {
			superseded = false
			break
		}
	}
	switch {
	case superseded:
		return JobSuperseded
	case j.Waiting() > 0:
		return JobRunning
	}
	return JobDone
}

// compiledRule is a rule version ready to match.
type compiledRule struct {
	id       string
	version  int
	label    string
	labelKey string // lower-case label: Gmail label names ignore case
	deleted  bool
	spec     Spec
	match    *Compiled
	needBody bool
}

// matches reports whether the rule matches message m, msg being its fields
// as rules read them: for a rule that reads bodies, by the verdict a read
// of m's body left for the rule's version (store.Message.BodyVerdicts),
// else by msg.
func (c *compiledRule) matches(m *store.Message, msg *Message) bool {
	if c.needBody {
		if match, ok := m.BodyVerdict(c.id, c.version); ok {
			return match
		}
	}
	return c.match.Match(msg)
}

// compile returns the matcher of a stored rule version, compiling each
// version once.
func (p *Pipeline) compile(r store.Rule) (*compiledRule, error) {
	p.mu.Lock()
	c, ok := p.compiled[r.ID]
	p.mu.Unlock()
	if ok && c.version == r.Version {
		return c, nil
	}
	c, err := p.compileUncached(r)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	if old, ok := p.compiled[r.ID]; !ok || old.version < c.version {
		p.compiled[r.ID] = c
	}
	p.mu.Unlock()
	return c, nil
}

func (p *Pipeline) compileUncached(r store.Rule) (*compiledRule, error) {
	c := &compiledRule{id: r.ID, version: r.Version, label: r.Label, labelKey: strings.ToLower(r.Label), deleted: r.Deleted}
	if !r.Deleted {
		rule, err := ruleOf(r)
		if err != nil {
			return nil, queue.Permanent(err)
		}
		c.spec = rule.Spec
		if c.match, err = Compile(rule.Spec); err != nil {
			return nil, queue.Permanent(fmt.Errorf("rules: compile rule %s version %d: %w", r.ID, r.Version, err))
		}
		c.needBody = rule.Spec.ReadsBodies()
	}
	return c, nil
}
