// Package bench is the benchmark suite of `mailroom bench`: each scenario
// builds the app through app.New, as serve does, with the settings its
// note names overridden.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// benchOptions are what every scenario gets.
type Options struct {
	// RedisURL, when set, runs the scenario on that Redis instead of the
	// embedded broker (scenarios that compare both use it for the second run).
	RedisURL string
	// Progress receives human progress lines (stderr).
	Progress io.Writer
	// Quick shrinks the scenario (CI smoke runs); figures are then not
	// comparable with the targets.
	Quick bool
	// GC describes the garbage collector settings of the run (serve's
	// defaults unless MAILROOM_GOGC / MAILROOM_MEMORY_LIMIT say otherwise).
	GC string
	// Exe is the mailroom binary that runs a scenario's helper processes
	// (empty: this one; tests name a built binary).
	Exe string
	// Commit is the commit of the code measured (the binary's stamp), which
	// each result carries.
	Commit string
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// benchMetric is one measured figure.
type Metric struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	// Met is nil when the figure has no target.
	Met *bool `json:"met,omitempty"`
}

// benchResult is one scenario's figures, all from one run.
type Result struct {
	Scenario string   `json:"scenario"`
	Title    string   `json:"title"`
	Metrics  []Metric `json:"metrics"`
	Notes    []string `json:"notes,omitempty"`
	Elapsed  float64  `json:"elapsedSeconds"`
	// Commit and Finished say which code the figures measured and when
	// the scenario's run ended, so a row quoted elsewhere names its run.
	Commit   string    `json:"commit"`
	Finished time.Time `json:"finished"`
	// Error is why the scenario did not finish (its figures are then
	// missing, and the run's exit status says it failed).
	Error string `json:"error,omitempty"`
}

func (r *Result) add(name string, value float64, unit string) {
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: value, Unit: unit})
}

// addTarget adds a figure with its target; atLeast says which side passes.
func (r *Result) addTarget(name string, value float64, unit string, target float64, atLeast bool) {
	met := value >= target
	sign := ">="
	if !atLeast {
		met = value <= target
		sign = "<="
	}
	r.Metrics = append(r.Metrics, Metric{Name: name, Value: value, Unit: unit, Target: fmt.Sprintf("%s %g", sign, target), Met: &met})
}

// benchScenario is one named scenario of `mailroom bench`.
type Scenario struct {
	Name  string
	Title string
	Run   func(ctx context.Context, o Options) (Result, error)
}

// benchScenarios lists every scenario, in the order they run.
func Scenarios() []Scenario {
	return []Scenario{
		{"core", "Durable tasks end to end vs raw asynq, and memory through a 100,000-task burst", benchCore},
		{"gmail-isolation", "Read events push to applied: idle, behind 1,000 slow message-added events, and one shared queue", benchGmailIsolation},
		{"gmail-fairness", "50 accounts' first full syncs with live mail under a project Gmail budget that binds: every account converges, none much later, no window over the budget", benchGmailFairness},
		{"gmail-throughput", "10,000 Gmail history records of mixed kinds, push to all applied, embedded broker and redis-server", benchGmailThroughput},
		{"sheets-story", "Form submissions to Google Sheets: mailroom vs one row per call vs a 1-minute cron (939 rows, 24 forms)", benchSheetsStory},
		{"sheets-memory", "Sheets buffers: broker bytes per waiting row and bbolt bytes per submission", benchSheetsMemory},
		{"storage", "Data file bytes per mirrored message and per stored submission (the sizing in docs/benchmarks.md)", benchStorage},
		{"sheets-throughput", "Form submissions accepted per second through the API", benchSheetsThroughput},
		{"rules-story", "Five saves of a rule in a minute on 3,000 threads: mailroom vs the naive original", benchRulesStory},
		{"rules-throughput", "Reclassify of 100,000 threads against 20 rules", benchRulesThroughput},
		{"gmail-quota", "A full sync of 2,500 messages, three rule saves and a new message a second on one account at Google's 2026 prices (6,000 Gmail units a minute, messages.get 20, threads.get 40), in real time", benchGmailQuota},
		{"gmail-quota-2025", "The same at Google's 2025 prices (messages.get 5, threads.get 10, 15,000 units a minute: a project that used the API between November 2025 and April 2026), mailroom alone", benchGmailQuota2025},
		{"events", "Events a second one mailroom delivers with p99 change to 2xx within 1 s: mail changes and form rows on a rising ramp, 1, 10 and 100 webhooks, signatures verified, both brokers", benchEvents},
		{"fleet", "Three mailrooms (own brokers) on one Google project through one Redis, 30 accounts' full syncs under the project's Gmail limit: units and time against Google's floor for the project, and fairness between mailrooms", benchFleet},
		{"idle", "An idle serve's CPU and RSS, and CPU per 1,000 durable tasks: sleeping vs always-on task servers, both brokers", benchIdle},
	}
}

// OptionalScenarios run only when named: they repeat a default scenario
// with a baseline that doubles its time.
func OptionalScenarios() []Scenario {
	return []Scenario{
		{"gmail-quota-old", "gmail-quota, then the same work under the old two limiters (before the one budget) as the baseline: twice gmail-quota's time", benchGmailQuotaOld},
	}
}

// Choose returns the scenarios named, in that order; none named: every
// scenario but the optional ones.
func Choose(names []string) ([]Scenario, error) {
	all := Scenarios()
	if len(names) == 0 {
		return all, nil
	}
	all = append(all, OptionalScenarios()...)
	var chosen []Scenario
	for _, name := range names {
		i := slices.IndexFunc(all, func(s Scenario) bool { return s.Name == name })
		if i < 0 {
			have := make([]string, len(all))
			for j, s := range all {
				have[j] = s.Name
			}
			return nil, fmt.Errorf("bench: unknown scenario %q (have %s)", name, strings.Join(have, ", "))
		}
		chosen = append(chosen, all[i])
	}
	return chosen, nil
}

// Run runs the chosen scenarios in order, with progress lines, and
// returns their results. A scenario that fails is reported as such and the
// others still run (a whole `make bench` is long); the error returned then
// names every scenario that failed.
func Run(ctx context.Context, chosen []Scenario, opts Options) ([]Result, error) {
	var results []Result
	var failed []error
	for _, s := range chosen {
		opts.progress("== %s: %s", s.Name, s.Title)
		start := time.Now()
		r, err := s.Run(ctx, opts)
		if err != nil {
			r = Result{Error: err.Error()}
			failed = append(failed, fmt.Errorf("bench %s: %w", s.Name, err))
			opts.progress("   FAILED: %v", err)
		}
		r.Scenario, r.Title, r.Elapsed = s.Name, s.Title, time.Since(start).Seconds()
		r.Commit, r.Finished = opts.Commit, time.Now().UTC()
		opts.progress("   done in %.1fs", r.Elapsed)
		results = append(results, r)
		if ctx.Err() != nil {
			break
		}
	}
	return results, errors.Join(failed...)
}

func metString(m Metric) string {
	switch {
	case m.Met == nil:
		return ""
	case *m.Met:
		return "met"
	default:
		return "MISSED"
	}
}

func PrintTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tFIGURE\tVALUE\tUNIT\tTARGET\t")
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\tFAILED: %s\t\t\t\t\n", r.Scenario, r.Error)
		}
		for _, m := range r.Metrics {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s %s\t\n", r.Scenario, m.Name, formatFigure(m.Value), m.Unit, m.Target, metString(m))
		}
	}
	tw.Flush()
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "%s: %s\n", r.Scenario, n)
		}
	}
}

// PrintMarkdown writes bench/RESULTS.md: every figure with the commit and
// the time of the scenario's own run, then each scenario's notes.
func PrintMarkdown(w io.Writer, results []Result) {
	fmt.Fprintln(w, "Written whole by `make bench` (`mailroom bench --markdown`); the run column is the commit measured and when its scenario ended (UTC).")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| scenario | figure | value | unit | target | run |")
	fmt.Fprintln(w, "| --- | --- | ---: | --- | --- | --- |")
	for _, r := range results {
		run := r.Commit + " " + r.Finished.Format("2006-01-02 15:04")
		if r.Error != "" {
			fmt.Fprintf(w, "| %s | FAILED: %s |  |  |  | %s |\n", r.Scenario, strings.ReplaceAll(r.Error, "|", "/"), run)
		}
		for _, m := range r.Metrics {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s %s | %s |\n", r.Scenario, m.Name, formatFigure(m.Value), m.Unit, m.Target, metString(m), run)
		}
	}
	for _, r := range results {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "\n- %s: %s", r.Scenario, n)
		}
	}
	fmt.Fprintln(w)
}

func formatFigure(v float64) string {
	switch {
	case v == float64(int64(v)):
		return fmt.Sprintf("%d", int64(v))
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// startCPUProfile profiles the process into path until the func it returns
// is called.
func StartCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
