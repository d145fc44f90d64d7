package rules

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/queue"
	"mailroom/store"
)

// slidingWindow is a sliding-window log, atomic in the broker: one sorted
// set per user holds the times (microseconds) of the saves accepted within
// the window. A save is accepted when fewer than the limit are left after
// dropping the old ones, and is then added. So no window of that length, at
// any offset, ever holds more than the limit (a fixed window lets 2x through
// around its edge; GCRA with a burst of the limit lets nearly 2x through in
// the window after an idle spell).
//
// The time is the broker's (TIME), so several mailroom processes agree,
// unless the caller passes one (ARGV[4], tests). TIME before a write is
// allowed in scripts on Redis 5 and later (effects replication) and on
// miniredis.
//
// KEYS[1] the user's log; ARGV: limit, window µs, member, [now µs].
// Returns {accepted 0|1, retry-after µs, now µs}.
var slidingWindow = redis.NewScript(`
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local now
if ARGV[4] ~= nil and ARGV[4] ~= "" then
  now = tonumber(ARGV[4])
else
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
redis.call("ZREMRANGEBYSCORE", key, "-inf", now - window)
if redis.call("ZCARD", key) < limit then
  redis.call("ZADD", key, now, ARGV[3])
  redis.call("PEXPIRE", key, math.floor(window / 1000) + 1000)
  return {1, 0, now}
end
local oldest = redis.call("ZRANGE", key, 0, 0, "WITHSCORES")
return {0, tonumber(oldest[2]) + window - now, now}
`)

// RedisClient is the part of the broker's client the limiter uses
// (broker.Client() has it).
type RedisClient interface {
	redis.Scripter
	ZRem(ctx context.Context, key string, members ...any) *redis.IntCmd
}

// Limiter is the per-user rule save limit: Limit saves per Window, sliding.
type Limiter struct {
	rdb    RedisClient
	limit  int
	window time.Duration
	// now, when set, replaces the broker's clock (tests).
	now func() time.Time
	// spent, when set, says until when the window must be treated as fully
	// spent because the broker lost its log (queue.Watch.SpentUntil).
	spent func(window time.Duration) time.Time
}

// NewLimiter returns a limiter over the broker client rdb.
func NewLimiter(rdb RedisClient, limit int, window time.Duration) *Limiter {
	return &Limiter{rdb: rdb, limit: limit, window: window}
}

// Reservation is an accepted save's place in the window. Cancel gives it
// back when the save fails after all (only accepted saves count).
type Reservation struct {
	l      *Limiter
	key    string
	member string
	// At is when the broker accepted the save.
	At time.Time
}

// RefusedError is a save refused by the limit.
type RefusedError struct {
	// RetryAfter is when the oldest save in the window leaves it.
	RetryAfter time.Duration
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("rule saves: rate limited, retry in %s", e.RetryAfter)
}

// Reserve takes a place for one save of userID, or returns a
// *RefusedError saying when to retry.
func (l *Limiter) Reserve(ctx context.Context, userID string) (*Reservation, error) {
	if l.spent != nil {
		// The broker lost the log: resume as if the last window were full.
		if until := l.spent(l.window); !until.IsZero() {
			return nil, &RefusedError{RetryAfter: max(time.Until(until), time.Microsecond)}
		}
	}
	key := "mailroom:rules:saves:{" + userID + "}"
	member := store.NewID()
	var now string
	if l.now != nil {
		now = fmt.Sprint(l.now().UnixMicro())
	}
	res, err := slidingWindow.Run(ctx, l.rdb, []string{key}, l.limit, l.window.Microseconds(), member, now).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("rules: save limit: %w", queue.BrokerUnavailable(err))
	}
	if len(res) != 3 {
		return nil, fmt.Errorf("rules: save limit: unexpected answer %v", res)
	}
	if res[0] == 0 {
		return nil, &RefusedError{RetryAfter: max(time.Duration(res[1])*time.Microsecond, time.Microsecond)}
	}
	return &Reservation{l: l, key: key, member: member, At: time.UnixMicro(res[2])}, nil
}

// Cancel removes the reservation from the window.
func (r *Reservation) Cancel(ctx context.Context) error {
	if err := r.l.rdb.ZRem(ctx, r.key, r.member).Err(); err != nil {
		return fmt.Errorf("rules: give back a save: %w", err)
	}
	return nil
}
