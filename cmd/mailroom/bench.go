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

	"mailroom/internal/app"
	"mailroom/internal/bench"
)

// benchCommand is `mailroom bench`: its flags, then the scenarios of
// internal/bench.
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
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: mailroom bench [flags] [scenario ...] (all scenarios when none is named)\n\nScenarios:\n")
		for _, s := range bench.Scenarios() {
			fmt.Fprintf(fs.Output(), "  %-18s %s\n", s.Name, s.Title)
		}
		fmt.Fprintf(fs.Output(), "\nRun only when named:\n")
		for _, s := range bench.OptionalScenarios() {
			fmt.Fprintf(fs.Output(), "  %-18s %s\n", s.Name, s.Title)
		}
		fmt.Fprintf(fs.Output(), "\nFlags:\n")
		fs.PrintDefaults()
	}
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
		return bench.RunGoogleChild(ctx, *googleChild, *googleDir, *googleEmail, os.Stdin, stdout)
	}
	// Run with the garbage collector settings serve runs with.
	defaults, err := app.ParseConfig("bench", nil, getenv, io.Discard)
	if err != nil {
		return &usageError{err}
	}
	app.TuneGC(defaults.GOGC, int64(defaults.MemoryLimit))
	gc := fmt.Sprintf("GOGC=%d, memory limit %s (MAILROOM_GOGC, MAILROOM_MEMORY_LIMIT)", defaults.GOGC, defaults.MemoryLimit.String())
	if *memoryChild > 0 {
		return bench.RunMemoryChild(ctx, *memoryChild, bufio.NewWriter(stdout))
	}
	chosen, err := bench.Choose(names)
	if err != nil {
		return &usageError{err}
	}
	opts := bench.Options{RedisURL: *redisURL, Progress: stderr, Quick: *quick, GC: gc, Commit: commit}
	if *cpuProfile != "" {
		stop, err := bench.StartCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	// A failed scenario is printed as such beside the others' figures, and
	// the exit status still says the run failed.
	results, runErr := bench.Run(ctx, chosen, opts)
	switch {
	case *asJSON:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	case *markdown:
		bench.PrintMarkdown(stdout, results)
	default:
		bench.PrintTable(stdout, results)
	}
	return runErr
}
