package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// A failed scenario does not lose the others' figures: Run goes on, the
// Markdown names the failure in its own row, and every row carries the
// commit and time of its scenario's run.
func TestRunKeepsFiguresPastAFailedScenario(t *testing.T) {
	chosen := []Scenario{
		{Name: "broken", Run: func(context.Context, Options) (Result, error) {
			return Result{}, errors.New("the emulator went away")
		}},
		{Name: "fine", Run: func(context.Context, Options) (Result, error) {
			var r Result
			r.addTarget("things a second", 12, "things/s", 10, true)
			return r, nil
		}},
	}
	results, err := Run(context.Background(), chosen, Options{Commit: "abc1234"})
	if err == nil || !strings.Contains(err.Error(), "bench broken: the emulator went away") {
		t.Fatalf("Run's error = %v, want the broken scenario named", err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d results, want both scenarios'", len(results))
	}
	var out bytes.Buffer
	PrintMarkdown(&out, results)
	md := out.String()
	day := results[1].Finished.Format("2006-01-02 15:04")
	for _, want := range []string{
		"| broken | FAILED: the emulator went away |",
		"| fine | things a second | 12 | things/s | >= 10 met | abc1234 " + day + " |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}
