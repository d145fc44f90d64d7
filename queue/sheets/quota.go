package sheets

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// scripter is the part of a Redis client the quota needs.
type scripter interface {
	redis.Scripter
	ZCount(ctx context.Context, key, min, max string) *redis.IntCmd
	ZCard(ctx context.Context, key string) *redis.IntCmd
	ZAddXX(ctx context.Context, key string, members ...redis.Z) *redis.IntCmd
}

// Quota counts Sheets write calls per Google account in the broker, so
// that every process sharing the broker shares the count.
//
// It is a sliding log, not a token bucket: Google counts the writes of any
// rolling minute, and a bucket refilled at limit/minute lets limit+1 calls
// into some minute after a burst. The log (a sorted set of call times)
// admits a call only while fewer than Limit calls lie in the last Window.
//
// A call is counted from when the quota grants it, and counted again
// (Settle) from when it returns: Google counts it when it arrives, which is
// somewhere in between, so the later stamp keeps the log's window over
// Google's whatever the delay between the grant and the call (a bbolt
// commit, a slow connection). The window must be longer than a call may
// take (the pipeline keeps its write timeout under the window), so a
// call in flight never leaves the log before it is settled.
//
// Fairness: forms of one account take turns. A refused form joins the
// account's waiting line (a sorted set scored by when it first waited) and
// keeps its place until it is served. A free slot goes to a caller only
// when fewer waiters are ahead of it than there are free slots, so a busy
// form that comes back for its next batch queues behind every form that
// waited before it: one write per waiting form per turn (round robin, the
// oldest waiter first). Each refusal names the wait until the slot that
// would serve the caller frees, so waiters come back about when it is
// theirs. A waiter that does not come back within Grace of its turn (its
// task was dead-lettered, its form deleted) loses its place, so a vanished
// form cannot hold a slot forever.
type Quota struct {
	rdb    scripter
	limit  int
	window time.Duration
	grace  time.Duration
	now    func() time.Time
}

// QuotaConfig configures a Quota. Zero values take the defaults named.
type QuotaConfig struct {
	// Limit is the number of write calls allowed per Window. Default 60.
	Limit int
	// Window is the rolling window. Default one minute. The log keeps each
	// call a little longer (Margin), because Google counts a call when it
	// arrives, a moment after we count it.
	Window time.Duration
	// Margin is added to Window. Default min(1s, Window/20).
	Margin time.Duration
	// Grace is how long past its turn a waiter keeps its place.
	// Default max(2s, Window/4).
	Grace time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// NewQuota returns the quota over the broker client rdb.
func NewQuota(cfg QuotaConfig, rdb scripter) *Quota {
	if cfg.Limit <= 0 {
		cfg.Limit = 60
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Quota{rdb: rdb, limit: cfg.Limit, window: cfg.Window + cfg.Margin, grace: cfg.Grace, now: cfg.Now}
}

// Grant is the quota's answer to one caller.
type Grant struct {
	// OK: the call may be made now (and is counted).
	OK bool
	// Wait is, when refused, how long until the caller's turn.
	Wait time.Duration
	// Used is the number of calls in the window, this one included.
	Used int
	// Slot names the granted call's entry, for Settle.
	Slot string
}

// acquireScript: KEYS log, waiters, due; ARGV now_ms, window_ms, limit,
// waiter, grace_ms, member. Returns {granted, wait_ms, used}.
var acquireScript = redis.NewScript(`
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local waiter = ARGV[4]
local grace = tonumber(ARGV[5])
local member = ARGV[6]

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, w in ipairs(gone) do
  if w ~= waiter then
    redis.call('ZREM', KEYS[2], w)
    redis.call('ZREM', KEYS[3], w)
  end
end

local used = redis.call('ZCARD', KEYS[1])
local free = limit - used
local rank = redis.call('ZRANK', KEYS[2], waiter)
local ahead = rank
if not ahead then ahead = redis.call('ZCARD', KEYS[2]) end

if free > ahead then
  redis.call('ZADD', KEYS[1], now, member)
  redis.call('PEXPIRE', KEYS[1], window + 1000)
  if rank then
    redis.call('ZREM', KEYS[2], waiter)
    redis.call('ZREM', KEYS[3], waiter)
  end
  return {1, 0, used + 1}
end

if not rank then
  redis.call('ZADD', KEYS[2], now, waiter)
end
-- The caller is served once (ahead - free + 1) more calls have left the
-- window; the calls leave in time order, and every waiter served before it
-- adds one that leaves a window later.
local j = ahead - free
local wait
if used == 0 then
  wait = math.floor(window / limit)
else
  local cycle = math.floor(j / used)
  local idx = j % used
  local at = redis.call('ZRANGE', KEYS[1], idx, idx, 'WITHSCORES')
  wait = tonumber(at[2]) + window * (cycle + 1) - now
end
if wait < 1 then wait = 1 end
redis.call('ZADD', KEYS[3], now + wait + grace, waiter)
local ttl = wait + grace + window
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('PEXPIRE', KEYS[3], ttl)
return {0, wait, used}
`)

func quotaKeys(account string) []string {
	// The hash tag keeps an account's keys in one Redis Cluster slot.
	p := "mailroom:sheets:quota:{" + account + "}:"
	return []string{p + "log", p + "waiters", p + "due"}
}

// Acquire asks for one write call of account on behalf of waiter (a form
// id): granted now, or refused with the wait until the caller's turn.
func (q *Quota) Acquire(ctx context.Context, account, waiter string) (Grant, error) {
	now := q.now().UnixMilli()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	member := fmt.Sprintf("%d:%s:%s", now, waiter, hex.EncodeToString(rnd[:]))
	res, err := acquireScript.Run(ctx, q.rdb, quotaKeys(account),
		now, q.window.Milliseconds(), q.limit, waiter, q.grace.Milliseconds(), member).Int64Slice()
	if err != nil {
		return Grant{}, fmt.Errorf("sheets: quota of account %s: %w", account, err)
	}
	if len(res) != 3 {
		return Grant{}, fmt.Errorf("sheets: quota of account %s: script answered %v", account, res)
	}
	g := Grant{OK: res[0] == 1, Wait: time.Duration(res[1]) * time.Millisecond, Used: int(res[2])}
	if g.OK {
		g.Slot = member
	}
	return g, nil
}

// Settle stamps a granted call with the time it returned, so that it stays
// in the window for a whole window after Google saw it. Call it after the
// call, whatever its outcome.
func (q *Quota) Settle(ctx context.Context, account string, g Grant) error {
	if !g.OK || g.Slot == "" {
		return nil
	}
	err := q.rdb.ZAddXX(ctx, quotaKeys(account)[0], redis.Z{Score: float64(q.now().UnixMilli()), Member: g.Slot}).Err()
	if err != nil {
		return fmt.Errorf("sheets: settle quota slot of account %s: %w", account, err)
	}
	return nil
}

// QuotaUse is one account's use of its write quota.
type QuotaUse struct {
	// Used is the number of write calls in the current window.
	Used int
	// Limit is the most calls per window.
	Limit int
	// Waiting is the number of forms waiting for a slot.
	Waiting int
}

// Usage reports the account's use of its quota now.
func (q *Quota) Usage(ctx context.Context, account string) (QuotaUse, error) {
	keys := quotaKeys(account)
	from := q.now().Add(-q.window).UnixMilli()
	used, err := q.rdb.ZCount(ctx, keys[0], fmt.Sprintf("(%d", from), "+inf").Result()
	if err != nil {
		return QuotaUse{}, fmt.Errorf("sheets: quota use of account %s: %w", account, err)
	}
	waiting, err := q.rdb.ZCard(ctx, keys[1]).Result()
	if err != nil {
		return QuotaUse{}, fmt.Errorf("sheets: quota waiters of account %s: %w", account, err)
	}
	return QuotaUse{Used: int(used), Limit: q.limit, Waiting: int(waiting)}, nil
}
