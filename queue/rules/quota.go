package rules

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Gmail quota units of the calls the pipeline makes (NOTES.md).
const (
	unitsBatchModify = 50
	unitsGet         = 5
)

// gcra is a generic cell rate algorithm with a cost per call, atomic in the
// broker: the account may spend Units per Period, in bursts of up to Units.
// KEYS[1] the account's theoretical arrival time (µs); ARGV: period µs,
// units, cost. Returns {allowed 0|1, wait µs}.
var gcra = redis.NewScript(`
local period = tonumber(ARGV[1])
local units = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call("GET", KEYS[1]) or "0") or 0
if tat < now then tat = now end
local newtat = tat + cost * period / units
local allowAt = newtat - period
if allowAt > now then
  return {0, math.ceil(allowAt - now)}
end
redis.call("SET", KEYS[1], string.format("%.0f", newtat), "PX", math.ceil((newtat - now) / 1000) + 1000)
return {1, 0}
`)

// Quota spends an account's Gmail quota units in the broker, so every
// worker and process shares one budget per account.
type Quota struct {
	rdb    redis.Scripter
	units  int
	period time.Duration
}

// NewQuota allows units per period per account.
func NewQuota(rdb redis.Scripter, units int, period time.Duration) *Quota {
	return &Quota{rdb: rdb, units: units, period: period}
}

// Spend takes cost units of the account's budget. When they are not there
// it takes nothing and returns how long to wait.
func (q *Quota) Spend(ctx context.Context, accountID string, cost int) (ok bool, wait time.Duration, err error) {
	if cost <= 0 {
		return true, 0, nil
	}
	cost = min(cost, q.units)
	key := "mailroom:rules:gmail-quota:{" + accountID + "}"
	res, err := gcra.Run(ctx, q.rdb, []string{key}, q.period.Microseconds(), q.units, cost).Int64Slice()
	if err != nil {
		return false, 0, fmt.Errorf("rules: gmail quota: %w", err)
	}
	if len(res) != 2 {
		return false, 0, fmt.Errorf("rules: gmail quota: unexpected answer %v", res)
	}
	return res[0] == 1, time.Duration(res[1]) * time.Microsecond, nil
}
