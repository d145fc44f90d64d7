package bench

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"mailroom/internal/bench/story"
	"mailroom/internal/googlefake"
	"mailroom/queue"
	"mailroom/queue/rules"
	"mailroom/store"
)

// rulesBench is the whole app built by app.New against the emulator, with
// one user and one account whose mirror is seeded, driven through the
// rules pipeline.
type rulesBench struct {
	db      *store.DB
	q       *queue.Queue
	p       *rules.Pipeline
	pub     *rules.Publisher // a publisher of its own, run by hand (RunOnce)
	user    string
	account string
	email   string
	stop    func()
}

func (b *rulesBench) close() {
	if b.stop != nil {
		b.stop()
	}
}

// newRulesBench starts the app over the Google of g, whose mailbox of
// email it mirrors, with the scenario's overrides (mutate) on top of an
// hour's Gmail poll (MAILROOM_GMAIL_POLL_INTERVAL) and no Gmail budget
// (the emulator's quota is off too).
func newRulesBench(ctx context.Context, mutate func(*setup), g benchGoogle, email string) (b *rulesBench, err error) {
	b = &rulesBench{email: email}
	a, stop, err := startApp(ctx, func(c *setup) {
		c.GoogleAPIURL, c.GoogleTokenURL = g.url, g.tokenURL
		c.GmailPollInterval = time.Hour
		c.deps.GmailQuotaOff = true
		mutate(c)
	})
	if err != nil {
		return nil, err
	}
	b.stop, b.db, b.q, b.p = stop, a.DB(), a.Queue(), a.Rules()
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	err = b.db.Update(func(tx *store.Tx) error {
		u, err := tx.UserCreate("owner@example.com", "")
		b.user = u.ID
		return err
	})
	if err != nil {
		return nil, err
	}
	if b.account, err = story.SeedMirror(b.db, b.user, b.email, g.refresh, g.seeded.Messages, g.seeded.Labels, g.seeded.HistoryID); err != nil {
		return nil, err
	}
	b.pub = b.p.Publisher(b.q)
	return b, nil
}

// jobs returns the user's jobs, newest first.
func (b *rulesBench) jobs() ([]rules.Job, error) {
	st, err := b.p.Status(b.user, 0)
	return st.Jobs, err
}

// waitJobs waits until n jobs are published and finished.
func (b *rulesBench) waitJobs(ctx context.Context, n int, timeout time.Duration) ([]rules.Job, error) {
	deadline := time.Now().Add(timeout)
	for {
		jobs, err := b.jobs()
		if err != nil {
			return nil, err
		}
		finished := 0
		for _, j := range jobs {
			if !j.FinishedAt.IsZero() {
				finished++
			}
		}
		if len(jobs) >= n && finished == len(jobs) {
			return jobs, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d jobs of %d finished after %s", finished, n, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// storyVersions are the five saves of the story: each changes what the
// rule matches, the last one stays.
func storyVersions() []rules.Spec {
	mk := func(field, op, value string) rules.Spec {
		return rules.Spec{Label: "GitHub", Match: rules.MatchAll, Conditions: []rules.Condition{{Field: field, Op: op, Value: value}}}
	}
	return []rules.Spec{
		mk(rules.FieldFrom, rules.OpContains, "github"),
		mk(rules.FieldSubject, rules.OpContains, "[repo-1]"),
		mk(rules.FieldFrom, rules.OpContains, "@gitlab.com"),
		mk(rules.FieldSubject, rules.OpMatches, `issue \d*5$`),
		mk(rules.FieldFrom, rules.OpContains, "@github.com"),
	}
}

type storyRun struct {
	enqueued, worked, stale int
	calls, units            int
	final                   time.Duration // from the last save to the final labels in Gmail
	// wrong counts messages whose label disagrees with the last version
	// once every batch is done (naive only: its jobs' batches, each with
	// its save's version, may run out of order, say when the relay hands
	// them together under load; mailroom's run must end exact).
	wrong int
}

// runStory makes the story's five saves, spaced gap apart, and measures
// mailroom, or with naive the naive original (naiveReclassify).
func runStory(ctx context.Context, naive bool, threads int, scale time.Duration) (storyRun, error) {
	var run storyRun
	const email = "bench@example.com"
	var n *naiveReclassify
	// Intervals compressed with the story's time.
	mutate := func(c *setup) {
		c.ReclassifyDebounce, c.ReclassifyMaxWait, c.ReclassifyTick = 60*time.Second/scale, 10*time.Minute/scale, 10*time.Second/scale
		c.TaskPollInterval, c.DelayedCheckInterval = 5*time.Millisecond, 100*time.Millisecond
		c.RetryInitial, c.RetryMax = 100*time.Millisecond, time.Second
		if n != nil {
			n.configure(c)
		}
	}
	// The story's mailbox is small: its emulator runs in this process.
	// Gmail's quota is off here: both runs do all their work at once.
	fake := googlefake.New(googlefake.Options{HistoryMaxRecords: 1000, GmailUserUnitsPerMinute: -1, GmailProjectUnitsPerMinute: -1})
	if _, err := fake.Start(); err != nil {
		return run, err
	}
	defer fake.Close()
	refresh := fake.AddAccount(email)
	if err := story.AddThreads(fake, email, threads); err != nil {
		return run, err
	}
	fake.ResetCounters()
	g := benchGoogle{url: fake.URL(), tokenURL: fake.TokenURL(), refresh: refresh, seeded: viewOf(fake, email)}
	if naive {
		n = &naiveReclassify{google: g, email: email}
	}
	b, err := newRulesBench(ctx, mutate, g, email)
	if err != nil {
		return run, err
	}
	defer b.close()
	if n != nil {
		n.db, n.q = b.db, b.q
	}
	versions := storyVersions()
	gap := 12 * time.Second / scale
	var id string
	for i, v := range versions {
		if i == 0 {
			s, err := b.p.Create(ctx, b.user, v)
			if err != nil {
				return run, err
			}
			id = s.Rule.ID
		} else {
			if _, err := b.p.Update(ctx, id, v); err != nil {
				return run, err
			}
		}
		if n != nil {
			if err := n.publish(b.account, v); err != nil {
				return run, err
			}
		}
		if i < len(versions)-1 {
			time.Sleep(gap)
		}
	}
	last := time.Now()
	want, err := viewOf(fake, email).matches(versions[len(versions)-1])
	if err != nil {
		return run, err
	}
	if n != nil {
		err = n.wait(ctx, &run, fake, want, last)
	} else {
		err = b.waitFinal(&run, fake, want, last)
	}
	if err != nil {
		return run, err
	}
	v := viewOf(fake, email)
	run.calls, run.units = v.gmailCalls(), v.Units
	return run, nil
}

// wait waits until every naive batch is done and records the run: the
// batches, the time from last (the last save) and the messages whose label
// then disagrees with want, the last version's matches.
func (n *naiveReclassify) wait(ctx context.Context, run *storyRun, fake *googlefake.Server, want map[string]bool, last time.Time) error {
	err := waitFor(ctx, 5*time.Minute, "the naive batches", func() (bool, error) {
		return n.done.Load() == n.enqueued.Load(), nil
	})
	if err != nil {
		return fmt.Errorf("%w (%d of %d done)", err, n.done.Load(), n.enqueued.Load())
	}
	run.final = time.Since(last)
	run.enqueued, run.worked = int(n.enqueued.Load()), int(n.done.Load())
	run.wrong = differing(want, viewOf(fake, n.email).labelled("GitHub"))
	return nil
}

// waitFinal waits until the labels are final (equal to want, the last
// version's matches, and no job left) and records the jobs' counts and
// the time from last, the last save, in run.
func (b *rulesBench) waitFinal(run *storyRun, fake *googlefake.Server, want map[string]bool, last time.Time) error {
	deadline := last.Add(5 * time.Minute)
	for {
		jobs, err := b.jobs()
		if err != nil {
			return err
		}
		busy := len(jobs) == 0
		for _, j := range jobs {
			busy = busy || j.FinishedAt.IsZero()
		}
		if st, _ := b.p.Status(b.user, 0); st.Pending != nil {
			busy = true
		}
		if !busy && equalSets(want, viewOf(fake, b.email).labelled("GitHub")) {
			run.final = time.Since(last)
			for _, j := range jobs {
				run.enqueued += j.Batches
				run.worked += j.BatchesDone
				run.stale += j.BatchesSkippedStale
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the labels never became final: %s", b.notFinal(jobs, fake, want))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// notFinal says what keeps the labels from being final: the jobs'
// counts, a reclassify still pending, and the threads labelled wrongly.
func (b *rulesBench) notFinal(jobs []rules.Job, fake *googlefake.Server, want map[string]bool) string {
	var parts []string
	for _, j := range jobs {
		parts = append(parts, fmt.Sprintf("job %s: %d batches, %d done, %d stale, %d failed, finished %v",
			j.ID, j.Batches, j.BatchesDone, j.BatchesSkippedStale, j.BatchesFailed, !j.FinishedAt.IsZero()))
	}
	if st, _ := b.p.Status(b.user, 0); st.Pending != nil {
		parts = append(parts, "a reclassify still pending")
	}
	got := viewOf(fake, b.email).labelled("GitHub")
	return strings.Join(append(parts, fmt.Sprintf("%d messages labelled wrongly", differing(want, got))), "; ")
}

// differing counts the members of one set but not the other.
func differing(a, b map[string]bool) int {
	n := 0
	for k := range a {
		if !b[k] {
			n++
		}
	}
	for k := range b {
		if !a[k] {
			n++
		}
	}
	return n
}

func equalSets(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// benchRulesStory is story 1 measured: five saves of one rule in a minute
// on 3,000 threads, mailroom against the naive original (publish on every
// save, no stale skip: naiveReclassify) in the same run.
func benchRulesStory(ctx context.Context, o Options) (Result, error) {
	var r Result
	threads, scale := 3000, time.Duration(10)
	if o.Quick {
		threads, scale = 600, 100
	}
	runs := map[bool]storyRun{}
	for _, naive := range []bool{false, true} {
		name := map[bool]string{false: "mailroom", true: "naive"}[naive]
		o.progress("   %s: %d threads, five saves %s apart, debounce %s", name, threads, 12*time.Second/scale, 60*time.Second/scale)
		run, err := runStory(ctx, naive, threads, scale)
		if err != nil {
			return r, fmt.Errorf("%s: %w", name, err)
		}
		runs[naive] = run
	}
	m, n := runs[false], runs[true]
	batches := float64(threads / 50)
	r.addTarget("mailroom: batch tasks enqueued", float64(m.enqueued), "tasks", batches, false)
	r.addTarget("mailroom: batches that did Gmail work", float64(m.worked), "tasks", batches, false)
	r.add("mailroom: batches skipped as stale", float64(m.stale), "tasks")
	r.add("mailroom: Gmail calls", float64(m.calls), "calls")
	r.add("mailroom: Gmail quota units", float64(m.units), "units")
	r.add("mailroom: time to final labels after the last save", m.final.Seconds(), "s")
	r.add("naive: batch tasks enqueued", float64(n.enqueued), "tasks")
	r.add("naive: batches that did Gmail work", float64(n.worked), "tasks")
	r.add("naive: Gmail calls", float64(n.calls), "calls")
	r.add("naive: Gmail quota units", float64(n.units), "units")
	r.add("naive: messages labelled wrongly once its jobs were done", float64(n.wrong), "messages")
	r.add("naive: time to final labels after the last save", n.final.Seconds(), "s")
	r.addTarget("quota units, naive ÷ mailroom", float64(n.units)/float64(max(m.units, 1)), "ratio", 4, true)
	r.add("mailroom: minutes of one user's Gmail quota (6,000 units/min)", float64(m.units)/6000, "min")
	r.add("naive: minutes of one user's Gmail quota (6,000 units/min)", float64(n.units)/6000, "min")
	r.Notes = append(r.Notes, fmt.Sprintf("%d threads, batches of 50; time compressed %dx (saves %s apart, debounce %s, tick %s), so mailroom's time to final labels includes the compressed debounce; Gmail's quota off (emulator and budget) so both runs do all their work at once (against Google, naive's units above one minute of quota would stretch its time to final labels by that many minutes); the app built by app.New with these settings overridden: MAILROOM_RECLASSIFY_DEBOUNCE, _MAX_WAIT and _TICK compressed as said, MAILROOM_TASK_POLL_INTERVAL=5ms, MAILROOM_DELAYED_CHECK_INTERVAL=100ms, MAILROOM_RETRY_INITIAL=100ms, MAILROOM_RETRY_MAX=1s, MAILROOM_GMAIL_POLL_INTERVAL=1h, no Gmail budget (app.Deps.GmailQuotaOff); for naive also MAILROOM_RECLASSIFY_DEBOUNCE and _MAX_WAIT 1h (the product's reclassify never fires) and its own batch task type added to the task table (app.Deps.Tasks, the product's reclassify workers)", threads, scale, 12*time.Second/scale, 60*time.Second/scale, 10*time.Second/scale))
	r.Notes = append(r.Notes, "naive: the original design built in the bench from public pieces (bench_rules_naive.go): each save publishes at once one batch task per 50 threads; each batch applies its own save's version, adding the label where it matches and removing it elsewhere in the batch (one batchModify each way), with no stale skip. Until commit b930994 the naive ran as a mode of the rules pipeline itself (the same batch handler: provenance, a getProfile per batch); its last figures (3,000 threads, 2026-12-02, bench/RESULTS.md of b2afb18): 300 batches, 841 Gmail calls, 27,305 units, 0.37 s to final labels, 0 messages labelled wrongly")
	return r, nil
}

// benchRulesThroughput measures the reclassify of 100,000 threads against
// 20 rules with no emulator latency: threads per second from publish to
// the job's end, with the default batch of 50 threads and with 500.
func benchRulesThroughput(ctx context.Context, o Options) (Result, error) {
	var r Result
	threads := 100_000
	if o.Quick {
		threads = 10_000
	}
	for _, size := range []int{50, 500} {
		o.progress("   %d threads in batches of %d: seeding", threads, size)
		t, err := runThroughput(ctx, o, threads, size)
		if err != nil {
			return r, fmt.Errorf("batches of %d: %w", size, err)
		}
		name := fmt.Sprintf("reclassify throughput, 20 rules, batches of %d", size)
		if size == 50 {
			r.addTarget(name, t.rate, "threads/s", 20000, true)
		} else {
			r.add(name, t.rate, "threads/s")
		}
		r.add(fmt.Sprintf("batches of %d: elapsed", size), t.elapsed.Seconds(), "s")
		r.add(fmt.Sprintf("batches of %d: Gmail calls", size), float64(t.calls), "calls")
		r.Notes = append(r.Notes, t.note)
	}
	return r, rulesThroughputQuota(ctx, o, &r)
}

type throughputRun struct {
	rate    float64
	elapsed time.Duration
	calls   int
	note    string
}

func runThroughput(ctx context.Context, o Options, threads, size int) (throughputRun, error) {
	var run throughputRun
	// The queue polls and retries as serve's defaults say.
	var poll time.Duration
	// Google (the 120,000-message mailbox) answers from a process of its
	// own, as it does from another machine in production.
	const email = "bench@example.com"
	child, err := startGoogleChild(ctx, o.Exe, email, threads)
	if err != nil {
		return run, err
	}
	defer child.close()
	b, err := newRulesBench(ctx, func(c *setup) {
		c.RuleSaveLimit, c.ReclassifyBatch = 100, size
		c.ReclassifyDebounce, c.ReclassifyMaxWait, c.ReclassifyTick = time.Hour, time.Hour, time.Hour
		poll = c.TaskPollInterval
	}, child.google, email)
	if err != nil {
		return run, err
	}
	defer b.close()
	// The mirror holds the mailbox now; the copy read from the child would
	// only weigh on this process's heap (the final one has it all).
	child.google.seeded = mailboxView{}
	runtime.GC()
	specs, err := createTwentyRules(ctx, b)
	if err != nil {
		return run, err
	}
	o.progress("   %d threads in batches of %d: reclassify", threads, size)
	start := time.Now()
	st, err := b.pub.RunOnce(ctx, start.Add(2*time.Hour))
	if err != nil || st.Published != 1 {
		return run, fmt.Errorf("publish: %d jobs, %v", st.Published, err)
	}
	jobs, err := b.waitJobs(ctx, 1, 10*time.Minute)
	if err != nil {
		return run, err
	}
	j := jobs[0]
	run.elapsed = j.FinishedAt.Sub(start)
	run.rate = float64(j.Threads) / run.elapsed.Seconds()
	final, err := child.finish()
	if err != nil {
		return run, err
	}
	run.calls = final.gmailCalls()
	for _, s := range specs {
		want, err := final.matches(s)
		if err != nil {
			return run, err
		}
		if !equalSets(want, final.labelled(s.Label)) {
			return run, fmt.Errorf("labels of %q in Gmail differ from its matches", s.Label)
		}
	}
	run.note = fmt.Sprintf("batches of %d: %d threads (%d messages) against 20 rules (no body conditions), the app built by app.New with MAILROOM_RULE_SAVE_LIMIT=100, MAILROOM_RECLASSIFY_BATCH, MAILROOM_RECLASSIFY_DEBOUNCE, _MAX_WAIT and _TICK=1h (the job published by hand), MAILROOM_GMAIL_POLL_INTERVAL=1h and Gmail's quota off (no budget, the emulator unlimited: this measures the pipeline, not Google's 6,000 units a minute per user), %d batches, %d labels added, %d workers (the table's concurrency), queue polling every %s (serve's default), the Google emulator in a process of its own (Go's default GC settings) answering without added latency over loopback HTTP, GOMAXPROCS %d for both; Gmail calls by method %v",
		size, j.Threads, len(final.Messages), j.Batches, j.MessagesLabeled, reclassifyWorkers(), poll, runtime.GOMAXPROCS(0), final.Calls)
	return run, nil
}

// throughputRules are rules-throughput's 20 rules (no body conditions).
func throughputRules() []rules.Spec {
	var specs []rules.Spec
	for i := range 20 {
		s := rules.Spec{Label: fmt.Sprintf("Rule %02d", i), Match: rules.MatchAll}
		switch i % 4 {
		case 0:
			s.Conditions = []rules.Condition{{Field: rules.FieldSubject, Op: rules.OpContains, Value: fmt.Sprintf("[repo-%d]", i%7)}}
		case 1:
			s.Conditions = []rules.Condition{{Field: rules.FieldFrom, Op: rules.OpContains, Value: "@gitlab.com"}, {Field: rules.FieldSubject, Op: rules.OpMatches, Value: fmt.Sprintf(`issue \d*%d$`, i%10)}}
		case 2:
			s.Match = rules.MatchAny
			s.Conditions = []rules.Condition{{Field: rules.FieldFrom, Op: rules.OpEquals, Value: fmt.Sprintf("p%d@example.org", i)}, {Field: rules.FieldSubject, Op: rules.OpContains, Value: fmt.Sprintf("issue %d", i*3)}}
		default:
			s.Conditions = []rules.Condition{{Field: rules.FieldTo, Op: rules.OpNotContains, Value: "nobody@"}, {Field: rules.FieldFrom, Op: rules.OpContains, Value: fmt.Sprintf("p%d", i)}}
		}
		specs = append(specs, s)
	}
	return specs
}

// createTwentyRules saves the 20 rules for the bench's user.
func createTwentyRules(ctx context.Context, b *rulesBench) ([]rules.Spec, error) {
	specs := throughputRules()
	for _, s := range specs {
		if _, err := b.p.Create(ctx, b.user, s); err != nil {
			return nil, err
		}
	}
	return specs, nil
}

// reclassifyWorkers is the rules-reclassify queue's worker count in the table.
func reclassifyWorkers() int {
	for _, row := range rules.Tasks(0) {
		if row.Name == rules.TypeReclassifyBatch {
			return row.Concurrency
		}
	}
	return 0
}

// quotaRun is the quota-on run of rules-throughput.
type quotaRun struct {
	threads         int
	elapsed         time.Duration // in the run's time (compressed when window is)
	units, refusals int
	calls           int
	peak            int        // the most units the account spent in any window (emulator's count)
	floor           gmailFloor // Google's floor of the reclassify
}

// runThroughputQuota reclassifies threads against the 20 rules, batches
// of 50, with Gmail's quota on at serve's defaults and its minute
// lasting window for the emulator (at Google's documented limits) and the
// budget alike. The run is bound by the quota, not the CPU, so the
// emulator answers from this process.
func runThroughputQuota(ctx context.Context, threads int, window time.Duration) (quotaRun, error) {
	var run quotaRun
	const email = "bench@example.com"
	fake := googlefake.New(googlefake.Options{HistoryMaxRecords: 1000, GmailQuotaWindow: window})
	if _, err := fake.Start(); err != nil {
		return run, err
	}
	defer fake.Close()
	refresh := fake.AddAccount(email)
	if err := story.AddThreads(fake, email, threads); err != nil {
		return run, err
	}
	fake.ResetCounters()
	seeded := viewOf(fake, email)
	changes, err := labelChanges(seeded, throughputRules())
	if err != nil {
		return run, err
	}
	run.floor = gmailWork{labels: len(throughputRules()), changes: changes}.floor(benchPrices())
	b, err := newRulesBench(ctx, func(c *setup) {
		c.RuleSaveLimit = 100
		c.ReclassifyDebounce, c.ReclassifyMaxWait, c.ReclassifyTick = time.Hour, time.Hour, time.Hour
		c.deps.GmailQuotaOff, c.GmailQuotaWindow = false, window
	}, benchGoogle{url: fake.URL(), tokenURL: fake.TokenURL(), refresh: refresh, seeded: seeded}, email)
	if err != nil {
		return run, err
	}
	defer b.close()
	specs, err := createTwentyRules(ctx, b)
	if err != nil {
		return run, err
	}
	start := time.Now()
	st, err := b.pub.RunOnce(ctx, start.Add(2*time.Hour))
	if err != nil || st.Published != 1 {
		return run, fmt.Errorf("publish: %d jobs, %v", st.Published, err)
	}
	jobs, err := b.waitJobs(ctx, 1, 15*time.Minute)
	if err != nil {
		return run, err
	}
	run.threads, run.elapsed = jobs[0].Threads, jobs[0].FinishedAt.Sub(start)
	final := viewOf(fake, email)
	for _, s := range specs {
		want, err := final.matches(s)
		if err != nil {
			return run, err
		}
		if !equalSets(want, final.labelled(s.Label)) {
			return run, fmt.Errorf("labels of %q in Gmail differ from its matches", s.Label)
		}
	}
	run.units, run.refusals, run.calls = final.Units, fake.Gmail.TotalQuotaRefusals(), final.gmailCalls()
	run.peak = fake.Gmail.PeakProjectUnits() // one account: the project's peak is the account's
	return run, nil
}

// rulesThroughputQuota adds rules-throughput's quota-on rows: one account
// of 100,000 threads at 6,000 units a minute, in real time, against
// Google's floor.
func rulesThroughputQuota(ctx context.Context, o Options, r *Result) error {
	threads, window := 100_000, time.Minute
	if o.Quick {
		threads, window = 2_000, 2*time.Second
	}
	scale := float64(time.Minute) / float64(window)
	o.progress("   %d threads in batches of 50, Gmail quota on, Gmail's minute lasting %g s", threads, window.Seconds())
	run, err := runThroughputQuota(ctx, threads, window)
	if err != nil {
		return fmt.Errorf("quota on: %w", err)
	}
	realSecs := run.elapsed.Seconds() * scale
	perThread := float64(run.units) / float64(run.threads)
	least := run.floor.least(benchPrices().UserUnitsPerMinute, time.Minute)
	r.addTarget("quota on, one account: reclassify threads/s, 20 rules, batches of 50", float64(run.threads)/realSecs, "threads/s", 300, true)
	r.add("quota on, one account: elapsed", realSecs/60, "min")
	r.addTarget("quota on: Gmail units per thread (emulator's count)", perThread, "units", 0.2, false)
	r.add("quota on: Google's floor of units per thread (the least Google's table and call limits allow)", float64(run.floor.units)/float64(run.threads), "units")
	r.add("quota on: units spent ÷ Google's floor", float64(run.units)/float64(max(run.floor.units, 1)), "ratio")
	atRate := run.floor.atRate(benchPrices().UserUnitsPerMinute, time.Minute)
	r.add("quota on: Google's floor of time (the floor's units at 6,000 a minute: minutes of one user's quota)", atRate.Seconds(), "s")
	r.add("quota on: elapsed ÷ Google's floor of time", realSecs/atRate.Seconds(), "ratio")
	r.add("quota on: the least time Google's sliding minute allows (the floor's units, a minute's worth at once each time the last has left the window)", least.Seconds(), "s")
	if least > 0 { // none when the work fits in the first minute (the quick run)
		r.add("quota on: elapsed ÷ that least time", realSecs/least.Seconds(), "ratio")
	}
	r.add("quota on: the most units spent in any minute ÷ the account's 6,000 (1: the limit bound)", float64(run.peak)/float64(benchPrices().UserUnitsPerMinute), "ratio")
	r.add("quota on, one account: Google quota refusals", float64(run.refusals), "calls")
	compressed := "in real time (Gmail's minute is a minute)"
	if scale != 1 {
		compressed = fmt.Sprintf("Gmail's minute compressed to %g s for the emulator and the budget (MAILROOM_GMAIL_QUOTA_WINDOW; %.0fx) and the time scaled back; the budget's 20 s longest in-task wait, the task poll and the delayed-task check are not compressed", window.Seconds(), scale)
	}
	r.Notes = append(r.Notes, fmt.Sprintf("quota-on rows (the others have Gmail's quota off): %d threads (%d Gmail calls, %d units) against the same 20 rules in batches of 50 on one account, the budget at serve's defaults (6,000 units a minute per user, 1,200,000 per project) and the emulator at Google's documented limits, %s; the account looks synced before this process, but on a new data dir no broker loss is found, so its budget starts at the full 6,000; the emulator in this process (the quota, not the CPU, binds); otherwise the settings of the batches-of-50 row. Google's floor (bench/floor.go): 20 labels.create and one batchModify per 1,000 messages each rule labels, %s. Before issue 21 (bench/RESULTS.md of 2026-12-02, 10,000 threads, Gmail's minute compressed to 2 s): 10.51 units a thread, 8.86 threads a second",
		run.threads, run.calls, run.units, compressed, run.floor))
	return nil
}
