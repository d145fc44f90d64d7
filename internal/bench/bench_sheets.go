package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"mailroom/internal/app"
	"mailroom/internal/googlefake"
	"mailroom/queue/google"
	"mailroom/store"
)

// The Sheets story of DESIGN.md, measured: 939 submissions over 24 forms
// (one Google account, 60 writes a minute), time compressed.
const (
	sheetsStoryRows      = 939
	sheetsStoryForms     = 24
	sheetsStoryWrites    = 60 // per minute, Google's per-user quota
	sheetsStoryDelay     = 10 * time.Second
	sheetsStoryThreshold = 500
	benchSheetsKey       = "bench-api-token-0123456789abcdef0123456789"
)

// sheetsStorySpan is how long the story's submissions take to arrive: the
// burst after a survey's invitation goes out. (The targets assume it: with
// rows arriving over a whole minute, a form with a row every few seconds
// is flushed every FlushDelay, about six times a minute, by design.)
const sheetsStorySpan = 15 * time.Second

// sheetsStoryPlan is when each submission arrives (offset from the start)
// and which form it is for: Poisson arrivals over the span, a few popular
// forms and a long tail, the same for every system measured.
type sheetsStoryPlan struct {
	at   []time.Duration
	form []int
}

func newSheetsStoryPlan(rows, forms int, span time.Duration) sheetsStoryPlan {
	rng := rand.New(rand.NewPCG(939, 24))
	weights := make([]float64, forms)
	sum := 0.0
	for i := range weights {
		weights[i] = 1 / math.Sqrt(float64(i+1))
		sum += weights[i]
	}
	p := sheetsStoryPlan{at: make([]time.Duration, rows), form: make([]int, rows)}
	var t float64
	for i := range rows {
		t += rng.ExpFloat64() / float64(rows)
		p.at[i] = time.Duration(t * float64(span))
		x := rng.Float64() * sum
		for j, w := range weights {
			if x -= w; x <= 0 || j == forms-1 {
				p.form[i] = j
				break
			}
		}
	}
	// Keep the last arrival within the span.
	if last := p.at[rows-1]; last > span {
		for i := range p.at {
			p.at[i] = time.Duration(float64(p.at[i]) * float64(span) / float64(last))
		}
	}
	return p
}

// sheetsRun is one system's figures, in real (compressed) time.
type sheetsRun struct {
	calls        int // values writes (grid grows apart)
	grows        int // grid grows (spreadsheets.batchUpdate), reported apart
	reads        int // read calls (spreadsheets.get of the grid, read-backs)
	wall         time.Duration
	latencies    []time.Duration
	callsPerForm []int // values writes per form
	growsPerForm []int
	rowsPerForm  []int
	maxInWindow  int // most write calls (grows included) in any quota window
	maxReads     int // most read calls in any quota window
}

func (r sheetsRun) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// sheetsStoryPrior gives the story's sheets in use: every fourth form's
// sheet (the first the most popular) already holds rows from before,
// 1,000 less half its story rows, so its rows cross the 1,000-row grid of
// a sheet halfway through the story and the grow is part of the story. The
// other forms write to fresh sheets.
func sheetsStoryPrior(plan sheetsStoryPlan, forms int) []int {
	rows := make([]int, forms)
	for _, f := range plan.form {
		rows[f]++
	}
	prior := make([]int, forms)
	for f := range prior {
		if f%4 == 0 && rows[f] >= 2 {
			prior[f] = googlefake.DefaultGridRows - rows[f]/2
		}
	}
	return prior
}

// benchSheetsStory runs the story for mailroom, for the one-row-per-call
// baseline and for the 1-minute-cron baseline, against the strict emulator
// with Google's quotas (time compressed), and reports the figures scaled
// back to real minutes; then 2,500 rows into one fresh 1,000-row sheet.
func benchSheetsStory(ctx context.Context, o Options) (Result, error) {
	var r Result
	rows, compress := sheetsStoryRows, 10.0
	if o.Quick {
		rows, compress = 240, 60
	}
	minute := time.Duration(float64(time.Minute) / compress)
	delay := time.Duration(float64(sheetsStoryDelay) / compress)
	plan := newSheetsStoryPlan(rows, sheetsStoryForms, time.Duration(float64(sheetsStorySpan)/compress))
	prior := sheetsStoryPrior(plan, sheetsStoryForms)

	o.progress("   mailroom")
	m, diff, err := runMailroomStory(ctx, plan, prior, minute, delay)
	if err != nil {
		return r, fmt.Errorf("mailroom: %w", err)
	}
	o.progress("   one row per call (about %s)", time.Duration(float64(rows)/sheetsStoryWrites*float64(minute)).Round(time.Second))
	one, err := runSheetsBaseline(ctx, plan, prior, minute, false)
	if err != nil {
		return r, fmt.Errorf("one-row-per-call baseline: %w", err)
	}
	o.progress("   1-minute cron")
	cron, err := runSheetsBaseline(ctx, plan, prior, minute, true)
	if err != nil {
		return r, fmt.Errorf("cron baseline: %w", err)
	}
	crossing := 0
	for _, p := range prior {
		if p > 0 {
			crossing++
		}
	}
	r.Notes = append(r.Notes,
		fmt.Sprintf("%d submissions over %d forms of one Google account arriving over %s (Poisson, a few popular forms); flush delay %s, threshold %d", rows, sheetsStoryForms, sheetsStorySpan, sheetsStoryDelay, sheetsStoryThreshold),
		fmt.Sprintf("the strict emulator (a new sheet is 1,000 x 26; a write past the grid is refused) with Google's quotas: %d writes and 60 reads a minute per user, 300 each per project; %d of the %d sheets are in use (every fourth, the most popular first: each holds 1,000 less half its story rows from before), so their rows cross row 1,000 and their grids must grow", sheetsStoryWrites, crossing, sheetsStoryForms),
		fmt.Sprintf("time compressed %gx (a minute, the quota's window, lasts %s) and scaled back; fixed costs (HTTP, fsync, polling) are scaled up with it, so latencies err high", compress, minute),
		"baselines write through the same Sheets adapter and emulator, from the same sheets: one call per row as rows arrive, or one call per form each minute (the cron, whose minute starts halfway through a minute of its own: its latencies vary with that phase, up to 59 s); they grow a grid as mailroom does (one appendDimension to the write's last row + 2,000 rows when a write would pass it, from the same write quota) but without reading the grid first",
		"write calls are values writes; grid grows (spreadsheets.batchUpdate, each a write of the quota) and reads are counted apart",
		settingsNote("mailroom's app", diff))
	storyFigures(&r, rows, compress, m, one, cron, crossing)

	o.progress("   2,500 rows into a fresh 1,000-row sheet")
	if err := benchSheetsGrid(ctx, &r); err != nil {
		return r, fmt.Errorf("2,500 rows: %w", err)
	}
	return r, nil
}

// storyFigures adds the story's figures: each system's, then mailroom's
// calls, grows and quota use against their targets.
func storyFigures(r *Result, rows int, compress float64, m, one, cron sheetsRun, crossing int) {
	scaleMin := func(d time.Duration) float64 { return d.Minutes() * compress }
	scaleSec := func(d time.Duration) float64 { return d.Seconds() * compress }
	for _, s := range []struct {
		name string
		run  sheetsRun
	}{{"mailroom", m}, {"one row per call", one}, {"1-minute cron", cron}} {
		r.add(s.name+": write calls (values writes)", float64(s.run.calls), "calls")
		r.add(s.name+": grid grows (writes apart)", float64(s.run.grows), "calls")
		r.add(s.name+": rows per write call", float64(rows)/float64(max(s.run.calls, 1)), "rows")
		r.add(s.name+": wall time to the last row", scaleMin(s.run.wall), "min")
		r.add(s.name+": p50 latency, submission to row", scaleSec(s.run.percentile(0.50)), "s")
		if s.name == "mailroom" {
			r.addTarget(s.name+": p99 latency, submission to row", scaleSec(s.run.percentile(0.99)), "s", (sheetsStoryDelay + time.Second).Seconds(), false)
		} else {
			r.add(s.name+": p99 latency, submission to row", scaleSec(s.run.percentile(0.99)), "s")
		}
	}
	extra, mostGrows := 0, 0
	for f, calls := range m.callsPerForm {
		need := (m.rowsPerForm[f] + sheetsStoryThreshold - 1) / sheetsStoryThreshold
		extra = max(extra, calls-need)
		mostGrows = max(mostGrows, m.growsPerForm[f])
	}
	r.addTarget("mailroom: most write calls of a form beyond one per 500 rows (its grows apart)", float64(extra), "calls", 1, false)
	r.addTarget("mailroom: most grid grows of a form (a form crosses its grid once)", float64(mostGrows), "calls", 1, false)
	r.addTarget(fmt.Sprintf("mailroom: grid grows in all (%d forms cross row 1,000)", crossing), float64(m.grows), "calls", float64(crossing), false)
	r.add("mailroom: read calls (grid reads before the grows, read-backs)", float64(m.reads), "calls")
	r.addTarget("mailroom: most write calls in any minute (grows included)", float64(m.maxInWindow), "calls", sheetsStoryWrites, false)
	r.addTarget("mailroom: most read calls in any minute", float64(m.maxReads), "calls", 60, false)
}

// sheetsTimedFake is the emulator with a record of when each row landed (by the
// submission id in its last cell).
type sheetsTimedFake struct {
	*googlefake.Server
	url    string
	srv    *http.Server
	mu     sync.Mutex
	landed map[string]time.Time
}

func startSheetsTimedFake(opts googlefake.Options) (*sheetsTimedFake, error) {
	f := &sheetsTimedFake{Server: googlefake.New(opts), landed: map[string]time.Time{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f.url = "http://" + ln.Addr().String() + "/"
	f.SetBaseURL(f.url)
	f.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.HasPrefix(r.URL.Path, "/v4/spreadsheets/") {
			f.Handler().ServeHTTP(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &sheetsStatusWriter{ResponseWriter: w}
		f.Handler().ServeHTTP(rec, r)
		if rec.status != 0 && rec.status != http.StatusOK {
			return
		}
		var vr struct{ Values [][]any }
		if json.Unmarshal(body, &vr) != nil {
			return
		}
		now := time.Now()
		f.mu.Lock()
		for _, row := range vr.Values {
			if len(row) == 0 {
				continue
			}
			if id, ok := row[len(row)-1].(string); ok {
				if _, seen := f.landed[id]; !seen {
					f.landed[id] = now
				}
			}
		}
		f.mu.Unlock()
	})}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

func (f *sheetsTimedFake) Close() { _ = f.srv.Close(); _ = f.Server.Close() }

type sheetsStatusWriter struct {
	http.ResponseWriter
	status int
}

func (w *sheetsStatusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// sheetsAPI calls a running app's API.
type sheetsAPI struct {
	base string
	c    *http.Client
}

func newSheetsAPI(base string, conns int) sheetsAPI {
	return sheetsAPI{base: base, c: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute,
	}}}
}

func (b sheetsAPI) do(ctx context.Context, method, path string, body any, want int, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchSheetsKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// startSheetsBenchApp runs the whole appliance in process against the
// emulator at googleURL, with the API token, Google URLs, an hour's poll
// and task polling every 10 ms (delayed tasks every 20 ms) overridden, then
// mutate's changes. It also returns every setting that differs from
// serve's defaults (settingsDiff), for the scenario's note.
func startSheetsBenchApp(ctx context.Context, googleURL string, mutate func(*setup)) (*app.App, sheetsAPI, []string, func(), error) {
	var diff []string
	a, stop, err := startApp(ctx, func(cfg *setup) {
		cfg.APIToken, cfg.AdminPassword = benchSheetsKey, "bench admin password"
		cfg.GoogleAPIURL, cfg.GoogleTokenURL = googleURL, googleURL+"token"
		cfg.GmailPollInterval = time.Hour
		cfg.TaskPollInterval, cfg.DelayedCheckInterval = 10*time.Millisecond, 20*time.Millisecond
		// The submission limits and backlog are serve's: every scenario's
		// load is a burst they admit (throughput spreads its 30,000 over
		// two users, within each user's burst of 20,000).
		if mutate != nil {
			mutate(cfg)
		}
		diff = settingsDiff(cfg)
	})
	if err != nil {
		return nil, sheetsAPI{}, nil, nil, err
	}
	return a, newSheetsAPI("http://"+a.Addr(), 256), diff, stop, nil
}

// sheetsBenchForms makes a user, connects one emulator account and creates n
// forms, each on its own spreadsheet. prior[i], when given, is the number
// of rows form i's sheet already holds from before (a sheet in use, typed
// into the emulator without spending quota): the form writes below them.
func sheetsBenchForms(ctx context.Context, api sheetsAPI, fake *googlefake.Server, email string, n int, prior []int) ([]string, error) {
	var u, acct struct{ ID string }
	if err := api.do(ctx, http.MethodPost, "/api/v1/users", map[string]string{"email": "owner-" + email, "name": "Bench"}, http.StatusCreated, &u); err != nil {
		return nil, err
	}
	if err := api.do(ctx, http.MethodPost, "/api/v1/accounts", map[string]string{"userId": u.ID, "email": email, "refreshToken": fake.AddAccount(email)}, http.StatusCreated, &acct); err != nil {
		return nil, err
	}
	ids := make([]string, n)
	for i := range n {
		book, err := fake.Sheets.CreateSpreadsheet(email, fmt.Sprintf("Survey %d", i))
		if err != nil {
			return nil, err
		}
		if i < len(prior) && prior[i] > 0 {
			if _, err := fake.Sheets.Fill(book, "Sheet1", earlierRows(prior[i])); err != nil {
				return nil, err
			}
		}
		var f struct {
			ID       string
			StartRow int `json:"startRow"`
		}
		if err := api.do(ctx, http.MethodPost, "/api/v1/forms", map[string]any{
			"userId": u.ID, "accountId": acct.ID, "spreadsheetId": book, "sheet": "Sheet1", "columns": []string{"name", "email", "answer"},
		}, http.StatusCreated, &f); err != nil {
			return nil, err
		}
		if i < len(prior) && f.StartRow != prior[i]+1 {
			return nil, fmt.Errorf("form %d starts at row %d, want %d (below the %d rows from before)", i, f.StartRow, prior[i]+1, prior[i])
		}
		ids[i] = f.ID
	}
	return ids, nil
}

// earlierRows are n rows a sheet in use holds from before.
func earlierRows(n int) [][]string {
	rows := make([][]string, n)
	for k := range rows {
		rows[k] = []string{"2026-01-02T03:04:05Z", fmt.Sprintf("Earlier person %d", k), fmt.Sprintf("earlier%d@example.com", k), "An answer from before.", fmt.Sprintf("earlier-%d", k)}
	}
	return rows
}

func sheetsAnswers(i int) map[string]any {
	return map[string]any{"answers": map[string]string{
		"name": fmt.Sprintf("Person %d", i), "email": fmt.Sprintf("person%d@example.com", i), "answer": "Yes, and I would come again.",
	}}
}

// runMailroomStory runs the story through mailroom and returns its
// figures and the settings that differ from serve's defaults.
func runMailroomStory(ctx context.Context, plan sheetsStoryPlan, prior []int, minute, delay time.Duration) (sheetsRun, []string, error) {
	var run sheetsRun
	fake, err := startSheetsTimedFake(googlefake.Options{SheetsWriteLimit: sheetsStoryWrites, SheetsWindow: minute})
	if err != nil {
		return run, nil, err
	}
	defer fake.Close()
	_, api, diff, stop, err := startSheetsBenchApp(ctx, fake.url, func(c *setup) {
		c.SheetsFlushDelay, c.SheetsFlushThreshold = delay, sheetsStoryThreshold
		c.SheetsWritesPerMinute, c.SheetsQuotaWindow = sheetsStoryWrites, minute
	})
	if err != nil {
		return run, nil, err
	}
	defer stop()
	const email = "story@example.com"
	forms, err := sheetsBenchForms(ctx, api, fake.Server, email, sheetsStoryForms, prior)
	if err != nil {
		return run, diff, err
	}
	fake.ResetCounters()

	sent, start, err := submitPlan(ctx, api, forms, plan)
	if err != nil {
		return run, diff, err
	}
	landed, err := fake.waitLanded(ctx, len(plan.at), 10*minute+30*time.Second)
	if err != nil {
		return run, diff, fmt.Errorf("%w; forms with rows waiting: %s", err, waitingForms(ctx, api))
	}
	var last time.Time
	for id, at := range sent {
		l, ok := landed[id]
		if !ok {
			return run, diff, fmt.Errorf("submission %s never landed", id)
		}
		run.latencies = append(run.latencies, l.Sub(at))
		if l.After(last) {
			last = l
		}
	}
	run.wall = last.Sub(start)
	if err := fake.figures(&run, email); err != nil {
		return run, diff, err
	}
	return run, diff, formFigures(ctx, api, &run)
}

// waitLanded waits until n rows have landed, at most wait, and returns
// when each landed (by submission id).
func (f *sheetsTimedFake) waitLanded(ctx context.Context, n int, wait time.Duration) (map[string]time.Time, error) {
	deadline := time.Now().Add(wait)
	for {
		f.mu.Lock()
		got := len(f.landed)
		f.mu.Unlock()
		if got >= n {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d rows landed", got, n)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.landed), nil
}

// figures reads the emulator's counts of one account's calls into run,
// and fails when Google refused any (mailroom's plan went over a quota).
func (f *sheetsTimedFake) figures(run *sheetsRun, email string) error {
	st := f.Sheets.Stats()
	run.calls, run.grows, run.reads = st.WriteCalls-st.GridGrows, st.GridGrows, st.ReadCalls
	run.maxInWindow = f.Sheets.MaxWritesInWindow(email)
	run.maxReads = f.Sheets.MaxReadsInWindow(email)
	if st.RejectedWrites > 0 || st.RejectedReads > 0 {
		return fmt.Errorf("Google refused %d writes and %d reads over quota", st.RejectedWrites, st.RejectedReads)
	}
	return nil
}

// waitingForms describes the forms that still have rows waiting, for an
// error.
func waitingForms(ctx context.Context, api sheetsAPI) string {
	var list struct {
		Forms []struct {
			ID, State, LastError                         string
			Buffered, RowsWritten, WriteCalls, GridGrows int
			NextRow                                      int `json:"nextRow"`
		}
	}
	if err := api.do(ctx, http.MethodGet, "/api/v1/forms", nil, http.StatusOK, &list); err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, f := range list.Forms {
		if f.Buffered > 0 {
			fmt.Fprintf(&b, "[%s %s: %d waiting, %d written in %d calls and %d grows, next row %d, last error %q] ",
				f.ID, f.State, f.Buffered, f.RowsWritten, f.WriteCalls, f.GridGrows, f.NextRow, f.LastError)
		}
	}
	var qs struct{ Queues []map[string]any }
	if err := api.do(ctx, http.MethodGet, "/api/v1/queues", nil, http.StatusOK, &qs); err == nil {
		for _, q := range qs.Queues {
			if q["name"] == "sheets-flush" {
				fmt.Fprintf(&b, "; the sheets-flush queue: %v", q)
			}
		}
	}
	return b.String()
}

// formFigures reads each form's writes, grows and rows from the API.
func formFigures(ctx context.Context, api sheetsAPI, run *sheetsRun) error {
	var list struct {
		Forms []struct {
			ID          string
			WriteCalls  int `json:"writeCalls"`
			GridGrows   int `json:"gridGrows"`
			RowsWritten int `json:"rowsWritten"`
		}
	}
	if err := api.do(ctx, http.MethodGet, "/api/v1/forms", nil, http.StatusOK, &list); err != nil {
		return err
	}
	for _, f := range list.Forms {
		run.callsPerForm = append(run.callsPerForm, f.WriteCalls)
		run.growsPerForm = append(run.growsPerForm, f.GridGrows)
		run.rowsPerForm = append(run.rowsPerForm, f.RowsWritten)
	}
	return nil
}

// cronBaseline is the cron baseline: each form's waiting rows are written
// once a minute, the cron's minute starting halfway through the survey's
// first. It returns when every row of plan is written, with when the last
// was.
func cronBaseline(ctx context.Context, plan sheetsStoryPlan, minute time.Duration, arrivals <-chan int, arrived func(int) time.Time, write func(int, []int) error, run *sheetsRun) (last time.Time, err error) {
	phase := minute / 2 // the cron's minute does not start with the survey: halfway, on average
	tick := time.NewTimer(phase)
	defer tick.Stop()
	waiting := make([][]int, sheetsStoryForms)
	done := 0
	for done < len(plan.at) {
		select {
		case i, ok := <-arrivals:
			if !ok {
				arrivals = nil
				continue
			}
			waiting[plan.form[i]] = append(waiting[plan.form[i]], i)
			continue
		case <-tick.C:
			tick.Reset(minute)
		case <-ctx.Done():
			return last, ctx.Err()
		}
		for f, idx := range waiting {
			if len(idx) == 0 {
				continue
			}
			if err := write(f, idx); err != nil {
				return last, err
			}
			now := time.Now()
			for _, i := range idx {
				run.latencies = append(run.latencies, now.Sub(arrived(i)))
			}
			run.calls++
			done += len(idx)
			waiting[f] = nil
			last = now
		}
	}
	return last, nil
}

// submitPlan posts the plan's submissions at their times, each from a
// goroutine of its own, and returns when each was sent (by submission id)
// and when the first could have been.
func submitPlan(ctx context.Context, api sheetsAPI, forms []string, plan sheetsStoryPlan) (map[string]time.Time, time.Time, error) {
	sent := make(map[string]time.Time, len(plan.at))
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr atomic.Value
	)
	start := time.Now()
	for i, off := range plan.at {
		if d := time.Until(start.Add(off)); d > 0 {
			time.Sleep(d)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := time.Now()
			var got struct{ ID string }
			if err := api.do(ctx, http.MethodPost, "/api/v1/forms/"+forms[plan.form[i]]+"/submissions", sheetsAnswers(i), http.StatusAccepted, &got); err != nil {
				firstErr.CompareAndSwap(nil, err)
				return
			}
			mu.Lock()
			sent[got.ID] = at
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return nil, start, err
	}
	return sent, start, nil
}

// sheetsLimiter is the baselines' quota: at most n calls in any window.
// Each call is logged when admitted and again when it returns (settle),
// as mailroom's quota does: Google counts a call when it arrives, somewhere
// in between.
type sheetsLimiter struct {
	n      int
	window time.Duration
	calls  []time.Time
}

func (l *sheetsLimiter) wait(ctx context.Context) error {
	for {
		now := time.Now()
		for len(l.calls) > 0 && now.Sub(l.calls[0]) >= l.window {
			l.calls = l.calls[1:]
		}
		if len(l.calls) < l.n {
			l.calls = append(l.calls, now)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(l.calls[0].Add(l.window).Sub(now)):
		}
	}
}

// settle stamps the last admitted call with the time it returned (calls
// are made one at a time).
func (l *sheetsLimiter) settle() {
	if len(l.calls) > 0 {
		l.calls[len(l.calls)-1] = time.Now()
	}
}

// sheetsBaselineWriter writes rows the baselines' way: values.update to
// each form's next rows through the same adapter, within the quota (a
// local sliding window), growing a sheet's grid as mailroom does when a
// write would pass it (one appendDimension to the write's last row + 2,000
// rows, from the same quota), without reading the grid first.
type sheetsBaselineWriter struct {
	client  *google.Sheets
	lim     *sheetsLimiter
	books   []string
	nextRow []int
	grid    []int // each sheet's grid rows, as the writer knows them
	run     *sheetsRun
}

func newSheetsBaselineWriter(ctx context.Context, fake *googlefake.Server, base, email string, prior []int, minute time.Duration, run *sheetsRun) (*sheetsBaselineWriter, error) {
	gc := google.New(google.Config{APIURL: base, TokenURL: fake.TokenURL()})
	client, err := gc.Sheets(ctx, gc.TokenSource(google.Token{RefreshToken: fake.AddAccount(email)}, nil))
	if err != nil {
		return nil, err
	}
	w := &sheetsBaselineWriter{client: client, lim: &sheetsLimiter{n: sheetsStoryWrites, window: minute + minute/50}, run: run,
		books: make([]string, sheetsStoryForms), nextRow: make([]int, sheetsStoryForms), grid: make([]int, sheetsStoryForms)}
	for i := range w.books {
		if w.books[i], err = fake.Sheets.CreateSpreadsheet(email, fmt.Sprint("Baseline ", i)); err != nil {
			return nil, err
		}
		w.nextRow[i], w.grid[i] = 1, googlefake.DefaultGridRows
		if i < len(prior) && prior[i] > 0 {
			if _, err := fake.Sheets.Fill(w.books[i], "Sheet1", earlierRows(prior[i])); err != nil {
				return nil, err
			}
			w.nextRow[i] = prior[i] + 1
		}
	}
	return w, nil
}

// write writes the rows of submissions idx to form's sheet, growing its
// grid first when they would pass it.
func (w *sheetsBaselineWriter) write(ctx context.Context, form int, idx []int) error {
	last := w.nextRow[form] + len(idx) - 1
	if last > w.grid[form] {
		if err := w.lim.wait(ctx); err != nil {
			return err
		}
		rows := last + 2000
		err := w.client.Grow(ctx, w.books[form], 0, rows-w.grid[form], 0)
		w.lim.settle()
		if err != nil {
			return err
		}
		w.grid[form] = rows
		w.run.grows++
	}
	if err := w.lim.wait(ctx); err != nil {
		return err
	}
	rows := make([][]string, len(idx))
	for j, i := range idx {
		rows[j] = []string{time.Now().UTC().Format(time.RFC3339), fmt.Sprintf("Person %d", i), fmt.Sprintf("person%d@example.com", i), "Yes, and I would come again.", fmt.Sprint(i)}
	}
	a1 := fmt.Sprintf("'Sheet1'!A%d:E%d", w.nextRow[form], last)
	err := w.client.WriteRange(ctx, w.books[form], a1, rows)
	w.lim.settle()
	if err != nil {
		return err
	}
	w.nextRow[form] = last + 1
	return nil
}

// runSheetsBaseline writes the story's rows the old ways: one call per row
// as it arrives (cron false), or once a minute one call per form with all
// its waiting rows (cron true), within the same quota, into the same
// sheets (prior rows from before).
func runSheetsBaseline(ctx context.Context, plan sheetsStoryPlan, prior []int, minute time.Duration, cron bool) (sheetsRun, error) {
	var run sheetsRun
	fake := googlefake.New(googlefake.Options{SheetsWriteLimit: sheetsStoryWrites, SheetsWindow: minute})
	base, err := fake.Start()
	if err != nil {
		return run, err
	}
	defer fake.Close()
	const email = "baseline@example.com"
	w, err := newSheetsBaselineWriter(ctx, fake, base, email, prior, minute, &run)
	if err != nil {
		return run, err
	}
	write := func(form int, idx []int) error { return w.write(ctx, form, idx) }

	start := time.Now()
	arrivals := make(chan int, len(plan.at))
	go func() {
		for i, off := range plan.at {
			if d := time.Until(start.Add(off)); d > 0 {
				time.Sleep(d)
			}
			arrivals <- i
		}
		close(arrivals)
	}()
	arrived := func(i int) time.Time { return start.Add(plan.at[i]) }
	var last time.Time
	if !cron {
		for i := range arrivals {
			if err := write(plan.form[i], []int{i}); err != nil {
				return run, err
			}
			now := time.Now()
			run.latencies = append(run.latencies, now.Sub(arrived(i)))
			run.calls++
			last = now
		}
	} else {
		if last, err = cronBaseline(ctx, plan, minute, arrivals, arrived, write, &run); err != nil {
			return run, err
		}
	}
	run.wall = last.Sub(start)
	st := fake.Sheets.Stats()
	if st.RejectedWrites > 0 || st.GridGrows != run.grows || st.WriteCalls-st.GridGrows != run.calls {
		return run, fmt.Errorf("the emulator counted %d writes, %d grows and %d refusals; the baseline made %d writes and %d grows", st.WriteCalls-st.GridGrows, st.GridGrows, st.RejectedWrites, run.calls, run.grows)
	}
	run.maxInWindow = fake.Sheets.MaxWritesInWindow(email)
	return run, nil
}

// benchSheetsMemory measures what a waiting row costs: bytes in the broker
// (none: the broker holds one flush task per sheet, never rows) and bytes
// in bbolt (the submission, and its id in the sheet's buffer).
func benchSheetsMemory(ctx context.Context, o Options) (Result, error) {
	var r Result
	n := 10000
	if o.Quick {
		n = 1000
	}
	fake, err := startSheetsTimedFake(googlefake.Options{}) // the strict emulator, Google's quotas
	if err != nil {
		return r, err
	}
	defer fake.Close()
	a, api, diff, stop, err := startSheetsBenchApp(ctx, fake.url, func(c *setup) {
		c.SheetsFlushDelay = time.Hour // nothing is written: every row waits
		c.SheetsFlushThreshold = 10000
	})
	if err != nil {
		return r, err
	}
	defer stop()
	forms, err := sheetsBenchForms(ctx, api, fake.Server, "memory@example.com", sheetsStoryForms, nil)
	if err != nil {
		return r, err
	}
	// One waiting row per form: each form now has its one flush task.
	for i, f := range forms {
		if err := api.do(ctx, http.MethodPost, "/api/v1/forms/"+f+"/submissions", sheetsAnswers(i), http.StatusAccepted, nil); err != nil {
			return r, err
		}
	}
	if err := sheetsWaitScheduled(ctx, api, "sheets-flush", len(forms)); err != nil {
		return r, err
	}
	rdb := a.Broker().Client()
	b0, err := sheetsBrokerBytes(ctx, rdb)
	if err != nil {
		return r, err
	}
	s0 := sheetsStorage(a.DB())

	o.progress("   %d more waiting rows", n)
	if _, err := sheetsSubmitMany(ctx, api, forms, n, 32); err != nil {
		return r, err
	}
	if err := sheetsWaitScheduled(ctx, api, "sheets-flush", len(forms)); err != nil {
		return r, err
	}
	b1, err := sheetsBrokerBytes(ctx, rdb)
	if err != nil {
		return r, err
	}
	s1 := sheetsStorage(a.DB())
	r.Notes = append(r.Notes,
		fmt.Sprintf("%d rows waiting over %d forms (flush delay 1h); broker bytes are keys plus values of every key, before and after", n, len(forms)),
		"the cron design this replaces held each waiting row as a whole JSON document in Redis (about 7 KB)",
		"the strict emulator with Google's quotas (60 writes and 60 reads a minute per user, 300 each per project); nothing is written (creating the forms spends two reads each)",
		settingsNote("the app", diff))
	r.addTarget("broker bytes per waiting row", float64(b1-b0)/float64(n), "bytes", 0, false)
	r.add("broker bytes in all, with every row waiting", float64(b1), "bytes")
	r.add("bbolt bytes per submission (stored)", float64(s1.Submissions-s0.Submissions)/float64(n), "bytes")
	r.add("bbolt bytes per waiting id (the buffer; freed once written)", float64(s1.Buffers-s0.Buffers)/float64(n), "bytes")
	return r, nil
}

func sheetsStorage(db *store.DB) store.FormsStorage {
	var s store.FormsStorage
	_ = db.View(func(tx *store.Tx) error { s = tx.FormsStorage(); return nil })
	return s
}

// sheetsWaitScheduled waits until the queue holds want scheduled tasks (the
// relay handed every flush to the broker).
func sheetsWaitScheduled(ctx context.Context, api sheetsAPI, queueName string, want int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var qs struct {
			Queues []struct {
				Name      string
				Scheduled int
			}
		}
		if err := api.do(ctx, http.MethodGet, "/api/v1/queues", nil, http.StatusOK, &qs); err != nil {
			return err
		}
		for _, q := range qs.Queues {
			if q.Name == queueName && q.Scheduled == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %s never held %d scheduled tasks: %+v", queueName, want, qs.Queues)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sheetsBrokerBytes adds up the bytes of every key and value in the broker.
func sheetsBrokerBytes(ctx context.Context, rdb redis.UniversalClient) (int64, error) {
	var total int64
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, "*", 1000).Result()
		if err != nil {
			return 0, err
		}
		for _, k := range keys {
			total += int64(len(k))
			typ, err := rdb.Type(ctx, k).Result()
			if err != nil {
				return 0, err
			}
			switch typ {
			case "string":
				n, err := rdb.StrLen(ctx, k).Result()
				if err != nil {
					return 0, err
				}
				total += n
			case "hash":
				m, err := rdb.HGetAll(ctx, k).Result()
				if err != nil {
					return 0, err
				}
				for f, v := range m {
					total += int64(len(f) + len(v))
				}
			case "list":
				vs, err := rdb.LRange(ctx, k, 0, -1).Result()
				if err != nil {
					return 0, err
				}
				for _, v := range vs {
					total += int64(len(v))
				}
			case "set":
				vs, err := rdb.SMembers(ctx, k).Result()
				if err != nil {
					return 0, err
				}
				for _, v := range vs {
					total += int64(len(v))
				}
			case "zset":
				zs, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
				if err != nil {
					return 0, err
				}
				for _, z := range zs {
					total += int64(len(fmt.Sprint(z.Member))) + 8
				}
			}
		}
		if cursor = next; cursor == 0 {
			return total, nil
		}
	}
}

// sheetsSubmitMany posts n submissions round robin over forms from conc
// clients, as fast as they are answered, and returns the accepted count.
func sheetsSubmitMany(ctx context.Context, api sheetsAPI, forms []string, n, conc int) (int, error) {
	var (
		next     atomic.Int64
		accepted atomic.Int64
		firstErr atomic.Value
		wg       sync.WaitGroup
	)
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := api.do(ctx, http.MethodPost, "/api/v1/forms/"+forms[i%len(forms)]+"/submissions", sheetsAnswers(i), http.StatusAccepted, nil); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				accepted.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return int(accepted.Load()), err
	}
	return int(accepted.Load()), nil
}

// benchSheetsThroughput measures submissions accepted per second through
// the HTTP API (validation, one batched bbolt commit for many requests,
// the flush kept in the outbox), with flushes running as they would.
func benchSheetsThroughput(ctx context.Context, o Options) (Result, error) {
	var r Result
	n, conc := 30000, 128
	if o.Quick {
		n = 3000
	}
	fake, err := startSheetsTimedFake(googlefake.Options{}) // the strict emulator, Google's quotas
	if err != nil {
		return r, err
	}
	defer fake.Close()
	_, api, diff, stop, err := startSheetsBenchApp(ctx, fake.url, func(c *setup) {
		// serve's defaults: the story's short polls cost CPU here.
		c.TaskPollInterval, c.DelayedCheckInterval = 100*time.Millisecond, time.Second
	})
	if err != nil {
		return r, err
	}
	defer stop()
	var forms []string
	for _, email := range []string{"throughput-a@example.com", "throughput-b@example.com"} {
		some, err := sheetsBenchForms(ctx, api, fake.Server, email, sheetsStoryForms/2, nil)
		if err != nil {
			return r, err
		}
		forms = append(forms, some...)
	}
	// Warm up connections and caches.
	if _, err := sheetsSubmitMany(ctx, api, forms, 500, conc); err != nil {
		return r, err
	}
	start := time.Now()
	got, err := sheetsSubmitMany(ctx, api, forms, n, conc)
	if err != nil {
		return r, err
	}
	elapsed := time.Since(start)
	r.Notes = append(r.Notes,
		fmt.Sprintf("%d submissions over %d forms of two users (each within serve's burst of 20,000 a user and 5,000 a form) from %d keep-alive clients in the same process (they share its CPU), after 500 to warm up; GOMAXPROCS %d, %s", n, len(forms), conc, runtime.GOMAXPROCS(0), o.GC),
		"flushes run meanwhile at serve's settings (flush delay 10s, threshold 500, 60 writes and 60 reads a minute per account, two accounts) against the strict emulator with Google's quotas: each form's rows pass row 1,000 of its fresh sheet, so grids grow too; flushes over the quota wait",
		settingsNote("the app", diff))
	r.addTarget("submissions accepted per second through the API", float64(got)/elapsed.Seconds(), "submissions/s", 5000, true)
	if got != n {
		return r, errors.New("not every submission was accepted")
	}
	return r, nil
}
