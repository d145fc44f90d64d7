package sheets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/queue"
	"mailroom/queue/google"
)

// scripter is the part of a Redis client the quota needs.
type scripter interface {
	redis.Scripter
	ZCount(ctx context.Context, key, min, max string) *redis.IntCmd
	ZCard(ctx context.Context, key string) *redis.IntCmd
	ZAddXX(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd
}

// Quota counts one kind of Sheets call (writes, or reads: Google budgets
// them apart) per Google account and for the whole project in the broker,
// so that every process sharing the broker shares the count
// (developers.google.com/workspace/sheets/api/limits: 60 requests a
// minute per user per project and 300 per project, for reads and writes
// each).
//
// It is a sliding log, not a token bucket: Google counts the calls of any
// rolling minute, and a bucket refilled at limit/minute lets limit+1 calls
// into some minute after a burst. Each log (a sorted set of call times,
// one per account and one for the project) admits a call only while fewer
// than its limit lie in the last Window; a call is admitted only when both
// the account's and the project's logs admit it, and then goes into both,
// in one script.
//
// A call is counted from when the quota grants it, and counted again
// (Settle) from when it returns: Google counts it when it arrives, which is
// somewhere in between, so the later stamp keeps the log's window over
// Google's whatever the delay between the grant and the call (a bbolt
// commit, a slow connection). The window must be longer than a call may
// take (the pipeline keeps its write timeout under the window), so a
// call in flight never leaves the log before it is settled.
//
// Fairness, at both levels: forms of one account take turns for the
// account's budget, and accounts take turns for the project's. A refused
// caller joins a waiting line (a sorted set scored by when it first
// waited): the form in its account's line, the account in the project's
// line, and keeps its place until it is served. A free slot goes to a
// caller only when fewer waiters are ahead of it than there are free
// slots, at each level, so a busy form (or account) that comes back for
// its next call queues behind every one that waited before it: round
// robin, the oldest waiter first, and with many accounts busy no account
// starves. Each refusal names the wait until the slot that would serve the
// caller frees, so waiters come back about when it is theirs. A waiter
// that does not come back within Grace of its turn (its task was
// dead-lettered, its form deleted) loses its place, so a vanished form
// cannot hold a slot forever.
//
// The logs live in the broker, which may forget them (the embedded store
// at every restart; an external Redis restarted without persistence,
// flushed or failed over). The calls of the window before the loss still
// count at Google, so when the broker lost them (SpentUntil, from
// queue.Watch.SpentUntil) the quota resumes as if the last window were
// fully spent: every caller is refused, with the wait until one window
// after the loss, and the broker's count takes over from then.
type Quota struct {
	rdb          scripter
	kind         string
	limit        int
	projectLimit int
	window       time.Duration
	grace        time.Duration
	lead         time.Duration
	now          func() time.Time
	spentUntil   func(window time.Duration) time.Time

	// A fleet's quota: see QuotaConfig.Fallback.
	fallback scripter
	share    func() int
	fleet    google.FleetState
	log      *slog.Logger
}

// QuotaConfig configures a Quota. Zero values take the defaults named.
type QuotaConfig struct {
	// Kind names what is counted: "writes" (default) or "reads"; each kind
	// has its own logs.
	Kind string
	// Limit is the number of calls allowed per Window per account.
	// Default 60.
	Limit int
	// ProjectLimit is the number of calls allowed per Window for all
	// accounts together. Default 300.
	ProjectLimit int
	// Window is the rolling window. Default one minute. The log keeps each
	// call a little longer (Margin), because Google counts a call when it
	// arrives, a moment after we count it.
	Window time.Duration
	// Margin is added to Window. Default min(1s, Window/20).
	Margin time.Duration
	// Grace is how long past its turn a waiter keeps its place.
	// Default max(2s, Window/4).
	Grace time.Duration
	// Lead is how far ahead of the project's rate (ProjectLimit a Window)
	// its calls may run once the project's window nears its limit (has
	// room for no more than Lead's worth of calls beyond those waiting):
	// then one call a Window/ProjectLimit, so the project's slots are
	// spread over the window and waiting accounts are served in turn.
	// While the window has more room the pace does not hold calls back:
	// nobody waits for those slots, and a quiet account's call would only
	// wait behind busy accounts' calls for nothing. Default Window/10.
	Lead time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// SpentUntil, when set, says until when a window of the given length
	// kept in the broker must be treated as fully spent because the broker
	// lost its log (queue.Watch.SpentUntil); the zero time when it need
	// not. Nil: the broker's log is trusted.
	SpentUntil func(window time.Duration) time.Time
	// Fallback, when set, makes rdb a fleet's Redis (the mailrooms of one
	// Google project share the project's Sheets calls there) and is
	// where the logs are kept while it does not answer: this mailroom's
	// broker, with ProjectLimit divided by Share, the mailrooms it last
	// saw, as the Gmail budget does (queue/google's fleet.go). Nil: rdb
	// alone.
	Fallback scripter
	// Share is how many mailrooms share the project; nil: one.
	Share func() int
	// Logger says when the fleet's Redis stops or starts answering.
	// Default slog.Default().
	Logger *slog.Logger
}

// NewQuota returns the quota over the broker client rdb.
func NewQuota(cfg QuotaConfig, rdb scripter) *Quota {
	if cfg.Kind == "" {
		cfg.Kind = "writes"
	}
	if cfg.Limit <= 0 {
		cfg.Limit = 60
	}
	if cfg.ProjectLimit <= 0 {
		cfg.ProjectLimit = 300
	}
	if cfg.Window <= 0 {
		cfg.Window = time.Minute
	}
	if cfg.Margin <= 0 {
		cfg.Margin = min(time.Second, cfg.Window/20)
	}
	if cfg.Grace <= 0 {
		cfg.Grace = max(2*time.Second, cfg.Window/4)
	}
	if cfg.Lead <= 0 {
		cfg.Lead = cfg.Window / 10
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Quota{rdb: rdb, kind: cfg.Kind, limit: cfg.Limit, projectLimit: cfg.ProjectLimit,
		window: cfg.Window + cfg.Margin, grace: cfg.Grace, lead: cfg.Lead, now: cfg.Now, spentUntil: cfg.SpentUntil,
		fallback: cfg.Fallback, share: cfg.Share, log: cfg.Logger}
}

// FleetDown reports whether the logs are kept in the fallback because the
// fleet's Redis does not answer (false without a fleet).
func (q *Quota) FleetDown() bool {
	return q.fallback != nil && q.fleet.IsDown(q.now())
}

// store is where the logs are kept now: the fleet's Redis (or the only
// store), or the fallback while the fleet's Redis does not answer.
func (q *Quota) store() scripter {
	if q.FleetDown() {
		return q.fallback
	}
	return q.rdb
}

// project is the project's calls this mailroom may make a window: all of
// them, or while the fleet's Redis does not answer, its share.
func (q *Quota) project() int {
	if q.FleetDown() {
		return google.ShareOf(q.projectLimit, q.share)
	}
	return q.projectLimit
}

// run runs the acquire script on the store in use (see try).
func (q *Quota) run(ctx context.Context, keys []string, args func() []any) *redis.Cmd {
	var cmd *redis.Cmd
	_ = q.try(func(st scripter) error {
		cmd = acquireScript.Run(ctx, st, keys, args()...)
		return cmd.Err()
	})
	return cmd
}

// try runs fn on the store in use; a fleet's Redis that does not answer
// sends it, and the calls of the next google.FleetRetry, to the fallback.
func (q *Quota) try(fn func(scripter) error) error {
	st := q.store()
	err := fn(st)
	if q.fallback == nil || st == q.fallback {
		return err
	}
	if !google.Unreachable(err) {
		if q.fleet.MarkUp() {
			q.log.Info("the fleet's Redis answers again; the project's Sheets calls are shared through it", "kind", q.kind)
		}
		return err
	}
	if q.fleet.MarkDown(q.now()) {
		q.log.Warn("the fleet's Redis does not answer; counting this mailroom's share of the project's Sheets calls in its own broker",
			"kind", q.kind, "share", q.project(), "err", err)
	}
	return fn(q.fallback)
}

// lostUntil returns until when the whole window counts as spent because
// the broker lost its log (see Quota), or the zero time.
func (q *Quota) lostUntil() time.Time {
	if q.spentUntil == nil {
		return time.Time{}
	}
	return q.spentUntil(q.window)
}

// Grant is the quota's answer to one caller.
type Grant struct {
	// OK: the call may be made now (and is counted).
	OK bool
	// Wait is, when refused, how long until the caller's turn.
	Wait time.Duration
	// Used is the number of the account's calls in the window, this one
	// included.
	Used int
	// Slot names the granted call's entry, for Settle.
	Slot string
}

// acquireScript: KEYS account log, account waiters, account due, project
// log, project waiters, project due, project pace; ARGV now_ms, window_ms,
// account limit, waiter (form), grace_ms, member, project limit, project
// waiter (account), lead_ms. Returns {granted, wait_ms, used}.
var acquireScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local grace = tonumber(ARGV[5])
local member = ARGV[6]

-- One level: its log, line and due keys, its limit and its waiter.
local function level(log, line, due, limit, waiter)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', now - window)
  local gone = redis.call('ZRANGEBYSCORE', due, '-inf', now)
  for _, w in ipairs(gone) do
    if w ~= waiter then
      redis.call('ZREM', line, w)
      redis.call('ZREM', due, w)
    end
  end
  local used = redis.call('ZCARD', log)
  local free = limit - used
  local rank = redis.call('ZRANK', line, waiter)
  local ahead = rank
  if not ahead then ahead = redis.call('ZCARD', line) end
  return {log = log, line = line, due = due, limit = limit, waiter = waiter,
          used = used, free = free, rank = rank, ahead = ahead}
end

-- The wait until the caller's turn at a level that refused it: it is
-- served once (ahead - free + 1) more calls have left the window; the
-- calls leave in time order, and every waiter served before it adds one
-- that leaves a window later.
local function waitOf(l)
  local j = l.ahead - l.free
  if l.used == 0 then return math.floor(window / l.limit) end
  local cycle = math.floor(j / l.used)
  local idx = j % l.used
  local at = redis.call('ZRANGE', l.log, idx, idx, 'WITHSCORES')
  return tonumber(at[2]) + window * (cycle + 1) - now
end

local acct = level(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[3]), ARGV[4])
local proj = level(KEYS[4], KEYS[5], KEYS[6], tonumber(ARGV[7]), ARGV[8])

-- The project's pace: its calls are spread over its window at its rate,
-- at most lead ahead of it (tat: when the calls granted so far would have
-- been paid at that rate). Without it a window's calls were all made at
-- its start, the slots freed all at once a window later, and whoever came
-- back first took them, up to its account's limit, ahead of its turn.
local lead = tonumber(ARGV[9])
local interval = window / proj.limit
local tat = math.max(tonumber(redis.call('GET', KEYS[7]) or '0'), now)
local paced = math.max(math.floor((now + lead - tat) / interval) + 1, 0)
-- The pace binds only while the project's budget is contended: when the
-- window would still have room after a lead's worth of calls beyond the
-- waiters, nobody waits for those slots and spreading the calls would
-- only delay them (a quiet account behind busy ones that are far from
-- the project's limit). Its clock then stays at most lead ahead, so it
-- takes over at its rate once the window nears the limit.
local burst = math.floor(lead / interval)
local room = proj.free - proj.ahead > burst

if acct.free > acct.ahead and proj.free > proj.ahead and (room or paced > proj.ahead) then
  local ntat = tat + interval
  if room then ntat = math.min(ntat, now + lead) end
  redis.call('SET', KEYS[7], string.format('%.3f', ntat), 'PX', math.ceil(window * 2))
  for _, l in ipairs({acct, proj}) do
    redis.call('ZADD', l.log, now, member)
    redis.call('PEXPIRE', l.log, window + 1000)
    if l.rank then
      redis.call('ZREM', l.line, l.waiter)
      redis.call('ZREM', l.due, l.waiter)
    end
  end
  return {1, 0, acct.used + 1}
end

local wait = 1
for _, l in ipairs({acct, proj}) do
  if not (l.free > l.ahead) then
    wait = math.max(wait, waitOf(l))
  end
end
-- The pace serves the caller once it allows ahead + 1 calls.
if not room and not (paced > proj.ahead) then
  wait = math.max(wait, math.ceil(tat + proj.ahead * interval - lead - now))
end
for _, l in ipairs({acct, proj}) do
  if not l.rank then
    redis.call('ZADD', l.line, now, l.waiter)
  end
  redis.call('ZADD', l.due, now + wait + grace, l.waiter)
  local ttl = wait + grace + window
  redis.call('PEXPIRE', l.line, ttl)
  redis.call('PEXPIRE', l.due, ttl)
end
return {0, wait, acct.used}
`)

// quotaKeys are the keys of one level: the account's, or with account ""
// the project's. One hash tag keeps every key the script touches in one
// Redis Cluster slot.
func (q *Quota) quotaKeys(account string) []string {
	p := "mailroom:sheets:quota:{sheets}:"
	if account == "" {
		p += "project:"
	} else {
		p += "account:" + account + ":"
	}
	if q.kind != "writes" {
		p += q.kind + ":"
	}
	return []string{p + "log", p + "waiters", p + "due"}
}

// Acquire asks for one call of account on behalf of waiter (a form id):
// granted now, or refused with the wait until the caller's turn (at the
// account's level or the project's, whichever is later).
func (q *Quota) Acquire(ctx context.Context, account, waiter string) (Grant, error) {
	if until := q.lostUntil(); !until.IsZero() {
		// The broker lost the log: resume as if the last window were full.
		return Grant{Wait: max(until.Sub(q.now()), time.Millisecond), Used: q.limit}, nil
	}
	now := q.now().UnixMilli()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	member := fmt.Sprintf("%d:%s:%s:%s", now, account, waiter, hex.EncodeToString(rnd[:]))
	project := q.quotaKeys("")
	keys := append(append(q.quotaKeys(account), project...), project[0]+":pace")
	res, err := q.run(ctx, keys, func() []any {
		return []any{now, q.window.Milliseconds(), q.limit, waiter, q.grace.Milliseconds(), member, q.project(), account,
			q.lead.Milliseconds()}
	}).Int64Slice()
	if err != nil {
		return Grant{}, fmt.Errorf("sheets: %s quota of account %s: %w", q.kind, account, err)
	}
	if len(res) != 3 {
		return Grant{}, fmt.Errorf("sheets: %s quota of account %s: script answered %v", q.kind, account, res)
	}
	g := Grant{OK: res[0] == 1, Wait: time.Duration(res[1]) * time.Millisecond, Used: int(res[2])}
	if g.OK {
		g.Slot = member
	}
	return g, nil
}

// Settle stamps a granted call with the time it returned, so that it stays
// in the windows for a whole window after Google saw it. Call it after the
// call, whatever its outcome.
func (q *Quota) Settle(ctx context.Context, account string, g Grant) error {
	if !g.OK || g.Slot == "" {
		return nil
	}
	z := redis.Z{Score: float64(q.now().UnixMilli()), Member: g.Slot}
	for _, k := range []string{q.quotaKeys(account)[0], q.quotaKeys("")[0]} {
		if err := q.store().ZAddXX(ctx, k, z).Err(); err != nil {
			return fmt.Errorf("sheets: settle %s quota slot of account %s: %w", q.kind, account, err)
		}
	}
	return nil
}

// QuotaUse is one account's use of a quota.
type QuotaUse struct {
	// Used is the number of the account's calls in the current window.
	Used int
	// Limit is the most calls per window per account.
	Limit int
	// Waiting is the number of the account's forms waiting for a slot.
	Waiting int
	// ProjectUsed and ProjectLimit are the same for all accounts together
	// (while FleetDown, this mailroom's share of the project's).
	ProjectUsed, ProjectLimit int
	// FleetDown: the fleet's Redis does not answer, and the counts are
	// this mailroom's own, within its share of the project's limit.
	FleetDown bool
	// SpentUntil is set while the window counts as fully spent because
	// the broker lost its log (see Quota); Used and ProjectUsed then show
	// the limits.
	SpentUntil time.Time
}

// Usage reports the account's use of its quota now.
func (q *Quota) Usage(ctx context.Context, account string) (QuotaUse, error) {
	from := fmt.Sprintf("(%d", q.now().Add(-q.window).UnixMilli())
	keys := q.quotaKeys(account)
	var used, waiting, project int64
	err := q.try(func(st scripter) (err error) {
		if used, err = st.ZCount(ctx, keys[0], from, "+inf").Result(); err != nil {
			return fmt.Errorf("sheets: quota use of account %s: %w", account, err)
		}
		if waiting, err = st.ZCard(ctx, keys[1]).Result(); err != nil {
			return fmt.Errorf("sheets: quota waiters of account %s: %w", account, err)
		}
		if project, err = st.ZCount(ctx, q.quotaKeys("")[0], from, "+inf").Result(); err != nil {
			return fmt.Errorf("sheets: project quota use: %w", err)
		}
		return nil
	})
	if err != nil {
		return QuotaUse{}, err
	}
	u := QuotaUse{Used: int(used), Limit: q.limit, Waiting: int(waiting), ProjectUsed: int(project), ProjectLimit: q.project(), FleetDown: q.FleetDown()}
	if until := q.lostUntil(); !until.IsZero() {
		u.Used, u.ProjectUsed, u.SpentUntil = q.limit, q.project(), until
	}
	return u, nil
}

// spend makes one Sheets call from quota q (reads or writes) for account
// on behalf of waiter (a form id): the quota first, then the call under a
// timeout kept within most of the window (see Quota), then the slot
// settled. Over the quota it does not call: with waitUpTo > 0 it waits for
// its turn when that comes within waitUpTo (a request a person waits on;
// a flush task's short wait, see Config.BrokerTick), else it returns a
// rate-limited error naming the wait (a task comes back then, without
// counting a failure).
func (p *Pipeline) spend(ctx context.Context, q *Quota, account, waiter string, waitUpTo time.Duration, call func(ctx context.Context) error) error {
	deadline := time.Now().Add(waitUpTo)
	for {
		g, err := q.Acquire(ctx, account, waiter)
		if err != nil {
			return err
		}
		if !g.OK {
			p.metrics.quotaWaits.Inc()
			if time.Now().Add(g.Wait).After(deadline) {
				return queue.RateLimited(fmt.Errorf("sheets: %s of account %s for %s: %w", q.kind, account, waiter, ErrQuota), g.Wait)
			}
			if err := queue.Wait(ctx, g.Wait); err != nil {
				return err
			}
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, min(p.cfg.CallTimeout, p.cfg.QuotaWindow*9/10))
		err = call(cctx)
		cancel()
		if serr := q.Settle(context.WithoutCancel(ctx), account, g); serr != nil {
			p.log.Warn("settle quota slot", "kind", q.kind, "account_id", account, "err", serr)
		}
		return err
	}
}
