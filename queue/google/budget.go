package google

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Google's documented project limits: 1,200,000 units per project per
// minute, and a daily billing threshold of 80,000,000 units per project.
// The per-user limit and the per-method costs depend on the price list in
// force (Prices).
const (
	DefaultProjectUnitsPerMinute = 1_200_000
	DailyBillingThreshold        = 80_000_000
)

// DefaultWindow is BudgetConfig.Window's default: Google's minute.
const DefaultWindow = time.Minute

// Priority orders the Gmail calls of one account inside its budget.
type Priority int

// Priorities, most urgent first.
const (
	// PriorityLive: a pushed or polled history page and its event tasks,
	// label creation and watch renewals. Always served first, and a small
	// share of the budget is kept for it.
	PriorityLive Priority = iota
	// PriorityReclassify: reclassify batches.
	PriorityReclassify
	// PriorityBulk: full syncs and backfills.
	PriorityBulk
)

func (p Priority) String() string {
	switch p {
	case PriorityLive:
		return "live"
	case PriorityReclassify:
		return "reclassify"
	}
	return "bulk"
}

type priorityKey struct{}

// WithPriority marks the Gmail calls made with ctx. Calls without a mark
// are bulk (they can never overtake marked work).
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, p)
}

// PriorityOf returns the mark of ctx.
func PriorityOf(ctx context.Context) Priority {
	if p, ok := ctx.Value(priorityKey{}).(Priority); ok {
		return p
	}
	return PriorityBulk
}

// ErrQuotaWait is the cause of a task handed back to wait for Gmail quota.
var ErrQuotaWait = errors.New("waiting for Gmail quota")

// ErrProjectQuotaWait is ErrQuotaWait when the project's window is spent:
// no account's call of that priority could run meanwhile, so a caller
// that takes turns with other accounts may wait in its task rather than
// hand the task back and lose its turn.
var ErrProjectQuotaWait = fmt.Errorf("%w: the project's window is spent", ErrQuotaWait)

// BudgetConfig configures a Budget. Zero values take the defaults named.
type BudgetConfig struct {
	// Prices is the price list in force (MAILROOM_GMAIL_QUOTA_PRICES):
	// what each call spends. Zero: DefaultPrices.
	Prices Prices
	// UserUnits per Window per Google account
	// (MAILROOM_GMAIL_USER_UNITS_PER_MINUTE). Default: the price list's
	// (6,000 for 2026, 15,000 for 2025).
	UserUnits int
	// ProjectUnits per Window for all accounts together
	// (MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE). Default 1,200,000.
	ProjectUnits int
	// Window is Google's minute (tests compress it). Default one minute.
	Window time.Duration
	// Pace shapes the work below live priority (reclassify, full syncs).
	// The project's units are spread over its window at its rate, and such
	// work may run at most Pace/10 ahead of it, so accounts that share a
	// binding project budget progress together rather than those first in
	// a window taking all of it. An account's own window is not paced:
	// such work spends what it holds free at once (Google's sliding minute
	// allows it, and pacing the first minute out would cost most of a
	// minute), except that the first window of a busy period keeps a share
	// for live work: a third of the account's units at its start, less as
	// the window passes (see the spend script).
	// Default Window/10; negative: off (no share kept, no project pace).
	Pace time.Duration
	// Margin is added to Window. Google counts a call when it arrives, a
	// moment after the budget granted it; the budget stamps a call's units
	// again when Google has answered (Settle), so they never leave the
	// budget's window before Google's, and no margin is needed for that.
	// Default none.
	Margin time.Duration
	// MaxWait is the longest a call waits in its task for budget; a longer
	// wait is a refusal (Refused, wrapping ErrQuotaWait), which a pipeline
	// hands back to its queue (no failure, no attempt). Default 20 s.
	MaxWait time.Duration
	// Wait pauses a call that waits in its task for budget for d; its
	// error ends the wait and is returned as it is. The app gives the task
	// engine's wait (queue.Wait), which gives a task back when its queue
	// begins to stop. Default: a timer, ended by ctx.
	Wait func(ctx context.Context, d time.Duration) error
	// MaxInFlight is the most Gmail calls of one account this process has
	// in flight at once (Google answers 429 beyond its own number).
	// Default 8.
	MaxInFlight int
	// Recover sets how fast a budget that Google shrank grows back while
	// calls succeed: by a factor e every Recover (about 10% a window by
	// default: from half to full in 7 windows, from 1% in 46), up to the
	// setting. Default 10 windows.
	Recover time.Duration
	// SpentUntil, when set, is asked before each spend until when a window
	// kept in the broker counts as fully spent because the broker lost it
	// (queue.Watch.SpentUntil: a restart of the embedded store, a Redis
	// that forgot): until then no Gmail call is granted, to any account or
	// priority, as if the last minute (Window plus Margin) before the loss
	// had spent every unit; after it the windows are empty and the budget
	// spends up to its setting again (Google's refusals shrink it as
	// always). Nil: the broker's windows are trusted, and Resume starts an
	// account that may have spent before at half its setting instead.
	SpentUntil func(window time.Duration) time.Time
	// Fallback, when set, makes the store given to NewBudget a fleet's
	// Redis (MAILROOM_FLEET_REDIS_URL), shared by the mailrooms of one
	// Google project: while it does not answer, the budget is kept in
	// Fallback (this mailroom's broker) with the project's units divided
	// by Share (see fleet.go).
	Fallback BudgetStore
	// Share is how many mailrooms share the project (the ones the fleet
	// last saw, at least 1). Nil: 1.
	Share func() int
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Logger. Default: discard.
	Logger *slog.Logger
	// Registerer receives mailroom_gmail_quota_units_total. Nil: a private
	// registry.
	Registerer prometheus.Registerer
}

func (c *BudgetConfig) defaults() {
	if c.Prices.Name == "" {
		c.Prices = MustPrices(DefaultPrices)
	}
	if c.UserUnits <= 0 {
		c.UserUnits = c.Prices.UserUnitsPerMinute
	}
	if c.ProjectUnits <= 0 {
		c.ProjectUnits = DefaultProjectUnitsPerMinute
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.Margin < 0 {
		c.Margin = 0
	}
	if c.Pace == 0 {
		c.Pace = c.Window / 10
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 20 * time.Second
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 8
	}
	if c.Wait == nil {
		c.Wait = sleep
	}
	if c.Recover <= 0 {
		c.Recover = 10 * c.Window
	}
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

// Budget is the Gmail quota of every account and of the project, kept in
// the broker so that it holds across workers and, with an external Redis,
// across processes. Every Gmail call of the adapter spends from it first
// (Google's per-method cost), by priority; a refusal from Google shrinks
// it (see Refused). Its methods are safe for concurrent use.
//
// The window is a sliding log of 60 buckets per account and for the
// project. A bucket counts until all of it has left Google's window, so
// the budget never lets more through in any window than the limit.
type Budget struct {
	cfg   BudgetConfig
	rdb   BudgetStore
	log   *slog.Logger
	units prometheus.Counter
	waits prometheus.Counter

	pace int64 // Pace in ms; 0 off

	mu       sync.Mutex
	inFlight map[string]*slots // accounts with a call in flight or waiting for a slot

	fleet FleetState // with Fallback: whether the fleet's Redis answers
	mine  unitLog    // this process's granted units (the fleet's share)
}

// slots are an account's in-flight calls: a semaphore, and how many
// callers hold or wait for it (the account's entry goes at zero).
type slots struct {
	sem   chan struct{}
	users int
}

// Buckets of the sliding window.
const budgetBuckets = 60

// BudgetStore is the broker's client as the budget uses it (the broker's
// redis.UniversalClient is one).
type BudgetStore interface {
	redis.Scripter
	TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// NewBudget returns the budget kept in the broker rdb.
func NewBudget(cfg BudgetConfig, rdb BudgetStore) (*Budget, error) {
	cfg.defaults()
	b := &Budget{
		cfg: cfg, rdb: rdb, log: cfg.Logger.With("component", "gmail-quota"),
		units: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_quota_units_total",
			Help: "Gmail quota units spent, by Google's per-method table in force (MAILROOM_GMAIL_QUOTA_PRICES).",
		}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mailroom_gmail_quota_waits_total",
			Help: "Gmail calls that waited for the account's or the project's quota.",
		}),
		inFlight: map[string]*slots{},
	}
	if cfg.Pace > 0 {
		b.pace = max(1, cfg.Pace.Milliseconds())
	}
	for _, c := range []prometheus.Collector{b.units, b.waits} {
		if err := cfg.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("google: register gmail quota metrics: %w", err)
		}
	}
	return b, nil
}

// Config returns the budget's configuration with its defaults filled.
func (b *Budget) Config() BudgetConfig { return b.cfg }

// Prices returns the price list the budget charges.
func (b *Budget) Prices() Prices { return b.cfg.Prices }

const budgetPrefix = "mailroom:{gmailquota}:"

// budgetKeys: user buckets, user state, project buckets, project state,
// today's units. The hash tag keeps them in one Redis
// Cluster slot.
func (b *Budget) keys(account string, now time.Time) []string {
	return []string{
		budgetPrefix + "u:" + account + ":b", budgetPrefix + "u:" + account + ":s",
		budgetPrefix + "p:b", budgetPrefix + "p:s",
		budgetPrefix + "day:" + now.UTC().Format("20060102"),
	}
}

// budgetLib is shared by the scripts: the sliding bucket log and the
// adaptive limit.
const budgetLib = `
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local bm = window / tonumber(ARGV[3])
local recover = tonumber(ARGV[4])
local oldest = math.floor((now - window) / bm)

-- load returns a log's units in the window and its buckets, oldest first.
local function load(key)
  local raw = redis.call('HGETALL', key)
  local list, stale, used = {}, {}, 0
  for i = 1, #raw, 2 do
    local idx, u = tonumber(raw[i]), math.max(tonumber(raw[i + 1]), 0)
    if idx < oldest then
      stale[#stale + 1] = raw[i]
    else
      used = used + u
      list[#list + 1] = {idx, u}
    end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  table.sort(list, function(a, b) return a[1] < b[1] end)
  return used, list
end

-- limit returns the effective limit (shrunk by Google's refusals, growing
-- back exponentially, by e^(window/recover) a window) and until when calls
-- are blocked.
local function limit(key, setting)
  local s = redis.call('HMGET', key, 'eff', 'at', 'blocked')
  local e, at, blocked = tonumber(s[1]), tonumber(s[2]), tonumber(s[3]) or 0
  if e == nil then return setting, blocked end
  e = e * math.exp((now - at) / recover)
  if e >= setting then
    redis.call('HDEL', key, 'eff', 'at')
    return setting, blocked
  end
  return math.floor(e), blocked
end

-- waitFor is how long until a log's units fall to target.
local function waitFor(list, used, target)
  for _, b in ipairs(list) do
    used = used - b[2]
    if used <= target then return math.ceil((b[1] + 1) * bm + window - now) end
  end
  return math.ceil(bm)
end
`

// spendScript: KEYS as budgetKeys; ARGV now_ms, window_ms, buckets,
// recover_ms, user limit, project limit, cost, priority, pace_ms
// (0 off), reserved (1: the caller's units are in the pace already),
// within_ms (a pace wait longer than this reserves nothing; 0 no limit).
// Returns {granted, wait_ms, user units in window, user limit, why,
// reserved (1: the caller has reserved its turn in the pace)}; why: 0
// granted, 1 blocked by Google, 2 higher priority waiting, 3 user window
// (or, in a busy period's first window, the share kept for live work),
// 4 project window, 6 the project's pace (5 is no longer given).
var spendScript = redis.NewScript(budgetLib + `
local ulim = tonumber(ARGV[5])
local plim = tonumber(ARGV[6])
local cost = tonumber(ARGV[7])
local prio = tonumber(ARGV[8])
local pace = tonumber(ARGV[9])
local reserved = tonumber(ARGV[10])
local within = tonumber(ARGV[11])
local ttl = math.ceil(window * 20)

local uused, ulist = load(KEYS[1])
local ueff, ublocked = limit(KEYS[2], ulim)
local pused, plist = load(KEYS[3])
local peff, pblocked = limit(KEYS[4], plim)

local function refuse(wait, why, reserve)
  if wait < 1 then wait = 1 end
  local d, c = 'd' .. prio, 'c' .. prio
  local until_ = now + wait + 2 * bm
  local old = tonumber(redis.call('HGET', KEYS[2], d) or '0')
  if until_ > old then redis.call('HSET', KEYS[2], d, until_) end
  -- The largest call of the priority refused while its mark holds.
  local big = 0
  if old > now then big = tonumber(redis.call('HGET', KEYS[2], c) or '0') end
  if cost > big then big = cost end
  redis.call('HSET', KEYS[2], c, big)
  -- What the account's status shows: a caller of the priority waits until
  -- its wait is over, whatever was granted meanwhile (the mark above goes
  -- once a call as large is served, while the refused caller may still
  -- sleep in its queue, its task handed back).
  local w = 'w' .. prio
  if now + wait > tonumber(redis.call('HGET', KEYS[2], w) or '0') then redis.call('HSET', KEYS[2], w, now + wait) end
  -- Work below live that waits is busy until it asks again: its busy
  -- period goes on (see below) however long the wait.
  if prio > 0 then
    local pa = tonumber(redis.call('HGET', KEYS[2], 'pa') or '0')
    if now + wait > pa then redis.call('HSET', KEYS[2], 'pa', now + wait) end
  end
  redis.call('PEXPIRE', KEYS[2], ttl)
  return {0, wait, uused, ueff, why, reserve or reserved}
end

if ublocked > now or pblocked > now then
  return refuse(math.max(ublocked, pblocked) - now, 1)
end
-- Strict priorities: a caller waits while more urgent work of the account
-- waits (it asked within its wait and a grace of two buckets).
for q = 0, prio - 1 do
  local d = tonumber(redis.call('HGET', KEYS[2], 'd' .. q) or '0')
  if d > now then return refuse(math.ceil(bm), 2) end
end
-- A share of the budget, the account's and the project's, is kept for
-- live work.
local function below(lim)
  return math.max(lim - math.max(math.floor(lim / 50), 20), 1)
end
local ucap, pcap = below(ueff), below(peff)
local cap, pcapw = ueff, peff
if prio > 0 then cap, pcapw = ucap, pcap end
local paced = prio > 0 and pace > 0 and reserved == 0
-- The account's window: Google's sliding minute lets a minute's units be
-- spent at once, and units leave the window as they entered it, so the
-- shape of an account's first busy window repeats in every later one
-- while work waits. Work below live therefore spends what the window
-- holds free at once (a full sync's first minute is not paced out over
-- the minute: that would cost it most of a minute against Google's
-- least time), except in the first window of a busy period (no work
-- below live asked for a whole window), where it keeps a share of the
-- window for live work: the units it spends then do not leave until the
-- window has passed, and live mail arriving meanwhile has only what is
-- left. The share is a third of the window at its start and shrinks with
-- what is left of it (live mail that arrives at a steady rate needs less
-- of it as the window passes; a third kept all window long left it
-- unspent: 5,000 of a first sync's first 15,000 units at the 2025
-- prices). From the next window on, live work finds units as its own
-- leave the window (they entered it evenly, and it goes first while it waits),
-- besides the share below(lim) keeps. 'pa' is when such work last asked,
-- or, refused, when it will ask again (a first burst's callers wait out
-- the window and come back as it leaves: still the same busy period).
local firstEnds = 0 -- when the first window's share for live work is gone
if prio > 0 and pace > 0 then
  local asked = tonumber(redis.call('HGET', KEYS[2], 'pa') or '0')
  local began = tonumber(redis.call('HGET', KEYS[2], 'pb') or '0')
  if asked <= now - window then
    began = now
    redis.call('HSET', KEYS[2], 'pb', began)
  end
  if now > asked then redis.call('HSET', KEYS[2], 'pa', now) end
  redis.call('PEXPIRE', KEYS[2], ttl)
  if now < began + window then
    firstEnds = began + window
    local share = math.floor(ueff / 3 * (firstEnds - now) / window)
    cap = math.max(math.min(cap, ueff - share), 1)
  end
end
-- The project's pace: its units are spread over its window at its rate (a
-- cell rate: tat is when the units spent so far would have been paid at
-- that rate), and work below live may run at most a tenth of Pace ahead
-- of it. So accounts that share a binding project budget progress
-- together, a turn each, instead of those first in a window taking it all
-- (the lead is short so that no burst fills the project's window early and
-- the units leaving it a window later go to whoever asks first). The rate
-- over a window is the same (a pause of up to the lead is made up). A
-- caller the pace refuses reserves its turn: its units join the pace now
-- and it comes back (reserved) when they are due, so waiting callers go
-- one after another instead of all asking again at once.
local ppace = math.max(math.floor(pace / 10), 1)
local ptat = math.max(tonumber(redis.call('HGET', KEYS[4], 'tat') or '0'), now - ppace)
local function reserve()
  -- Kept to the microsecond: rounded up to the millisecond, a 5-unit call
  -- at 6,000 units a minute (51.02 ms) would cost 52 ms, 2% of the rate.
  redis.call('HSET', KEYS[4], 'tat', string.format('%.3f', ptat + cost * window / pcap))
  redis.call('PEXPIRE', KEYS[4], ttl)
end
-- turn refuses a paced caller that must wait w: it reserves its turn,
-- unless it will not wait that long (it hands its task back: a turn
-- nobody takes would hold the pace back).
local function turn(w, why)
  if within > 0 and w > within then return refuse(w, why, 0) end
  reserve()
  return refuse(w, why, 1)
end
-- pwait: how long the project's pace holds a caller back.
local pwait = ptat - now - ppace
local c = math.min(cost, cap)
if uused + c > cap then
  -- Work below live waits until a tenth of the window has freed, not
  -- for the next bucket: in a busy window the units that trickle out are
  -- live work's own, which it takes again as they leave, and a caller
  -- polling for them each second only gives up at MaxWait and hands its
  -- task back, to come back late (the task engine's schedule) when its
  -- burst leaves the window.
  local need = c
  if prio > 0 and pace > 0 then need = math.min(math.max(c, math.floor(ueff / 10)), ucap) end
  local w = waitFor(ulist, uused, cap - need)
  if firstEnds > 0 and uused + need <= ucap then
    -- Or until the first window's share has shrunk enough.
    local grown = firstEnds - 3 * window * (ueff - uused - need) / ueff
    w = math.min(w, math.max(math.ceil(grown - now), 1))
  end
  return refuse(w, 3)
end
local pc = math.min(cost, pcapw)
if pused + pc > pcapw then
  local w = waitFor(plist, pused, pcapw - pc)
  -- Full project window: a paced caller takes its turn in the project's
  -- pace all the same (the later of the two waits), so the pace does not
  -- lapse while the window is full and hand the units that leave it to
  -- whoever asks first.
  if paced then return turn(math.ceil(math.max(w, pwait)), 4) end
  return refuse(w, 4)
end
if paced and pwait > 0 then return turn(math.ceil(pwait), 6) end
if pace > 0 and reserved == 0 then reserve() end
local cur = tostring(math.floor(now / bm))
redis.call('HINCRBY', KEYS[1], cur, cost)
redis.call('PEXPIRE', KEYS[1], math.ceil(window * 2))
redis.call('HINCRBY', KEYS[3], cur, cost)
redis.call('PEXPIRE', KEYS[3], math.ceil(window * 2))
redis.call('INCRBY', KEYS[5], cost)
redis.call('EXPIRE', KEYS[5], 172800)
-- The priority's waiting mark goes once a call as large as the largest
-- refused is served; a smaller one may be another caller's (a 5-unit call
-- still fits where a 10-unit one did not) while the one refused waits, or
-- has handed its task back until its wait is over.
if cost >= tonumber(redis.call('HGET', KEYS[2], 'c' .. prio) or '0') then
  redis.call('HDEL', KEYS[2], 'd' .. prio, 'c' .. prio)
end
return {1, 0, uused + cost, ueff, 0, 0}
`)

// refusedScript: KEYS as budgetKeys, then the log of refusals that named
// no scope; ARGV now_ms, window_ms, buckets, recover_ms, user limit,
// project limit, kind (1 user, 2 project, 3 concurrent, 4 unscoped),
// blocked-until ms, account. Returns {the shrunk limit (0 for concurrent),
// the kind applied}: an unscoped refusal is applied as the account's or
// the project's (see Budget.Refused).
var refusedScript = redis.NewScript(budgetLib + `
local ulim = tonumber(ARGV[5])
local plim = tonumber(ARGV[6])
local kind = tonumber(ARGV[7])
local until_ = tonumber(ARGV[8])
local account = ARGV[9]
local ttl = math.ceil(window * 20)
local function shrink(bkey, skey, setting)
  local used = load(bkey)
  local e = limit(skey, setting)
  local ne = math.max(math.floor(setting / 100), 1, math.floor(math.min(e, used) * 0.9))
  if ne < e then redis.call('HSET', skey, 'eff', ne, 'at', now) end
  local b = tonumber(redis.call('HGET', skey, 'blocked') or '0')
  if until_ > b then redis.call('HSET', skey, 'blocked', until_) end
  redis.call('PEXPIRE', skey, ttl)
  return ne
end
if kind == 4 then
  -- Another account refused without a scope within the window: the
  -- project's. Else the account's.
  redis.call('HSET', KEYS[6], account, now)
  redis.call('PEXPIRE', KEYS[6], math.ceil(window * 2))
  local raw = redis.call('HGETALL', KEYS[6])
  kind = 1
  for i = 1, #raw, 2 do
    local at = tonumber(raw[i + 1])
    if at <= now - window then
      redis.call('HDEL', KEYS[6], raw[i])
    elseif raw[i] ~= account then
      kind = 2
    end
  end
end
if kind == 2 then
  return {shrink(KEYS[3], KEYS[4], plim), 2}
end
if kind == 3 then
  local b = tonumber(redis.call('HGET', KEYS[2], 'blocked') or '0')
  if until_ > b then redis.call('HSET', KEYS[2], 'blocked', until_) end
  redis.call('PEXPIRE', KEYS[2], ttl)
  return {0, 3}
end
return {shrink(KEYS[1], KEYS[2], ulim), 1}
`)

// resumeScript: an account without budget state starts at half its
// setting (growing back). KEYS user state, user buckets;
// ARGV now_ms, setting, ttl_ms.
var resumeScript = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'eff', math.floor(tonumber(ARGV[2]) / 2), 'at', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// Grant is the budget's answer to one request for units.
type Grant struct {
	OK bool
	// Wait is, when refused, how long until the units may be there.
	Wait time.Duration
	// Used is the account's units in the window (with these, when granted);
	// Limit its effective limit now.
	Used, Limit int
	// Reason names a refusal.
	Reason string
	// At is when the units were stamped, when granted (see Settle).
	At time.Time
	// Reserved: refused by the pace, the caller's turn is reserved; it
	// asks again after Wait with TrySpendReserved.
	Reserved bool
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The spend script's refusals for the project's window and the project's
// pace: no account's call of that priority could run meanwhile.
const (
	reasonProject     = 4
	reasonProjectPace = 6
)

var refusalReasons = []string{"", "blocked after Google refused", "more urgent work of the account waits",
	"the account's quota", "the project's quota",
	"pacing: the account's work below live spends its window evenly (no longer given)",
	"pacing: work below live spends the project's window evenly"}

// reasonLost names a refusal because the broker lost the window.
const reasonLost = "the broker lost the quota window (a restart?): it counts as fully spent"

// lostUntil returns until when the windows count as fully spent because
// the broker lost them (BudgetConfig.SpentUntil); zero when they do not.
func (b *Budget) lostUntil(now time.Time) time.Time {
	if b.cfg.SpentUntil == nil {
		return time.Time{}
	}
	until := b.cfg.SpentUntil(b.cfg.Window + b.cfg.Margin)
	if !until.After(now) {
		return time.Time{}
	}
	return until
}

// TrySpend takes units of the account's budget at priority p, or tells how
// long to wait. A caller refused by the pace has reserved its turn
// (Grant.Reserved) and asks again after Wait with TrySpendReserved.
func (b *Budget) TrySpend(ctx context.Context, account string, units int, p Priority) (Grant, error) {
	return b.TrySpendReserved(ctx, account, units, p, false)
}

// TrySpendReserved is TrySpend for a caller that has reserved its turn in
// the pace (reserved) or not.
func (b *Budget) TrySpendReserved(ctx context.Context, account string, units int, p Priority, reserved bool) (Grant, error) {
	return b.trySpend(ctx, account, units, p, reserved, 0)
}

// trySpend is TrySpendReserved for a caller that waits at most within for
// a pace turn (longer: it reserves none); 0 no limit.
func (b *Budget) trySpend(ctx context.Context, account string, units int, p Priority, reserved bool, within time.Duration) (Grant, error) {
	now := b.cfg.Now()
	if until := b.lostUntil(now); !until.IsZero() {
		return Grant{Wait: until.Sub(now), Reason: reasonLost}, nil
	}
	res, err := b.run(ctx, spendScript, b.keys(account, now), now,
		units, int(p), b.pace, boolInt(reserved), within.Milliseconds()).Int64Slice()
	if err != nil {
		return Grant{}, fmt.Errorf("google: gmail quota of account %s: %w", account, err)
	}
	if len(res) != 6 {
		return Grant{}, fmt.Errorf("google: gmail quota of account %s: script answered %v", account, res)
	}
	g := Grant{OK: res[0] == 1, Wait: time.Duration(res[1]) * time.Millisecond, Used: int(res[2]), Limit: int(res[3]),
		Reserved: res[5] == 1}
	if int(res[4]) < len(refusalReasons) {
		g.Reason = refusalReasons[res[4]]
	}
	if g.OK {
		g.At = now
		b.units.Add(float64(units))
		b.mine.add(now, units, b.cfg.Window)
	}
	return g, nil
}

// bucket returns the index of the window's bucket that holds t, as the
// scripts compute it.
func (b *Budget) bucket(t time.Time) int64 {
	bm := float64((b.cfg.Window + b.cfg.Margin).Milliseconds()) / budgetBuckets
	return int64(math.Floor(float64(t.UnixMilli()) / bm))
}

// Settle stamps the units of a call granted at (Grant.At) again, now that
// Google has answered it: they move to the bucket of now, for the account
// and the project. Google counted the call when it arrived, between the
// grant and its answer, so from now on the budget holds its units at least
// as long as Google does, however long the call waited for an in-flight
// slot or on the network. Nothing is written when the call ended in the
// bucket it began in (most calls), nor for a call longer than the window.
func (b *Budget) Settle(ctx context.Context, account string, units int, at time.Time) error {
	now := b.cfg.Now()
	from, to := b.bucket(at), b.bucket(now)
	if to <= from || to-from >= budgetBuckets || units <= 0 {
		return nil
	}
	k := b.keys(account, now)
	// In one MULTI: a spend between the two moves would see the call's
	// units in neither bucket and let that many too many through.
	_, err := b.store().TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, key := range []string{k[0], k[2]} {
			p.HIncrBy(ctx, key, strconv.FormatInt(from, 10), -int64(units))
			p.HIncrBy(ctx, key, strconv.FormatInt(to, 10), int64(units))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("google: gmail quota of account %s: settle: %w", account, err)
	}
	return nil
}

// Spend takes units of the account's budget at ctx's priority, waiting in
// the task while the wait is short, and returns a refusal (Refused,
// wrapping ErrQuotaWait) naming the wait once waiting would pass MaxWait.
func (b *Budget) Spend(ctx context.Context, account string, units int) error {
	_, err := b.spend(ctx, account, units)
	return err
}

// spend is Spend, returning when the units were stamped.
func (b *Budget) spend(ctx context.Context, account string, units int) (time.Time, error) {
	p := PriorityOf(ctx)
	waited, reserved := time.Duration(0), false
	for {
		g, err := b.trySpend(ctx, account, units, p, reserved, max(b.cfg.MaxWait-waited, time.Millisecond))
		if err != nil {
			return time.Time{}, err
		}
		if g.OK {
			return g.At, nil
		}
		reserved = g.Reserved
		b.waits.Inc()
		if waited+g.Wait > b.cfg.MaxWait {
			cause, scope := ErrQuotaWait, ScopeAccount
			if g.Reason == refusalReasons[reasonProject] || g.Reason == refusalReasons[reasonProjectPace] {
				cause, scope = ErrProjectQuotaWait, ScopeProject
			}
			return time.Time{}, &Refused{Err: fmt.Errorf("google: account %s, %s call of %d units: %s: %w",
				account, p, units, g.Reason, cause), RetryAfter: handBack(g.Wait), Scope: scope}
		}
		if err := b.cfg.Wait(ctx, g.Wait); err != nil {
			return time.Time{}, err
		}
		waited += g.Wait
	}
}

// handBackLead is how much earlier than the budget's wait a task handed
// back asks to come back. The task engine brings a task back on its
// whole-second schedule, checked every second or so, so a task that asks
// for the exact wait comes back up to a couple of seconds after its units
// are there, and work waiting for a window's burst to leave loses that
// much of every window. Back a little early, the call waits the rest in
// its task (well under MaxWait).
const handBackLead = 2 * time.Second

// handBack is the RetryAfter of a task handed back for a budget wait:
// handBackLead early, and never less than half the wait.
func handBack(wait time.Duration) time.Duration {
	return max(wait-handBackLead, wait/2)
}

// sleep is BudgetConfig.Wait's default: a timer, ended by ctx.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// acquire holds one of the account's in-flight slots until release. An
// account's slots are forgotten when no caller holds or waits for one.
func (b *Budget) acquire(ctx context.Context, account string) (release func(), err error) {
	b.mu.Lock()
	s := b.inFlight[account]
	if s == nil {
		s = &slots{sem: make(chan struct{}, b.cfg.MaxInFlight)}
		b.inFlight[account] = s
	}
	s.users++
	b.mu.Unlock()
	leave := func() {
		b.mu.Lock()
		if s.users--; s.users == 0 {
			delete(b.inFlight, account)
		}
		b.mu.Unlock()
	}
	select {
	case s.sem <- struct{}{}:
		return func() { <-s.sem; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// unscopedKey is the log of the accounts refused without a scope named,
// with when: a hash in the budget's Redis Cluster slot.
const unscopedKey = budgetPrefix + "p:unscoped"

// Refused records that Google refused a call of the account for quota.
// A refusal of the account (ScopeAccount) shrinks the account's budget to
// 90% of what it spent in the window (at least 1% of the setting) and
// blocks the account's calls until retry has passed; the project's budget
// is untouched, so one busy mailbox never slows the others. A refusal of
// the project (ScopeProject) does the same to the project's budget and
// every account's calls: no account is singled out for the project's
// limit. ScopeConcurrent blocks the account until retry without
// shrinking anything (its calls in flight, not its units, were too many).
// A budget shrunk grows back by 10% a window (Recover).
//
// A refusal that names no scope (ScopeUnscoped) could be either. It is
// charged to the account, unless another account was refused without a
// scope within the window, and then to the project. This keeps both
// promises as well as an answer that says nothing allows: a single busy
// mailbox over its own minute (the usual cause: elie222/inbox-zero issue
// 379 saw 429 "Resource has been exhausted" on one account) shrinks only
// itself, however often it is refused; the project's limit, once reached,
// refuses every account that calls, so a second account refused the same
// way within the window shows it, and from then the project's budget
// shrinks and no single account is left to carry it. Charging the project
// at the first unscoped refusal would let one mailbox shrink every
// account's budget (the fault of issue 21); never charging it would leave
// each account to learn the project's limit alone, one refusal each.
func (b *Budget) Refused(ctx context.Context, account string, kind Scope, retry time.Duration) error {
	now := b.cfg.Now()
	until := now.Add(retry).UnixMilli()
	keys := append(b.keys(account, now), unscopedKey)
	res, err := b.run(ctx, refusedScript, keys, now, int(kind), until, account).Int64Slice()
	if err != nil {
		return fmt.Errorf("google: gmail quota refusal of account %s: %w", account, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("google: gmail quota refusal of account %s: script answered %v", account, res)
	}
	b.log.Warn("Google refused a Gmail call for quota", "account_id", account, "refused", kind.String(),
		"charged_to", Scope(res[1]).String(), "retry_after", retry.String(), "budget_now", res[0])
	return nil
}

// Resume starts an account this process has not spent for yet, but which
// may have spent before a restart, at half its setting (growing back by
// 10% a window), unless the broker still holds its budget. A crash never resets
// the budget to full. With BudgetConfig.SpentUntil it does nothing: the
// hook knows whether the broker lost the windows, and a lost window counts
// as fully spent until it has passed (more exact than half a budget for
// several minutes, and it covers the project's window too).
func (b *Budget) Resume(ctx context.Context, account string) error {
	if b.cfg.SpentUntil != nil {
		return nil
	}
	now := b.cfg.Now()
	k := b.keys(account, now)
	ttl := (20 * b.cfg.Window).Milliseconds()
	if err := resumeScript.Run(ctx, b.store(), []string{k[1], k[0]}, now.UnixMilli(), b.cfg.UserUnits, ttl).Err(); err != nil {
		return fmt.Errorf("google: resume gmail quota of account %s: %w", account, err)
	}
	return nil
}

// Usage is an account's use of its budget now.
type Usage struct {
	// Used is the account's units in the current window; Limit its
	// effective limit (below Setting after Google refused); Setting the
	// configured limit.
	Used, Limit, Setting int
	// ProjectUsed and ProjectLimit are the project's.
	ProjectUsed, ProjectLimit int
	// Today is the project's units today (UTC), against
	// DailyBillingThreshold.
	Today int64
	// Waiting lists the priorities with calls waiting for budget: a call
	// refused whose wait is not over, whatever was granted since (its
	// task may sleep in its queue, handed back).
	Waiting []Priority
	// BlockedUntil is set while Google's retry time holds calls back.
	BlockedUntil time.Time
	// LostUntil is set while the windows count as fully spent because the
	// broker lost them (BudgetConfig.SpentUntil).
	LostUntil time.Time
}

var usageScript = redis.NewScript(budgetLib + `
local ulim = tonumber(ARGV[5])
local plim = tonumber(ARGV[6])
local uused = load(KEYS[1])
local ueff, ublocked = limit(KEYS[2], ulim)
local pused = load(KEYS[3])
local peff, pblocked = limit(KEYS[4], plim)
local today = tonumber(redis.call('GET', KEYS[5]) or '0')
local w = {}
for q = 0, 2 do
  if tonumber(redis.call('HGET', KEYS[2], 'w' .. q) or '0') > now then w[#w + 1] = q end
end
return {uused, ueff, pused, peff, today, math.max(ublocked, pblocked), w}
`)

// Usage reports the account's use of its budget.
func (b *Budget) Usage(ctx context.Context, account string) (Usage, error) {
	now := b.cfg.Now()
	v, err := b.run(ctx, usageScript, b.keys(account, now), now).Slice()
	if err != nil {
		return Usage{}, fmt.Errorf("google: gmail quota use of account %s: %w", account, err)
	}
	if len(v) != 7 {
		return Usage{}, fmt.Errorf("google: gmail quota use of account %s: script answered %v", account, v)
	}
	n := func(i int) int64 { x, _ := v[i].(int64); return x }
	u := Usage{Used: int(n(0)), Limit: int(n(1)), Setting: b.cfg.UserUnits, ProjectUsed: int(n(2)),
		ProjectLimit: int(n(3)), Today: n(4)}
	if bl := n(5); bl > now.UnixMilli() {
		u.BlockedUntil = time.UnixMilli(bl)
	}
	u.LostUntil = b.lostUntil(now)
	if ws, ok := v[6].([]any); ok {
		for _, w := range ws {
			if q, ok := w.(int64); ok {
				u.Waiting = append(u.Waiting, Priority(q))
			}
		}
	}
	return u, nil
}
