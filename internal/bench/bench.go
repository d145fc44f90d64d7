package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"text/tabwriter"
	"time"
)

// benchOptions are what every scenario gets.
type benchOptions struct {
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
}

func (o benchOptions) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// benchMetric is one measured figure.
type benchMetric struct {
	Name   string  `json:"name"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Target string  `json:"target,omitempty"`
	// Met is nil when the figure has no target.
	Met *bool `json:"met,omitempty"`
}

// benchResult is one scenario's figures, all from one run.
type benchResult struct {
	Scenario string        `json:"scenario"`
	Title    string        `json:"title"`
	Metrics  []benchMetric `json:"metrics"`
	Notes    []string      `json:"notes,omitempty"`
	Elapsed  float64       `json:"elapsedSeconds"`
}

func (r *benchResult) add(name string, value float64, unit string) {
	r.Metrics = append(r.Metrics, benchMetric{Name: name, Value: value, Unit: unit})
}

// addTarget adds a figure with its target; atLeast says which side passes.
func (r *benchResult) addTarget(name string, value float64, unit string, target float64, atLeast bool) {
	met := value >= target
	sign := ">="
	if !atLeast {
		met = value <= target
		sign = "<="
	}
	r.Metrics = append(r.Metrics, benchMetric{Name: name, Value: value, Unit: unit, Target: fmt.Sprintf("%s %g", sign, target), Met: &met})
}

// benchScenario is one named scenario of `mailroom bench`.
type benchScenario struct {
	Name  string
	Title string
	Run   func(ctx context.Context, o benchOptions) (benchResult, error)
}

// benchScenarios lists every scenario, in the order they run.
func benchScenarios() []benchScenario {
	return []benchScenario{
		{"core", "Durable tasks end to end vs raw asynq, and memory through a 100,000-task burst", benchCore},
		{"gmail-isolation", "Read events push to applied: idle, behind 1,000 slow message-added events, and one shared queue", benchGmailIsolation},
		{"gmail-throughput", "10,000 Gmail history records of mixed kinds, push to all applied, embedded broker and redis-server", benchGmailThroughput},
		{"sheets-story", "Form submissions to Google Sheets: mailroom vs one row per call vs a 1-minute cron (939 rows, 24 forms)", benchSheetsStory},
		{"sheets-memory", "Sheets buffers: broker bytes per waiting row and bbolt bytes per submission", benchSheetsMemory},
		{"sheets-throughput", "Form submissions accepted per second through the API", benchSheetsThroughput},
		{"rules-story", "Five saves of a rule in a minute on 3,000 threads: mailroom vs the naive original", benchRulesStory},
		{"rules-throughput", "Reclassify of 100,000 threads against 20 rules", benchRulesThroughput},
	}
}

func benchCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print the results as JSON")
	redisURL := fs.String("redis-url", getenv("MAILROOM_REDIS_URL"), "run the scenarios on this Redis instead of the embedded broker (MAILROOM_REDIS_URL)")
	quick := fs.Bool("quick", false, "smaller runs (smoke test; figures not comparable with targets)")
	markdown := fs.Bool("markdown", false, "print a Markdown table")
	memoryChild := fs.Int("memory-child", 0, "internal: run the memory burst in this process")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (all chosen scenarios) to this file")
	googleChild := fs.Int("google-child", 0, "internal: be the Google emulator of a scenario, with this many threads")
	googleDir := fs.String("google-dir", "", "internal: where the Google emulator process writes its mailbox")
	googleEmail := fs.String("google-email", "", "internal: the Google emulator process's mailbox")
	// Flags may come before or after the scenario names.
	var names []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return &usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if *googleChild > 0 {
		// Google is not mailroom: Go's default GC settings.
		return runGoogleChild(ctx, *googleChild, *googleDir, *googleEmail, os.Stdin, stdout)
	}
	// Run with the garbage collector settings serve runs with.
	defaults, err := parseConfig("bench", nil, getenv, io.Discard)
	if err != nil {
		return &usageError{err}
	}
	tuneGC(defaults.GOGC, int64(defaults.MemoryLimit))
	gc := fmt.Sprintf("GOGC=%d, memory limit %s (MAILROOM_GOGC, MAILROOM_MEMORY_LIMIT)", defaults.GOGC, defaults.MemoryLimit.String())
	if *memoryChild > 0 {
		return runMemoryChild(ctx, *memoryChild, bufio.NewWriter(stdout))
	}
	all := benchScenarios()
	var chosen []benchScenario
	if len(names) == 0 {
		chosen = all
	}
	for _, name := range names {
		found := false
		for _, s := range all {
			if s.Name == name {
				chosen, found = append(chosen, s), true
			}
		}
		if !found {
			names := make([]string, len(all))
			for i, s := range all {
				names[i] = s.Name
			}
			return &usageError{fmt.Errorf("bench: unknown scenario %q (have %s)", name, strings.Join(names, ", "))}
		}
	}
	opts := benchOptions{RedisURL: *redisURL, Progress: stderr, Quick: *quick, GC: gc}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	var results []benchResult
	for _, s := range chosen {
		opts.progress("== %s: %s", s.Name, s.Title)
		start := time.Now()
		r, err := s.Run(ctx, opts)
		if err != nil {
			return fmt.Errorf("bench %s: %w", s.Name, err)
		}
		r.Scenario, r.Title, r.Elapsed = s.Name, s.Title, time.Since(start).Seconds()
		opts.progress("   done in %.1fs", r.Elapsed)
		results = append(results, r)
	}
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	case *markdown:
		printBenchMarkdown(stdout, results)
	default:
		printBenchTable(stdout, results)
	}
	return nil
}

func metString(m benchMetric) string {
	switch {
	case m.Met == nil:
		return ""
	case *m.Met:
		return "met"
	default:
		return "MISSED"
	}
}

func printBenchTable(w io.Writer, results []benchResult) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tFIGURE\tVALUE\tUNIT\tTARGET\t")
	for _, r := range results {
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

func printBenchMarkdown(w io.Writer, results []benchResult) {
	fmt.Fprintln(w, "| scenario | figure | value | unit | target |")
	fmt.Fprintln(w, "| --- | --- | ---: | --- | --- |")
	for _, r := range results {
		for _, m := range r.Metrics {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s %s |\n", r.Scenario, m.Name, formatFigure(m.Value), m.Unit, m.Target, metString(m))
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
func startCPUProfile(path string) (func(), error) {
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
