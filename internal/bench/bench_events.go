package bench

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/webhooks"
	"mailroom/store"
)

// eventsSize is the events scenario's size.
type eventsSize struct {
	accounts, mailbox, rounds, forms int
	hooks                            []int // webhooks of each phase, growing
	start, factor                    float64
	steps                            int
	step                             time.Duration
	drain                            time.Duration
}

func eventsSizeOf(quick bool) eventsSize {
	if quick {
		return eventsSize{accounts: 2, mailbox: 30, rounds: 20, forms: 2, hooks: []int{1, 2}, start: 40, factor: 2, steps: 2, step: time.Second, drain: 20 * time.Second}
	}
	return eventsSize{accounts: 20, mailbox: 200, rounds: 80, forms: 10, hooks: []int{1, 10, 100}, start: 250, factor: 1.5, steps: 12, step: 2 * time.Second, drain: 20 * time.Second}
}

// eventsAdminHooks is how many webhooks of a phase take every event (the
// admin's; MaxPerUser caps them); the rest are spread over the users, each
// taking its user's events.
const eventsAdminHooks = 10

// eventsP99 is the latency the capacity figure keeps to.
const eventsP99 = time.Second

// benchEvents measures how many events a second one mailroom delivers
// with p99 from the change to the receiver's 2xx within a second: changes
// made through the product's paths (mail changing in the Google emulator
// with pushes, form rows flushed), offered on a rising ramp until a step's
// events are late, to a receiver that verifies every signature and counts
// each event once; with 1, 10 and 100 webhooks, on both brokers.
func benchEvents(ctx context.Context, o Options) (Result, error) {
	var r Result
	sz := eventsSizeOf(o.Quick)
	targets, stop := benchTargets(ctx, o, &r)
	defer stop()
	for _, tg := range targets {
		if err := eventsOnBroker(ctx, o, &r, tg, sz); err != nil {
			return r, fmt.Errorf("%s: %w", tg.name, err)
		}
	}
	r.Notes = append(r.Notes, fmt.Sprintf("changes: %d accounts of %d messages in the Google emulator at Google's documented quotas, the Gmail budget at serve's defaults; every %s the changes due (each account in turn: every 50th a new message, the others a label added, one label per message per round, so every change has its own event) and one push per changed account, plus one form row submitted (%d forms, flushed at serve's settings, each flush one form.rows_written, timed from its occurredAt: the flush is the change); the offered rate starts at %.0f a second and rises ×%.1f every %s, back to back, until a step's changes are not all at every webhook one step after it ended or its p99 passes %s (a ramp late from its first step starts again at a quarter, at most twice). A change's latency: just before the emulator made it to the receiver answering 2xx to the POST that carried its event, at each webhook that takes it. Events/s of a step: its changes (and form events) all delivered ÷ the step's length; 'peak … in a step's window': the most events completed (at every webhook) in any step's window ÷ its length. Webhooks: up to %d the admin's, taking every event; the rest spread over the users, each taking its user's events (MaxPerUser is %d). The receiver (in this process) verifies every POST with the Standard Webhooks library and the webhook's secret (a POST that fails fails the run) and keeps each webhook's event id once (repeats: duplicates). %s", sz.accounts, sz.mailbox, eventsTick, sz.forms, sz.start, sz.factor, sz.step, eventsP99, eventsAdminHooks, webhooks.MaxPerUser, o.GC))
	return r, nil
}

// eventsOnBroker runs the phases (webhook counts) on one broker with one
// app, and adds their figures.
func eventsOnBroker(ctx context.Context, o Options, r *Result, tg benchTarget, sz eventsSize) error {
	broker := map[string]string{"embedded": "embedded broker", "redis": "redis-server"}[tg.name]
	target := map[string]float64{"embedded": 2000, "redis": 5000}[tg.name]
	if tg.url != "" {
		if err := flushRedis(ctx, tg.url); err != nil {
			return err
		}
	}
	o.progress("   %s: %d accounts, their first syncs", tg.name, sz.accounts)
	b, err := newEventsBench(ctx, tg.url, sz)
	if err != nil {
		return err
	}
	defer b.close()
	r.Notes = append(r.Notes, settingsNote(broker+": the app", b.fleet.diff))
	start := sz.start
	for _, hooks := range sz.hooks {
		if err := b.addHooks(ctx, hooks); err != nil {
			return err
		}
		o.progress("   %s, %d webhooks: ramp from %.0f events/s", tg.name, hooks, start)
		cpu0, done0 := processCPU(), b.tally.completed()
		ph, err := b.ramp(ctx, o, start)
		// A first step already late measures nothing: start lower (twice).
		for low := start / 4; err == nil && ph.best == 0 && low >= sz.start/16; low /= 4 {
			o.progress("   %s, %d webhooks: late from the first step; again from %.0f events/s", tg.name, hooks, low)
			var more eventsPhase
			more, err = b.ramp(ctx, o, low)
			for _, s := range more.steps {
				ph.add(s)
			}
			ph.drained = more.drained
		}
		if err != nil {
			return fmt.Errorf("%d webhooks: %w", hooks, err)
		}
		if err := b.recv.check(); err != nil {
			return err
		}
		name := fmt.Sprintf("%s, %d webhook", broker, hooks)
		if hooks > 1 {
			name += "s"
		}
		if n := b.tally.completed() - done0; n > 0 {
			r.add("CPU per event at every webhook (this process: mailroom, emulator, source and receiver), "+name, float64((processCPU()-cpu0).Microseconds())/1000/float64(n), "ms")
		}
		r.addTarget("most events/s delivered with p99 change to 2xx <= 1 s, "+name, ph.best, "events/s", target, true)
		// A phase with no step within the bound has no rate, so no p99.
		if ph.best > 0 {
			r.add("p99 change to 2xx at that rate, "+name, ms(ph.bestP99), "ms")
		}
		r.add("peak events/s at every webhook in a step's window, "+name, ph.most, "events/s")
		r.Notes = append(r.Notes, fmt.Sprintf("%s: %s", name, ph.summary()))
		if ph.unbounded {
			r.Notes = append(r.Notes, fmt.Sprintf("%s: the ramp's steps ran out before one was late: %.0f events/s is a floor of the capacity, not the capacity", name, ph.best))
		}
		start = max(sz.start, ph.best/2)
	}
	_, dups, posts := b.recv.deliveries()
	r.add("duplicate deliveries (an event id a webhook already had), "+broker, float64(dups), "events")
	r.add("Google quota refusals, "+broker, float64(b.fleet.fake.Gmail.TotalQuotaRefusals()), "calls")
	forms := 0
	for _, n := range b.tally.forms {
		forms += n
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s: %d verified POSTs, %d form rows submitted, %d form.rows_written events at every webhook, %d events of other types (connects and the like) not counted", broker, posts, b.src.rows, forms, b.tally.other))
	return nil
}

// eventsBench is one broker's run: the fleet, the source of changes, the
// receiver and the tally of what reached it.
type eventsBench struct {
	sz       eventsSize
	fleet    *gmailFleet
	src      *eventsSource
	recv     *hookReceiver
	srv      *httptest.Server
	hooks    []benchHook
	users    []string
	tally    *eventsTally
	nextStep int
	windows  []eventsStep // the steps offered so far (their windows)
}

// benchHook is a webhook the bench made: its user (empty: the admin's,
// taking every event) and when it was made (it takes what happens after).
type benchHook struct {
	user    string
	created time.Time
}

func newEventsBench(ctx context.Context, redisURL string, sz eventsSize) (_ *eventsBench, err error) {
	b := &eventsBench{sz: sz, recv: newHookReceiver()}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	b.srv = httptest.NewServer(b.recv)
	if b.fleet, err = newGmailFleet(ctx, fleetOptions{redisURL: redisURL, allowPrivate: true}, fairnessSize{accounts: sz.accounts, messages: sz.mailbox}); err != nil {
		return nil, err
	}
	log := &changeLog{byKey: map[string]eventChange{}}
	b.src = &eventsSource{fleet: b.fleet, gen: googlefake.NewGenerator(17, time.Time{}), log: log}
	for _, email := range b.fleet.emails {
		c, err := newMailboxChanger(b.fleet.fake.Gmail, email, sz.rounds)
		if err != nil {
			return nil, err
		}
		b.src.changers = append(b.src.changers, c)
	}
	if err := b.fleet.connect(ctx); err != nil {
		return nil, err
	}
	if err := b.fleet.waitIdle(ctx, 5*time.Minute); err != nil {
		return nil, fmt.Errorf("first syncs: %w", err)
	}
	for i, id := range b.fleet.ids {
		b.src.changers[i].account = id
		var acc store.Account
		if err := b.fleet.db.View(func(tx *store.Tx) (err error) { acc, err = tx.AccountGet(id); return err }); err != nil {
			return nil, err
		}
		b.users = append(b.users, acc.UserID)
	}
	if err := b.src.addForms(ctx, sz.forms); err != nil {
		return nil, err
	}
	b.tally = newEventsTally(b.recv, log, b.expected, b.stepAt)
	return b, nil
}

func (b *eventsBench) close() {
	if b.fleet != nil {
		b.fleet.close()
	}
	if b.srv != nil {
		b.srv.Close()
	}
}

// expected is how many webhooks take an event of user that happened at
// (or, for a change, whose change was made at) at.
func (b *eventsBench) expected(user string, at time.Time) int {
	n := 0
	for _, h := range b.hooks {
		if h.created.Before(at) && (h.user == "" || h.user == user) {
			n++
		}
	}
	return n
}

// stepAt is the step whose window holds at, else the last one begun by
// then (-1: none).
func (b *eventsBench) stepAt(at time.Time) int {
	step := -1
	for _, w := range b.windows {
		if !at.Before(w.from) {
			step = w.id
		}
	}
	return step
}

// addHooks registers webhooks until there are n: the admin's first
// (eventsAdminHooks of them), then one per user in turn.
func (b *eventsBench) addHooks(ctx context.Context, n int) error {
	for have := len(b.hooks); have < n; have++ {
		user := ""
		if have >= eventsAdminHooks {
			user = b.users[(have-eventsAdminHooks)%len(b.users)]
		}
		name := fmt.Sprintf("h%d", have)
		err := b.recv.register(name, func() (string, error) {
			_, secret, err := b.fleet.app.Webhooks().Create(ctx, webhooks.CreateRequest{URL: b.srv.URL + "/hook/" + name, UserID: user})
			return secret, err
		})
		if err != nil {
			return fmt.Errorf("create webhook %s: %w", name, err)
		}
		b.hooks = append(b.hooks, benchHook{user: user, created: time.Now()})
	}
	return nil
}

// eventsPhase is one ramp's outcome.
type eventsPhase struct {
	steps   []eventsStep
	best    float64 // the most events/s of a step within the p99
	bestP99 time.Duration
	// unbounded: the ramp's last step kept up (its steps ran out before
	// one was late), so best is a floor of the capacity.
	unbounded bool
	most      float64 // the most events/s completed in any step's window
	drained   bool
}

func (p eventsPhase) summary() string {
	var parts []string
	for _, s := range p.steps {
		verdict := "kept up"
		if !s.ok {
			verdict = "late"
		}
		parts = append(parts, fmt.Sprintf("%.0f asked, %.0f offered → %.0f delivered, %.0f in its window, p99 %s (change to event %s, event to 2xx %s) (%s)", s.asked, s.offered, s.delivered, s.window, s.p99.Round(time.Millisecond), s.toEvent.Round(time.Millisecond), s.toHook.Round(time.Millisecond), verdict))
	}
	drained := "its backlog drained before the next phase"
	if !p.drained {
		drained = "its backlog NOT drained within the wait (the next phase starts with it)"
	}
	return "steps (events/s): " + strings.Join(parts, "; ") + "; " + drained
}

// ramp offers a rising rate, step after step, until a step is late, then
// waits (bounded) for the backlog to drain.
func (b *eventsBench) ramp(ctx context.Context, o Options, start float64) (eventsPhase, error) {
	var ph eventsPhase
	rate := start
	var prev *eventsStep
	for range b.sz.steps {
		step := b.nextStep
		b.nextStep++
		cur := &eventsStep{id: step, from: time.Now(), asked: rate}
		b.windows = append(b.windows, *cur)
		made, err := b.src.offer(ctx, rate, b.sz.step, step)
		if err != nil {
			return ph, err
		}
		cur.to, cur.changes = time.Now(), made
		b.windows[len(b.windows)-1] = *cur
		cur.offered = float64(made) / cur.to.Sub(cur.from).Seconds()
		if prev != nil {
			b.tally.judge(prev)
			ph.add(*prev)
			o.progress("     %.0f offered → %.0f delivered, p99 %s (to event %s, event to 2xx %s)", prev.offered, prev.delivered, prev.p99.Round(time.Millisecond), prev.toEvent.Round(time.Millisecond), prev.toHook.Round(time.Millisecond))
			if !prev.ok {
				prev = nil
				break
			}
		}
		prev, rate = cur, rate*b.sz.factor
	}
	if prev != nil { // the last step offered: wait one step's length for it
		if err := sleepCtx(ctx, b.sz.step); err != nil {
			return ph, err
		}
		b.tally.judge(prev)
		ph.add(*prev)
	}
	err := waitFor(ctx, b.sz.drain, "the backlog", func() (bool, error) { return b.tally.drained(), nil })
	ph.drained = err == nil
	if err != nil && ctx.Err() != nil {
		return ph, err
	}
	return ph, nil
}

func (p *eventsPhase) add(s eventsStep) {
	p.steps = append(p.steps, s)
	p.most = max(p.most, s.window)
	if s.ok && s.delivered > p.best {
		p.best, p.bestP99 = s.delivered, s.p99
	}
	p.unbounded = s.ok
}

// eventsStep is one step of a ramp and its verdict.
type eventsStep struct {
	id       int
	from, to time.Time
	changes  int
	asked    float64 // the rate the ramp asked for
	offered  float64 // the rate the source made (below asked: the source bound)

	delivered float64 // the step's events all delivered ÷ its length (0 unless all were)
	window    float64 // events completed within the step's window ÷ its length
	p99       time.Duration
	// p99 of the two legs of a change's latency: to its event's
	// occurredAt (the sync that recorded it), and from there to the 2xx.
	toEvent, toHook time.Duration
	ok              bool
}

// eventsTally reads what reached the receiver, incrementally: per change
// (or form event), how many webhooks have it; per step, the latencies and
// the changes and form events at every webhook that takes them.
type eventsTally struct {
	recv     *hookReceiver
	log      *changeLog
	expected func(user string, at time.Time) int
	stepAt   func(time.Time) int
	pending  []hookDelivery // deliveries whose change was not yet logged

	keys    map[string]*keyTally
	lat     map[int][]time.Duration // step -> latencies
	toEvent map[int][]time.Duration // step -> change to its event's occurredAt
	toHook  map[int][]time.Duration // step -> occurredAt to the 2xx
	changes map[int]int             // step -> changes at every webhook
	forms   map[int]int             // step -> form events at every webhook
	doneAt  []time.Time             // when each change or form event was complete
	// complete is how many changes (not form events) are at every
	// webhook that takes them: drained compares it with the changes made
	// without walking every key (it is polled every few milliseconds,
	// in the process it measures).
	complete int
	other    int
}

type keyTally struct {
	hooks, want int
	step        int
	form        bool
}

func newEventsTally(recv *hookReceiver, log *changeLog, expected func(string, time.Time) int, stepAt func(time.Time) int) *eventsTally {
	return &eventsTally{recv: recv, log: log, expected: expected, stepAt: stepAt, keys: map[string]*keyTally{}, lat: map[int][]time.Duration{}, toEvent: map[int][]time.Duration{}, toHook: map[int][]time.Duration{}, changes: map[int]int{}, forms: map[int]int{}}
}

// update reads the deliveries that arrived since the last call.
func (t *eventsTally) update() {
	batch := append(t.pending, t.recv.take()...)
	t.pending = nil
	for _, d := range batch {
		if d.typ == store.EventFormRowsWritten {
			t.count("form/"+d.id, d, eventChange{at: d.occurredAt, step: t.stepAt(d.occurredAt)}, true)
			continue
		}
		keys := changeKeys(d)
		if len(keys) == 0 {
			t.other++
			continue
		}
		for _, k := range keys {
			if _, ok := t.log.get(k); !ok {
				t.pending = append(t.pending, d) // logged right after the emulator made it
				keys = nil
				break
			}
		}
		for _, k := range keys {
			c, _ := t.log.get(k)
			t.count(k, d, c, false)
		}
	}
}

// count adds delivery d of the change (or form event) k made at c.
func (t *eventsTally) count(k string, d hookDelivery, c eventChange, form bool) {
	kt := t.keys[k]
	if kt == nil {
		kt = &keyTally{want: t.expected(d.userID, c.at), step: c.step, form: form}
		t.keys[k] = kt
	}
	kt.hooks++
	t.lat[c.step] = append(t.lat[c.step], d.at.Sub(c.at))
	t.toEvent[c.step] = append(t.toEvent[c.step], d.occurredAt.Sub(c.at))
	t.toHook[c.step] = append(t.toHook[c.step], d.at.Sub(d.occurredAt))
	if kt.hooks != kt.want {
		return
	}
	if form {
		t.forms[c.step]++
	} else {
		t.changes[c.step]++
		t.complete++
	}
	t.doneAt = append(t.doneAt, d.at)
}

// judge gives step s its figures from what has arrived so far.
func (t *eventsTally) judge(s *eventsStep) {
	t.update()
	length := s.to.Sub(s.from).Seconds()
	formsLeft := 0
	for _, kt := range t.keys {
		if kt.form && kt.step == s.id && kt.hooks < kt.want {
			formsLeft++
		}
	}
	inWindow := 0
	for _, at := range t.doneAt {
		if !at.Before(s.from) && !at.After(s.to) {
			inWindow++
		}
	}
	s.window = float64(inWindow) / length
	if lat := t.lat[s.id]; len(lat) > 0 {
		s.p99 = percentile(lat, 0.99)
		s.toEvent, s.toHook = percentile(t.toEvent[s.id], 0.99), percentile(t.toHook[s.id], 0.99)
	}
	allThere := t.changes[s.id] >= s.changes && formsLeft == 0
	if allThere {
		s.delivered = float64(t.changes[s.id]+t.forms[s.id]) / length
	}
	s.ok = allThere && s.p99 <= eventsP99
}

// completed is how many changes and form events are at every webhook
// that takes them so far.
func (t *eventsTally) completed() int {
	t.update()
	return len(t.doneAt)
}

// drained reports whether every change made is at every webhook.
func (t *eventsTally) drained() bool {
	t.update()
	t.log.mu.Lock()
	made := len(t.log.byKey)
	t.log.mu.Unlock()
	return t.complete >= made
}
