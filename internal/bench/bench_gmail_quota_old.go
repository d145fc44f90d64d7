package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"

	"mailroom/queue"
	"mailroom/queue/google"
)

// oldLimiters reproduces, around the Google clients' HTTP transport, the
// Gmail quota of the design before one budget per account (commit 3d0a674
// removed it), for the scenario's one account, with time compressed by
// scale as the emulator's quota minute is:
//
//   - the Gmail pipeline's in-process token bucket (queue/gmail/quota.go):
//     250 units a second, bursts of 1,000, a wait of up to 2 s in the
//     task, a longer one hands the task back (rate limited). It was spent
//     by history.list, messages.list, messages.get, labels.list,
//     getProfile, watch and stop, at each call's cost;
//   - the rules pipeline's GCRA in the broker (queue/rules/quota.go): 10,000
//     units a minute, bursts of 10,000, spent by the reclassify's
//     batchModify calls and body fetches; any wait hands the batch back.
//
// messages.modify (the rules on new mail) and labels.create spent from
// neither, as then. A call is the reclassify's when its context carries
// google.PriorityReclassify (the batch handler marks it).
type oldLimiters struct {
	base    http.RoundTripper
	prices  google.Prices
	gmail   *rate.Limiter
	maxWait time.Duration
	window  time.Duration

	mu  sync.Mutex
	rdb redis.Scripter // the app's broker, set once it runs
}

// The old rules pipeline's quota share and the old Gmail pipeline's rate.
const (
	oldRulesUnitsPerMinute = 10_000
	oldGmailUnitsPerSecond = 250
	oldGmailBurst          = 1000
	oldGmailMaxWait        = 2 * time.Second
)

func newOldLimiters(scale int) *oldLimiters {
	return &oldLimiters{
		base:    http.DefaultTransport,
		prices:  benchPrices(),
		gmail:   rate.NewLimiter(rate.Limit(oldGmailUnitsPerSecond*scale), oldGmailBurst),
		maxWait: oldGmailMaxWait / time.Duration(scale),
		window:  time.Minute / time.Duration(scale),
	}
}

// setBroker gives the rules limiter the app's broker.
func (l *oldLimiters) setBroker(rdb redis.Scripter) {
	l.mu.Lock()
	l.rdb = rdb
	l.mu.Unlock()
}

// Which old limiter a call spent from.
const (
	oldNone = iota
	oldGmail
	oldRules
)

// oldKind is the cost of a Gmail request at prices pr and the old limiter
// it spent from.
func oldKind(req *http.Request, pr google.Prices) (units, kind int) {
	_, rest, ok := strings.Cut(req.URL.Path, "gmail/v1/users/")
	if !ok {
		return 0, oldNone
	}
	_, rest, _ = strings.Cut(rest, "/") // the user ("me")
	reclassify := google.PriorityOf(req.Context()) == google.PriorityReclassify
	get := req.Method == http.MethodGet
	switch {
	case rest == "messages/batchModify":
		return pr.BatchModify, oldRules
	case get && strings.HasPrefix(rest, "messages/") && strings.Count(rest, "/") == 1:
		if reclassify {
			if req.URL.Query().Get("format") == "full" {
				return pr.MessagesGetBody, oldRules
			}
			return 0, oldNone
		}
		return pr.Get(req.URL.Query().Get("format") == "full"), oldGmail
	case get && strings.HasPrefix(rest, "threads/") && strings.Count(rest, "/") == 1:
		// A full sync's threads.get (the old design had none: it is
		// charged to the limiter its messages.get spent from).
		return pr.ThreadsGet, oldGmail
	case get && rest == "messages":
		return pr.MessagesList, oldGmail
	case get && rest == "history":
		return pr.HistoryList, oldGmail
	case get && rest == "labels" && !reclassify:
		return pr.LabelsList, oldGmail
	case get && rest == "profile":
		return pr.GetProfile, oldGmail
	case rest == "watch":
		return pr.Watch, oldGmail
	case rest == "stop":
		return pr.Stop, oldGmail
	}
	return 0, oldNone
}

// RoundTrip spends the request's units from its old limiter, then sends
// it. A refusal is the rate-limited error the old limiter returned (the
// adapter passes it on and the queue hands the task back; an idempotent
// read is first retried twice by the adapter, 200 and 400 ms later, as
// after any transport error: a little more patient than the old code).
func (l *oldLimiters) RoundTrip(req *http.Request) (*http.Response, error) {
	units, kind := oldKind(req, l.prices)
	var err error
	switch kind {
	case oldGmail:
		err = l.spendGmail(req.Context(), units)
	case oldRules:
		err = l.spendRules(req.Context(), units)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	return l.base.RoundTrip(req)
}

// spendGmail is the old Gmail pipeline's quota.spend.
func (l *oldLimiters) spendGmail(ctx context.Context, units int) error {
	r := l.gmail.ReserveN(time.Now(), min(units, oldGmailBurst))
	if !r.OK() {
		return fmt.Errorf("bench: old gmail quota: %d units exceed the burst", units)
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	if d > l.maxWait {
		r.Cancel()
		return queue.RateLimited(errors.New("bench: old gmail quota: the account is over its Gmail quota"), d)
	}
	if err := queue.Wait(ctx, d); err != nil {
		r.Cancel()
		return err
	}
	return nil
}

// oldGCRA is the old rules pipeline's script (queue/rules/quota.go), with
// the clock passed in (ARGV[4], µs) instead of the broker's TIME.
var oldGCRA = redis.NewScript(`
local period = tonumber(ARGV[1])
local units = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now = tonumber(ARGV[4])
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

// spendRules is the old rules pipeline's Quota.Spend: any wait hands the
// batch back.
func (l *oldLimiters) spendRules(ctx context.Context, units int) error {
	l.mu.Lock()
	rdb := l.rdb
	l.mu.Unlock()
	if rdb == nil {
		return errors.New("bench: old rules quota: no broker yet")
	}
	cost := min(units, oldRulesUnitsPerMinute)
	res, err := oldGCRA.Run(ctx, rdb, []string{"mailroom:bench:old-rules-gmail-quota"},
		l.window.Microseconds(), oldRulesUnitsPerMinute, cost, time.Now().UnixMicro()).Int64Slice()
	if err != nil {
		return fmt.Errorf("bench: old rules quota: %w", err)
	}
	if len(res) != 2 {
		return fmt.Errorf("bench: old rules quota: unexpected answer %v", res)
	}
	if res[0] == 1 {
		return nil
	}
	return queue.RateLimited(errors.New("bench: old rules quota: the account's Gmail quota share for reclassify is used up"),
		time.Duration(res[1])*time.Microsecond)
}
