package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
)

// A broker belongs to one mailroom. Two mailrooms on one Redis take each
// other's tasks (asynq's queues are not named per mailroom), and each
// dead-letters what it cannot find in its own data file. So a mailroom
// holds a lease on its broker: a hash under leaseKey naming the owner,
// renewed every LeaseRenew and ending LeaseTTL after its last renewal. A
// mailroom that finds another's live lease refuses to start.
const (
	leaseKey = "mailroom:broker:owner"
	// LeaseTTL is how long a lease outlives its owner's last renewal: a
	// mailroom killed without a graceful stop holds its broker this long
	// (the same mailroom, restarted, takes its lease back at once).
	LeaseTTL = 30 * time.Second
	// LeaseRenew is how often the owner renews its lease.
	LeaseRenew = 10 * time.Second
)

// Owner names the mailroom that holds a broker: its instance name and the
// id of its data file (two data files are two mailrooms, whatever their
// names).
type Owner struct {
	Instance string
	DataID   string
	Host     string
	PID      int
	Since    time.Time
}

// sameMailroom reports whether o and p are the same mailroom.
func (o Owner) sameMailroom(p Owner) bool {
	return o.Instance == p.Instance && o.DataID == p.DataID
}

// OwnedError is returned by Claim when another mailroom holds the broker.
type OwnedError struct {
	Broker  string // the Redis, as it may be shown (no password)
	Other   Owner
	Expires time.Duration // until the other's lease ends unless renewed
}

func (e *OwnedError) Error() string {
	host := ""
	if e.Other.Host != "" {
		host = fmt.Sprintf(" on host %s (pid %d)", e.Other.Host, e.Other.PID)
	}
	return fmt.Sprintf("broker: the Redis at %s belongs to another mailroom, instance %q%s with data file %s; "+
		"two mailrooms on one broker take each other's tasks. Give this mailroom its own Redis or db number (MAILROOM_REDIS_URL), "+
		"or stop the other one (its lease ends %s after it stops); a fleet shares only MAILROOM_FLEET_REDIS_URL",
		e.Broker, e.Other.Instance, host, e.Other.DataID, LeaseTTL)
}

// ErrLeaseLost is logged when another mailroom took the lease while this one
// held it (this one could not renew it in time).
var ErrLeaseLost = errors.New("broker: another mailroom took this broker's lease")

// claimScript takes the lease when it is free or already ours (the same
// instance and data file: a restart takes its lease back at once);
// otherwise it answers the holder's fields and the lease's time left.
var claimScript = redis.NewScript(`
local id = redis.call('HGET', KEYS[1], 'data_id')
local inst = redis.call('HGET', KEYS[1], 'instance')
if id and (id ~= ARGV[1] or inst ~= ARGV[2]) then
  return {0, redis.call('HGETALL', KEYS[1]), redis.call('PTTL', KEYS[1])}
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'data_id', ARGV[1], 'instance', ARGV[2], 'host', ARGV[3], 'pid', ARGV[4], 'since', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {1}
`)

// renewScript extends the lease while it is ours, or takes it again when it
// ended; 0 when another mailroom holds it.
var renewScript = redis.NewScript(`
local id = redis.call('HGET', KEYS[1], 'data_id')
local inst = redis.call('HGET', KEYS[1], 'instance')
if id and (id ~= ARGV[1] or inst ~= ARGV[2]) then return 0 end
if not id then
  redis.call('HSET', KEYS[1], 'data_id', ARGV[1], 'instance', ARGV[2], 'host', ARGV[3], 'pid', ARGV[4], 'since', ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
`)

// releaseScript ends the lease if it is ours.
var releaseScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'data_id') == ARGV[1] and redis.call('HGET', KEYS[1], 'instance') == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// Lease is this mailroom's hold on its broker: Claim takes it (in the app's
// constructor, before anything is written to the broker), and as a service
// it renews it until Stop, which gives it back. On the embedded store it
// does nothing: that broker lives in this process.
type Lease struct {
	b     *Broker
	owner Owner
	log   *slog.Logger

	lifecycle.Base
}

var _ lifecycle.Service = (*Lease)(nil)

// NewLease returns the lease of owner on b. Owner.Since is set by Claim.
func NewLease(b *Broker, owner Owner) *Lease {
	return &Lease{b: b, owner: owner, log: b.logger.With("instance", owner.Instance)}
}

func (l *Lease) args() []any {
	return []any{l.owner.DataID, l.owner.Instance, l.owner.Host, l.owner.PID,
		l.owner.Since.UTC().Format(time.RFC3339), LeaseTTL.Milliseconds()}
}

// Claim takes the lease, or returns an *OwnedError naming the mailroom that
// holds it.
func (l *Lease) Claim(ctx context.Context) error {
	if l.b.Embedded() {
		return nil
	}
	l.owner.Since = time.Now()
	res, err := claimScript.Run(ctx, l.b.Client(), []string{leaseKey}, l.args()...).Slice()
	if err != nil {
		return fmt.Errorf("broker: claim the broker's lease: %w", err)
	}
	if ok, _ := res[0].(int64); ok == 1 {
		return nil
	}
	return l.ownedError(res)
}

func (l *Lease) ownedError(res []any) error {
	e := &OwnedError{Broker: l.b.ext.describe()}
	if fields, ok := res[1].([]any); ok {
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			v, _ := fields[i+1].(string)
			switch k {
			case "instance":
				e.Other.Instance = v
			case "data_id":
				e.Other.DataID = v
			case "host":
				e.Other.Host = v
			case "pid":
				e.Other.PID, _ = strconv.Atoi(v)
			case "since":
				e.Other.Since, _ = time.Parse(time.RFC3339, v)
			}
		}
	}
	if ms, ok := res[2].(int64); ok && ms > 0 {
		e.Expires = time.Duration(ms) * time.Millisecond
	}
	return e
}

// Start renews the lease every LeaseRenew until Stop.
func (l *Lease) Start(ctx context.Context) error {
	if l.b.Embedded() {
		return nil
	}
	return l.StartLoop(ctx, func(ctx context.Context) {
		lifecycle.Tick(ctx, LeaseRenew, l.renew)
	})
}

func (l *Lease) renew(ctx context.Context) {
	n, err := renewScript.Run(ctx, l.b.Client(), []string{leaseKey}, l.args()...).Int()
	switch {
	case err != nil:
		if ctx.Err() == nil {
			l.log.Warn("renew the broker's lease", "err", err)
		}
	case n == 0:
		l.log.Error("another mailroom holds this broker now; stop one of them", "err", ErrLeaseLost)
	}
}

// Stop ends the renewals and gives the lease back, so that another
// mailroom may use the broker at once.
func (l *Lease) Stop(ctx context.Context) error {
	if l.b.Embedded() {
		return nil
	}
	err := l.Base.Stop(ctx)
	if rerr := releaseScript.Run(ctx, l.b.Client(), []string{leaseKey}, l.owner.DataID, l.owner.Instance).Err(); rerr != nil && !errors.Is(rerr, ErrClosed) {
		err = errors.Join(err, fmt.Errorf("broker: release the lease: %w", rerr))
	}
	return err
}
