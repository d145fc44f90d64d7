package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/bench/story"
	"mailroom/internal/googlefake"
	"mailroom/queue/rules"
	"mailroom/store"
)

// The label property: whatever the interleaving of rule saves, edits and
// deletes, new mail (pushed), a person's changes in Gmail, label writes
// held in flight and landing in any order, broker losses and crashes,
// once the app has settled every message's rule labels in Gmail are
// exactly what the stored rules say of it.
//
// It runs in `make test` with labelPropertySeeds; LABELS_PROPERTY_SEEDS=n
// runs seeds 1..n instead, LABELS_PROPERTY_SEED=s seed s alone (a seed
// replays the schedule of operations, not the timing of the app's tasks).
// What it found, on the code before d282b09: with the fix of 10f5abc
// reverted (a direct change deleting the writer's waiting change instead
// of redirecting it), seeds 4 and 8; as it was, a failure in 2 of 6 runs of
// seeds 1, 4 and 8 (two writes of one label in flight together: a
// reclassify's add landed after a settle's removal and stayed, as
// nobody's). Since d282b09 a write waits for the label's write in flight,
// which also makes the change 10f5abc fixed harmless.
var labelPropertySeeds = []uint64{1, 4, 8}

func TestLabelsProperty(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the app for about half a minute")
	}
	t.Parallel()
	seeds := labelPropertySeeds
	if s := os.Getenv("LABELS_PROPERTY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("LABELS_PROPERTY_SEED=%q: %v", s, err)
		}
		seeds = []uint64{n}
	} else if s := os.Getenv("LABELS_PROPERTY_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("LABELS_PROPERTY_SEEDS=%q: %v", s, err)
		}
		seeds = nil
		for i := range n {
			seeds = append(seeds, uint64(i+1))
		}
	}
	for _, seed := range seeds {
		t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
			t.Parallel()
			w := newLabelWorld(t, seed)
			for round := range labelRounds {
				for range labelOpsPerRound {
					w.step()
				}
				if err := w.settle(); err != nil {
					t.Fatalf("seed %d (LABELS_PROPERTY_SEED=%d replays it), round %d, after %d operations: %v\noperations:\n%s",
						seed, seed, round+1, len(w.log), err, strings.Join(w.log, "\n"))
				}
			}
		})
	}
}

const (
	labelRounds      = 3
	labelOpsPerRound = 30
	labelPersonal    = "Personal"
	labelQuotaWindow = 300 * time.Millisecond
)

// propRule is one of the world's two rules: its label and the conditions
// it may be saved with.
type propRule struct {
	label    string
	variants [][]rules.Condition
	id       string // "" while it does not exist
	version  int
}

func (r *propRule) spec() rules.Spec {
	return rules.Spec{Label: r.label, Match: "any", Conditions: r.variants[r.version]}
}

// labelWorld is one seed's run: the emulator behind a gate that can hold
// label writes, the app, and what the test did.
type labelWorld struct {
	t      *testing.T
	rng    *rand.Rand
	fake   *googlefake.Server
	gate   *writeGate
	cfg    func(*app.Config)
	ta     *apptest.App
	user   string
	acc    string
	email  string
	rules  []*propRule
	log    []string
	crashs int
	wrong  []string // the messages the last check found wrong
}

func newLabelWorld(t *testing.T, seed uint64) *labelWorld {
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, PushMinInterval: -1, GmailQuotaWindow: labelQuotaWindow})
	w := &labelWorld{t: t, rng: rand.New(rand.NewPCG(seed, 0x1abe1)), fake: fake, email: gmailAddr}
	w.gate = &writeGate{h: fake.Handler(), rng: rand.New(rand.NewPCG(seed, 0x9a7e)),
		history: func() uint64 { return fake.Gmail.HistoryID(gmailAddr) }}
	hs := httptest.NewServer(w.gate)
	t.Cleanup(hs.Close)
	t.Cleanup(w.gate.open)
	dir, addr := t.TempDir(), apptest.FreeAddr(t)
	w.cfg = func(cfg *app.Config) {
		withGoogle(fake, nil)(cfg)
		cfg.GoogleAPIURL = hs.URL + "/"
		cfg.DataDir, cfg.HTTPAddr = dir, addr
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
		cfg.ReclassifyWriteDelay = 50 * time.Millisecond
		// A broker loss or a restart counts Gmail's quota window as spent
		// and refuses saves for one window.
		cfg.GmailQuotaWindow = labelQuotaWindow
		cfg.RuleSaveLimit, cfg.RuleSaveWindow = 1<<20, 100*time.Millisecond
		cfg.ShutdownTimeout = 300 * time.Millisecond
		if l := os.Getenv("LABELS_PROPERTY_LOG"); l != "" {
			cfg.LogLevel = l
		}
	}
	w.ta = apptest.Start(t, w.cfg)
	fake.SetPushURL(w.ta.URL + "/push/gmail")
	w.user = createUser(w.ta, "owner@example.com")
	fake.AddAccount(w.email)
	if _, err := fake.Gmail.CreateLabel(w.email, labelPersonal); err != nil {
		t.Fatal(err)
	}
	if err := story.AddThreads(fake, w.email, 12); err != nil {
		t.Fatal(err)
	}
	w.acc = connectAccount(w.ta, fake, w.user, w.email).ID
	waitMirror(w.ta, fake, w.acc, w.email, 30*time.Second)
	w.rules = []*propRule{
		{label: "Dev", variants: [][]rules.Condition{
			{{Field: "from", Op: "contains", Value: "@github.com"}},
			{{Field: "from", Op: "contains", Value: "gitlab"}, {Field: "subject", Op: "contains", Value: "repo-1"}},
			{{Field: "subject", Op: "matches", Value: `\[repo-[0-3]\]`}},
			{{Field: "from", Op: "not_contains", Value: "example"}},
		}},
		{label: "Bills", variants: [][]rules.Condition{
			{{Field: "subject", Op: "contains", Value: "invoice"}},
			{{Field: "from", Op: "contains", Value: "github"}},
			{{Field: "subject", Op: "matches", Value: `(?i)invoice \d*[02468]$`}},
		}},
	}
	return w
}

// step makes one operation, chosen by the seed, or an episode of them.
func (w *labelWorld) step() {
	if w.rng.IntN(6) == 0 {
		w.episode()
		return
	}
	w.op()
}

// episode is a run of operations in the order that lets a direct change
// meet a reclassify's change in flight: with the gate closed, a rule
// edit (its reclassify's writes held), new mail in an existing thread
// (its read held), part of what is held let go, another edit while the
// new mail's rules run (its settle), and the rest let go in any order.
func (w *labelWorld) episode() {
	w.logf("episode")
	w.gate.close()
	w.saveRule()
	w.pause(200 + w.rng.IntN(200))
	w.newMailIn(true)
	w.pause(w.rng.IntN(150))
	w.logf("release %d held calls", w.gate.release(true))
	w.pause(w.rng.IntN(100))
	w.saveRule()
	w.pause(w.rng.IntN(300))
	w.logf("release %d held calls", w.gate.release(true))
	w.pause(w.rng.IntN(300))
	w.logf("release %d held calls", w.gate.release(false))
}

func (w *labelWorld) pause(ms int) {
	w.logf("pause %dms", ms)
	time.Sleep(time.Duration(ms) * time.Millisecond)
}

// op makes one operation, chosen by the seed.
func (w *labelWorld) op() {
	switch op := w.rng.IntN(100); {
	case op < 20:
		w.saveRule()
	case op < 25:
		w.deleteRule()
	case op < 45:
		w.newMail()
	case op < 60:
		w.personChange()
	case op < 70:
		w.logf("gate %s", w.gate.toggle())
	case op < 80:
		w.logf("release %d held calls", w.gate.release(w.rng.IntN(2) == 0))
	case op < 83:
		w.loseBroker()
	case op < 85:
		w.crash()
	default:
		w.pause(w.rng.IntN(300))
	}
}

func (w *labelWorld) logf(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%3d ", len(w.log)+1)+fmt.Sprintf(format, args...))
}

// saveRule creates a rule that does not exist, or saves another version
// of one that does.
func (w *labelWorld) saveRule() {
	r := w.rules[w.rng.IntN(len(w.rules))]
	if r.id == "" {
		r.version = w.rng.IntN(len(r.variants))
		var saved struct{ Rule struct{ ID string } }
		raw := w.save(http.MethodPost, "/api/v1/users/"+w.user+"/rules", r.spec(), http.StatusCreated)
		if err := json.Unmarshal(raw, &saved); err != nil {
			w.t.Fatal(err)
		}
		r.id = saved.Rule.ID
		w.logf("create rule %s (%s) version %d", r.id, r.label, r.version)
		return
	}
	r.version = (r.version + 1 + w.rng.IntN(len(r.variants)-1)) % len(r.variants)
	w.save(http.MethodPut, "/api/v1/rules/"+r.id, r.spec(), http.StatusOK)
	w.logf("edit rule %s (%s) to version %d", r.id, r.label, r.version)
}

// save sends a rule's save or delete, again while the save limit refuses
// it (for a window after a broker loss or a restart), and returns the
// answer's body.
func (w *labelWorld) save(method, path string, body any, want int) []byte {
	for range 50 {
		status, raw := w.ta.Do(method, path, body)
		switch status {
		case want:
			return raw
		case http.StatusTooManyRequests, http.StatusServiceUnavailable:
			time.Sleep(50 * time.Millisecond)
		default:
			w.t.Fatalf("%s %s: %d %s, want %d", method, path, status, raw, want)
		}
	}
	w.t.Fatalf("%s %s: refused for 2.5 s", method, path)
	return nil
}

func (w *labelWorld) deleteRule() {
	r := w.rules[w.rng.IntN(len(w.rules))]
	if r.id == "" {
		return
	}
	w.save(http.MethodDelete, "/api/v1/rules/"+r.id, nil, http.StatusNoContent)
	w.logf("delete rule %s (%s)", r.id, r.label)
	r.id = ""
}

var propSenders = []string{
	"GitHub <notifications@github.com>", "CI <ci@gitlab.com>", "Billing <billing@shop.example>", "Ann <ann@example.org>",
}

// newMail adds a message, in a new thread or an existing one; the
// emulator pushes it.
func (w *labelWorld) newMail() { w.newMailIn(w.rng.IntN(3) == 0) }

func (w *labelWorld) newMailIn(oldThread bool) {
	n := len(w.log)
	m := googlefake.Message{From: propSenders[w.rng.IntN(len(propSenders))], To: w.email,
		Subject: fmt.Sprintf("[repo-%d] issue %d", w.rng.IntN(7), n), Body: "b"}
	if w.rng.IntN(3) == 0 {
		m.Subject = fmt.Sprintf("Invoice %d", n)
	}
	if oldThread {
		msgs := w.fake.Gmail.Messages(w.email)
		m.ThreadID = msgs[w.rng.IntN(len(msgs))].ThreadID
	}
	id, err := w.fake.Gmail.AddMessage(w.email, m)
	if err != nil && !errors.Is(err, googlefake.ErrUnknownThread) {
		w.t.Fatal(err)
	}
	w.logf("new mail %s in thread %q from %q: %q", id, m.ThreadID, m.From, m.Subject)
}

// personChange is a person's change in Gmail: read or unread, trash or
// back, a star or their own label on or off. None touches a rule's label.
func (w *labelWorld) personChange() {
	g := w.fake.Gmail
	msgs := g.Messages(w.email)
	m := msgs[w.rng.IntN(len(msgs))]
	personal, _ := g.LabelID(w.email, labelPersonal)
	var err error
	what := ""
	switch w.rng.IntN(4) {
	case 0:
		what, err = "toggle read", toggle(g, w.email, m, googlefake.LabelUnread)
	case 1:
		what, err = "toggle trash", toggle(g, w.email, m, googlefake.LabelTrash)
	case 2:
		what, err = "toggle star", toggle(g, w.email, m, googlefake.LabelStarred)
	default:
		what, err = "toggle "+labelPersonal, toggle(g, w.email, m, personal)
	}
	if err != nil {
		w.t.Fatal(err)
	}
	w.logf("person: %s on %s", what, m.ID)
}

func toggle(g *googlefake.Gmail, email string, m googlefake.Message, label string) error {
	if slices.Contains(m.LabelIDs, label) {
		return g.RemoveLabels(email, m.ID, label)
	}
	return g.AddLabels(email, m.ID, label)
}

// loseBroker empties the embedded broker, as a restart of a Redis without
// persistence does: the outbox hands the tasks out again.
func (w *labelWorld) loseBroker() {
	if err := w.ta.Broker().Client().FlushAll(context.Background()).Err(); err != nil {
		w.t.Fatal(err)
	}
	w.logf("broker loss")
}

// crash stops the app (label writes it holds in flight land or not) and
// starts it again on the same data dir.
func (w *labelWorld) crash() {
	if err := w.ta.Stop(context.Background()); err != nil {
		w.t.Fatalf("stop: %v", err)
	}
	// The calls the stopped app held in flight land (or not) before the
	// next one starts: Gmail takes a dead process's calls at once or never.
	for deadline := time.Now().Add(5 * time.Second); w.gate.held() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.t.Fatalf("%d calls still held after the stop", w.gate.held())
		}
	}
	w.ta = apptest.Start(w.t, w.cfg)
	w.crashs++
	w.logf("crash and restart")
}

// settle opens the gate, lets every held write land, and waits until the
// app is idle (no reclassify pending or running, no label write waiting,
// the mirror equal to the mailbox), then checks the property.
func (w *labelWorld) settle() error {
	w.gate.open()
	w.logf("settle")
	var idle error
	deadline := time.Now().Add(45 * time.Second)
	for time.Now().Before(deadline) {
		// Idle twice, a moment apart: the queues' counts come from the
		// outbox and the broker, read one after the other (a task on its
		// way between them was in neither count for an instant before
		// 038fa5a, and new mail pushed at the last operation was checked
		// before its rules ran), and no count is taken at one instant.
		if idle = w.idle(); idle == nil {
			time.Sleep(300 * time.Millisecond)
			if idle = w.idle(); idle == nil {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if idle != nil {
		return fmt.Errorf("the app never settled: %w\n%s", idle, w.diagnose())
	}
	// The labels are checked once the app is idle; a last look after a
	// moment more catches a write that landed late.
	if err := w.rulesAsSaved(); err != nil {
		return err
	}
	err := w.labelsAsRules()
	if err == nil {
		time.Sleep(200 * time.Millisecond)
		err = w.labelsAsRules()
	}
	if err != nil {
		w.gate.mu.Lock()
		abandoned := slices.Clone(w.gate.abandoned)
		w.gate.mu.Unlock()
		return fmt.Errorf("%w\nheld calls whose callers gave up: %q\nwrites naming those messages, in the order they landed:\n%s\nwhat the app holds of them:\n%s",
			err, abandoned, strings.Join(w.gate.writesOf(w.wrong), "\n"), w.held(w.wrong))
	}
	return nil
}

// held says what the app holds of each message: the mirror's labels with
// the history ids of their last changes, the provenance records and the
// label writes that wait.
func (w *labelWorld) held(ids []string) string {
	var b strings.Builder
	err := w.ta.DB().View(func(tx *store.Tx) error {
		for _, id := range slices.Compact(slices.Sorted(slices.Values(ids))) {
			m, err := tx.MessageGet(w.acc, id)
			if err != nil {
				return err
			}
			prov, err := tx.LabelProvenance(w.acc, id)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s: mirror labels %v (base history %d, label history %v)\n  provenance %+v\n", id, m.LabelIDs, m.BaseHID, m.LabelHIDs, prov)
			for l := range prov {
				if lw, err := tx.LabelWriteGet(w.acc, l, id); err == nil {
					fmt.Fprintf(&b, "  waiting write %+v\n", lw)
				}
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintf(&b, "(%v)", err)
	}
	return b.String()
}

// diagnose says what the app holds: its dead letters, queues and jobs.
func (w *labelWorld) diagnose() string {
	dead, err := w.ta.Queue().DeadLetterCounts()
	_, queues := w.ta.Do(http.MethodGet, "/api/v1/queues", nil)
	_, jobs := w.ta.Do(http.MethodGet, "/api/v1/users/"+w.user+"/reclassify", nil)
	return fmt.Sprintf("dead letters %v (%v)\nqueues %s\nreclassify %s", dead, err, queues, jobs)
}

func (w *labelWorld) idle() error {
	// A push lost to a crash or a broker loss: the next one catches up.
	push(w.ta, w.fake, w.email, w.fake.Gmail.HistoryID(w.email))
	st := reclassify(w.ta, w.user)
	if st.Pending != nil {
		return errors.New("a reclassify is pending")
	}
	for _, j := range st.Jobs {
		if j.FinishedAt == nil {
			return fmt.Errorf("reclassify job %s is %s", j.JobID, j.State)
		}
	}
	var waiting bool
	if err := w.ta.DB().View(func(tx *store.Tx) error {
		waiting = tx.LabelWritesAny(w.acc)
		return nil
	}); err != nil {
		return err
	}
	if waiting {
		return errors.New("label writes wait")
	}
	if diff := cmp.Diff(mailbox(w.fake, w.email), mirror(w.ta, w.acc, "")); diff != "" {
		return fmt.Errorf("the mirror differs from the mailbox (-mailbox +mirror):\n%s", diff)
	}
	if n := w.gate.held(); n > 0 {
		return fmt.Errorf("%d writes held", n)
	}
	return w.tasksIdle()
}

// tasksIdle reports which queue still holds tasks (new mail's rules may
// run after the mirror caught up); the watch renewal always waits.
func (w *labelWorld) tasksIdle() error {
	var qs struct {
		Queues []struct {
			Name                                      string
			Pending, Active, Scheduled, Retry, Outbox int
		}
	}
	w.ta.JSON(http.MethodGet, "/api/v1/queues", nil, http.StatusOK, &qs)
	for _, q := range qs.Queues {
		if q.Name != "gmail-maintenance" && q.Pending+q.Active+q.Scheduled+q.Retry+q.Outbox > 0 {
			return fmt.Errorf("queue %s holds tasks: %+v", q.Name, q)
		}
	}
	return nil
}

// rulesAsSaved checks that mailroom keeps exactly the rules the test
// saved last (a save retried after a refusal stored once).
func (w *labelWorld) rulesAsSaved() error {
	var got struct {
		Rules []struct {
			ID string
			rules.Spec
		}
	}
	w.ta.JSON(http.MethodGet, "/api/v1/users/"+w.user+"/rules", nil, http.StatusOK, &got)
	want := map[string]rules.Spec{}
	for _, r := range w.rules {
		if r.id != "" {
			want[r.id] = r.spec()
		}
	}
	stored := map[string]rules.Spec{}
	for _, r := range got.Rules {
		stored[r.ID] = rules.Spec{Label: r.Label, Match: r.Match, Conditions: r.Conditions}
	}
	if diff := cmp.Diff(want, stored); diff != "" {
		return fmt.Errorf("stored rules (-saved +stored):\n%s", diff)
	}
	return nil
}

// labelsAsRules checks, message by message in Gmail, that each rule's
// label is on exactly the messages its stored version matches (a deleted
// rule's label on none).
func (w *labelWorld) labelsAsRules() error {
	var errs []error
	w.wrong = nil
	for _, r := range w.rules {
		var c *rules.Compiled
		if r.id != "" {
			var err error
			if c, err = rules.Compile(r.spec()); err != nil {
				return err
			}
		}
		labelID, _ := w.fake.Gmail.LabelID(w.email, r.label)
		for _, m := range w.fake.Gmail.Messages(w.email) {
			want := c != nil && c.Match(&rules.Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: m.Body})
			if has := labelID != "" && slices.Contains(m.LabelIDs, labelID); has != want {
				w.wrong = append(w.wrong, m.ID)
				errs = append(errs, fmt.Errorf("message %s (thread %s, from %q, subject %q) has label %s: %v, its rule (%s, version %d) says %v",
					m.ID, m.ThreadID, m.From, m.Subject, r.label, has, ruleName(r.id), r.version, want))
			}
		}
	}
	return errors.Join(errs...)
}

// writeGate stands between the app and the emulator. While it is closed
// it holds every label write (messages.modify, messages.batchModify) in
// flight; release lets the held ones land, in an order of the seed's
// choosing (they were in flight together: Gmail may take them in any
// order). A held write whose caller gave up (a crash) lands or not, as
// the seed says.
type writeGate struct {
	h       http.Handler
	history func() uint64 // the mailbox's history id
	mu      sync.Mutex
	rng     *rand.Rand
	closed  bool
	parked  []*heldWrite
	// abandoned lists the held calls whose callers gave up.
	abandoned []string
	writes    []string // the POSTs served, in order
}

type heldWrite struct {
	req     *http.Request // with the body read and a context of its own
	land    chan struct{}
	done    chan struct{}
	abandon bool // lands anyway when its caller gives up
}

// holds reports whether a closed gate holds the call: a label write, or
// the read of one message (new mail's messages.get, so that a reclassify
// can meet the message before its rules run).
func holds(r *http.Request) bool {
	path := r.URL.Path
	if r.Method == http.MethodPost {
		return strings.HasSuffix(path, "/modify") || strings.HasSuffix(path, "/batchModify")
	}
	_, id, ok := strings.Cut(path, "/messages/")
	return r.Method == http.MethodGet && ok && !strings.Contains(id, "/")
}

func (g *writeGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/messages") {
		defer g.landed(r, body)
	}
	g.mu.Lock()
	if !g.closed || !holds(r) {
		g.mu.Unlock()
		g.h.ServeHTTP(w, r)
		return
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(body))
	hw := &heldWrite{req: req, land: make(chan struct{}, 1), done: make(chan struct{}), abandon: g.rng.IntN(2) == 0}
	g.parked = append(g.parked, hw)
	g.mu.Unlock()
	defer close(hw.done)
	select {
	case <-hw.land:
		g.h.ServeHTTP(w, hw.req)
	case <-r.Context().Done():
		// Landed or not before it leaves the held list: a crash waits for
		// that list to empty before the restart.
		if hw.abandon {
			g.h.ServeHTTP(httptest.NewRecorder(), hw.req)
		}
		g.mu.Lock()
		g.parked = slices.DeleteFunc(g.parked, func(p *heldWrite) bool { return p == hw })
		g.abandoned = append(g.abandoned, fmt.Sprintf("%s %s (landed: %v)", r.Method, r.URL.Path, hw.abandon))
		g.mu.Unlock()
	}
}

// landed notes a write that reached the emulator (or, its caller gone,
// maybe did), in order.
func (g *writeGate) landed(r *http.Request, body []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.writes = append(g.writes, fmt.Sprintf("%s %s %s (history %d after it)", time.Now().Format("15:04:05.000"),
		r.URL.Path[strings.LastIndex(r.URL.Path, "/messages"):], bytes.TrimSpace(body), g.history()))
}

// writesOf returns the writes that name one of ids.
func (g *writeGate) writesOf(ids []string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, w := range g.writes {
		if slices.ContainsFunc(ids, func(id string) bool { return strings.Contains(w, id) }) {
			out = append(out, w)
		}
	}
	return out
}

// toggle closes an open gate and opens a closed one (letting what it held
// land, in the seed's order); it says which.
func (g *writeGate) toggle() string {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		g.open()
		return "opened"
	}
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	return "closed"
}

func (g *writeGate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// open lets every held write land and holds no more.
func (g *writeGate) open() {
	g.mu.Lock()
	g.closed = false
	g.mu.Unlock()
	g.release(false)
}

// release lets the held calls land one by one in the seed's order (with
// some, only part of them) and returns how many it let go.
func (g *writeGate) release(some bool) int {
	g.mu.Lock()
	held := g.parked
	g.parked = nil
	g.rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	n := len(held)
	if some && n > 1 {
		n = 1 + g.rng.IntN(n)
		g.parked = held[n:]
	}
	g.mu.Unlock()
	for _, hw := range held[:n] {
		hw.land <- struct{}{}
		<-hw.done
	}
	return n
}

func (g *writeGate) held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.parked)
}

func ruleName(id string) string {
	if id == "" {
		return "deleted"
	}
	return id
}
