package broker

import (
	"context"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/lifecycle"
)

// A fleet is the mailrooms of one Google project. They share one Redis
// (MAILROOM_FLEET_REDIS_URL) for what the project shares (its Gmail
// units); each says there every FleetBeat that it is alive, so each knows
// how many share the project: when the fleet's Redis does not answer, a
// mailroom spends the project's units divided by the mailrooms it last
// saw.
const (
	fleetKey = "mailroom:fleet:seen"
	// FleetBeat is how often a mailroom says it is alive.
	FleetBeat = 5 * time.Second
	// FleetGone is how long after its last beat a mailroom is no longer
	// counted (a SIGKILLed one frees its share then).
	FleetGone = 20 * time.Second
)

// Fleet is this mailroom's membership of its fleet, as a service: it beats
// until Stop, and leaves the fleet at Stop.
type Fleet struct {
	b    *Broker
	me   string // instance \x00 data file id
	name string
	log  *slog.Logger

	mu   sync.Mutex
	seen []string // instance names seen alive at the last beat
	up   bool

	lifecycle.Base
}

var _ lifecycle.Service = (*Fleet)(nil)

// NewFleet returns the membership of the mailroom owner in the fleet whose
// Redis is b.
func NewFleet(b *Broker, owner Owner) *Fleet {
	return &Fleet{b: b, me: owner.Instance + "\x00" + owner.DataID, name: owner.Instance,
		log: b.logger.With("component", "fleet"), seen: []string{owner.Instance}, up: true}
}

// Client is the fleet's Redis.
func (f *Fleet) Client() redis.UniversalClient { return f.b.Client() }

// Start beats once (a fleet's Redis that does not answer is no error: the
// budgets fall back) and then every FleetBeat until Stop.
func (f *Fleet) Start(ctx context.Context) error {
	r, ok := f.Begin(ctx)
	if !ok {
		return nil // running already
	}
	f.beat(r.Context())
	r.Go(func(ctx context.Context) { lifecycle.Tick(ctx, FleetBeat, f.beat) })
	return nil
}

// Stop ends the beats and leaves the fleet, so the others count one less
// at once.
func (f *Fleet) Stop(ctx context.Context) error {
	err := f.Base.Stop(ctx)
	_ = f.b.Client().HDel(ctx, fleetKey, f.me).Err()
	return err
}

// beatScript records KEYS[1][ARGV[1]] = now and answers the members seen
// within ARGV[3] ms, dropping the older ones.
var beatScript = redis.NewScript(`
local now = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], now)
local raw = redis.call('HGETALL', KEYS[1])
local alive = {}
for i = 1, #raw, 2 do
  if now - tonumber(raw[i + 1]) > tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], raw[i])
  else
    alive[#alive + 1] = raw[i]
  end
end
return alive
`)

func (f *Fleet) beat(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, FleetBeat)
	defer cancel()
	members, err := beatScript.Run(cctx, f.b.Client(), []string{fleetKey}, f.me, time.Now().UnixMilli(), FleetGone.Milliseconds()).StringSlice()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.up && ctx.Err() == nil {
			f.log.Warn("the fleet's Redis does not answer", "err", err)
		}
		f.up = false
		return
	}
	if !f.up {
		f.log.Info("the fleet's Redis answers again")
	}
	f.up = true
	names := make([]string, 0, len(members))
	for _, m := range members {
		name, _, _ := strings.Cut(m, "\x00")
		names = append(names, name)
	}
	sort.Strings(names)
	f.seen = names
}

// Seen returns the instance names of the mailrooms seen alive at the last
// beat that reached the fleet's Redis (this one among them).
func (f *Fleet) Seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

// Share is how many mailrooms share the project: those last seen, at
// least 1.
func (f *Fleet) Share() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(1, len(f.seen))
}

// Up reports whether the fleet's Redis answered the last beat.
func (f *Fleet) Up() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.up
}

// Name is this mailroom's instance name.
func (f *Fleet) Name() string { return f.name }

// String describes the fleet for logs: its members.
func (f *Fleet) String() string {
	return strconv.Itoa(f.Share()) + " mailrooms: " + strings.Join(f.Seen(), ", ")
}
