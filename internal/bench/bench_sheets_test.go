package bench

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/app"
)

// TestBenchSheetsQuick runs the Sheets benchmark scenarios in their quick
// form, so that they never rot; figures are logged, not judged, except the
// broker's bytes per waiting row, which must be none at any size.
func TestBenchSheetsQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark scenarios")
	}
	for _, s := range Scenarios() {
		switch s.Name {
		case "sheets-story", "sheets-memory", "sheets-throughput":
		default:
			continue
		}
		r, err := s.Run(context.Background(), Options{Quick: true})
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		for _, m := range r.Metrics {
			t.Logf("%s: %s = %.2f %s %s", s.Name, m.Name, m.Value, m.Unit, m.Target)
			if m.Name == "broker bytes per waiting row" && m.Value > 0 {
				t.Errorf("the broker holds %.1f bytes per waiting row, want none", m.Value)
			}
		}
	}
}

// TestSettingsDiff: a bench note's settings are exactly those that differ
// from what serve parses with no flag and no environment, secrets and
// paths without their values.
func TestSettingsDiff(t *testing.T) {
	cfg, err := app.ParseConfig("bench", nil, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if diff := settingsDiff(&setup{Config: cfg}); len(diff) != 0 {
		t.Fatalf("serve's own defaults differ from app.Defaults: %v", diff)
	}
	cfg.DataDir, cfg.APIToken, cfg.GoogleAPIURL = "/tmp/x", "secret-token", "http://127.0.0.1:1/"
	cfg.SheetsFlushDelay, cfg.SheetsFlushThreshold = time.Second, 500
	s := &setup{Config: cfg}
	s.deps.GmailQuotaOff = true
	want := []string{"DataDir=(a fresh temporary folder)", "APIToken=(set)", "GoogleAPIURL=(the emulator)", "SheetsFlushDelay=1s", "Deps.GmailQuotaOff set"}
	if diff := cmp.Diff(want, settingsDiff(s)); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
	if note := settingsNote("the app", settingsDiff(s)); strings.Contains(note, "secret-token") {
		t.Errorf("the note shows a secret: %s", note)
	}
}
