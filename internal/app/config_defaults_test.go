package app

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"mailroom/queue"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/queue/rules"
	"mailroom/queue/sheets"
	"mailroom/queue/webhooks"
)

// packageDefaults pairs each setting whose package has a default with
// that package's exported default: the flag's default must be it.
func packageDefaults(c *Config) []struct {
	flag      string
	got, want any
} {
	return []struct {
		flag      string
		got, want any
	}{
		{"reclassify-debounce", c.ReclassifyDebounce, rules.DefaultDebounce},
		{"reclassify-max-wait", c.ReclassifyMaxWait, rules.DefaultMaxWait},
		{"reclassify-tick", c.ReclassifyTick, rules.DefaultTick},
		{"reclassify-batch", c.ReclassifyBatch, rules.DefaultBatchSize},
		{"reclassify-write-delay", c.ReclassifyWriteDelay, rules.DefaultWriteDelay},
		{"rule-save-limit", c.RuleSaveLimit, rules.DefaultSaveLimit},
		{"rule-save-window", c.RuleSaveWindow, rules.DefaultSaveWindow},
		{"sheets-flush-delay", c.SheetsFlushDelay, sheets.DefaultFlushDelay},
		{"sheets-flush-threshold", c.SheetsFlushThreshold, sheets.DefaultThreshold},
		{"sheets-writes-per-minute", c.SheetsWritesPerMinute, sheets.DefaultWritesPerMinute},
		{"sheets-reads-per-minute", c.SheetsReadsPerMinute, sheets.DefaultReadsPerMinute},
		{"sheets-project-writes-per-minute", c.SheetsProjectWritesPerMinute, sheets.DefaultProjectWritesPerMinute},
		{"sheets-project-reads-per-minute", c.SheetsProjectReadsPerMinute, sheets.DefaultProjectReadsPerMinute},
		{"sheets-recheck-max", c.SheetsRecheckMax, sheets.DefaultRecheckMax},
		{"sheets-max-waiting", c.SheetsMaxWaiting, sheets.DefaultMaxWaiting},
		{"sheets-quota-window", c.SheetsQuotaWindow, sheets.DefaultQuotaWindow},
		{"submissions-per-form", c.SubmissionsPerForm, sheets.DefaultSubmitsPerForm},
		{"submissions-per-user", c.SubmissionsPerUser, sheets.DefaultSubmitsPerUser},
		{"submissions-window", c.SubmissionsWindow, sheets.DefaultSubmitWindow},
		{"webhook-max-age", c.WebhookMaxAge, webhooks.DefaultMaxAge},
		{"retry-initial", c.RetryInitial, queue.DefaultRetryInitial},
		{"retry-multiplier", c.RetryMultiplier, float64(queue.DefaultRetryMultiplier)},
		{"retry-max", c.RetryMax, queue.DefaultRetryMax},
		{"relay-cap", c.RelayCap, queue.DefaultRelayCap},
		{"task-poll-interval", c.TaskPollInterval, queue.DefaultPollInterval},
		{"delayed-check-interval", c.DelayedCheckInterval, queue.DefaultDelayedCheckInterval},
		{"delayed-check-interval", c.DelayedCheckInterval, sheets.DefaultBrokerTick},
		{"task-server-linger", c.TaskServerLinger, queue.DefaultServerLinger},
		{"shutdown-timeout", c.ShutdownTimeout, queue.DefaultShutdownTimeout},
		{"gmail-poll-interval", c.GmailPollInterval, gmail.DefaultPollInterval},
		{"gmail-fast-poll-interval", c.GmailFastPollInterval, gmail.DefaultFastPollInterval},
		{"gmail-watch-renew", c.GmailWatchRenew, gmail.DefaultWatchRenew},
		{"gmail-project-units-per-minute", c.GmailProjectUnits, google.DefaultProjectUnitsPerMinute},
		{"gmail-quota-window", c.GmailQuotaWindow, google.DefaultWindow},
	}
}

// appDefaults are the numeric settings no package has a default for: the
// flag table is their one source.
var appDefaults = map[string]string{
	"events-retention":            "the app's pruner and the admin page read it",
	"sheets-retention":            "sheets.Config.Retention's zero keeps submissions for ever",
	"submissions-user-bytes":      "0 asks the app to size it from the disk",
	"gmail-user-units-per-minute": "0 takes the price list's (google.Prices.UserUnitsPerMinute); TestZeroBudgetConfigTakesTheExportedDefaults checks the budget does the same",
	"max-retries":                 "the pipelines' Tasks(…) take it as given (zero: no retries)",
	"concurrency-message-added":   "gmail.TaskConfig takes it as given",
	"concurrency-state":           "gmail.TaskConfig takes it as given",
	"demo-scale":                  "the demo's own",
	"gogc":                        "TuneGC's own",
	"memory-limit":                "TuneGC's own",
}

// TestFlagDefaultsArePackageDefaults: a flag's default is its package's
// exported default, so serve and a package built with a zero Config agree.
func TestFlagDefaultsArePackageDefaults(t *testing.T) {
	t.Parallel()
	for _, p := range packageDefaults(Defaults()) {
		if p.got != p.want {
			t.Errorf("--%s defaults to %v, its package to %v", p.flag, p.got, p.want)
		}
	}
}

// TestSettingsDoNotRepeatPackageDefaults reads the flag table's source:
// a setting whose package has a default names that package's constant,
// not a number of its own (one source for each default), and every
// setting with a numeric default is either one of those or listed in
// appDefaults with why the app alone has it.
func TestSettingsDoNotRepeatPackageDefaults(t *testing.T) {
	t.Parallel()
	owned := map[string]bool{}
	for _, p := range packageDefaults(Defaults()) {
		owned[p.flag] = true
		if appDefaults[p.flag] != "" {
			t.Errorf("--%s is both a package's default and in appDefaults", p.flag)
		}
	}
	rows := settingDefaultSources(t)
	for flagName := range appDefaults {
		if _, ok := rows[flagName]; !ok {
			t.Errorf("appDefaults names --%s, which is no numeric setting", flagName)
		}
	}
	for _, flagName := range slices.Sorted(maps.Keys(rows)) {
		literal := rows[flagName]
		switch {
		case owned[flagName] && literal != "":
			t.Errorf("--%s writes its default as %s; read the package's exported default instead", flagName, literal)
		case !owned[flagName] && appDefaults[flagName] == "":
			t.Errorf("--%s has a numeric default: name its package's exported default in packageDefaults, or say in appDefaults why the app alone has one", flagName)
		}
	}
}

// settingDefaultSources parses config.go's settings() and returns, for
// each setting with a numeric default (a d, n, f or sz row), the first
// number written in its default's expression ("" when there is none).
func settingDefaultSources(t *testing.T) map[string]string {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), "config.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	ast.Inspect(file, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "settings" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			row, ok := n.(*ast.CompositeLit)
			if !ok || len(row.Elts) != 6 {
				return true
			}
			name, ok := row.Elts[0].(*ast.BasicLit)
			call, isCall := row.Elts[3].(*ast.CallExpr)
			if !ok || !isCall || len(call.Args) != 2 {
				return true
			}
			if kind, ok := call.Fun.(*ast.Ident); !ok || !strings.Contains(" d n f sz ", " "+kind.Name+" ") {
				return true
			}
			flagName, _ := strconv.Unquote(name.Value)
			rows[flagName] = firstNumber(call.Args[1])
			return false
		})
		return false
	})
	if len(rows) < 20 {
		t.Fatalf("found %d numeric settings in config.go's settings(); the parse no longer matches its rows", len(rows))
	}
	return rows
}

// firstNumber is the first integer or float literal in e, or "".
func firstNumber(e ast.Expr) string {
	var lit string
	ast.Inspect(e, func(n ast.Node) bool {
		if b, ok := n.(*ast.BasicLit); ok && lit == "" && (b.Kind == token.INT || b.Kind == token.FLOAT) {
			lit = b.Value
		}
		return lit == ""
	})
	return lit
}

// TestOperatorSettingsServeOperators: a setting whose help gives tests,
// benchmarks or a comparison as its reason is no operator's, so it is
// hidden (marked internal in -h and left out of the README's table).
func TestOperatorSettingsServeOperators(t *testing.T) {
	t.Parallel()
	for _, s := range new(Config).settings() {
		if s.hidden {
			continue
		}
		for _, word := range []string{"for comparison", "benchmark", "tests "} {
			if strings.Contains(s.usage, word) {
				t.Errorf("--%s is an operator's setting whose help says %q: hide it or give an operator's reason", s.flag, word)
			}
		}
	}
}
