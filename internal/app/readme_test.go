package app

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"mailroom/queue/google"
)

// The configuration table (docs/configuration.md, linked from the README)
// must name every setting the binary reads, each in a row with its flag.
func TestREADMEListsEverySetting(t *testing.T) {
	raw, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	for _, s := range new(Config).settings() {
		if s.hidden {
			continue
		}
		if !strings.Contains(doc, "| `"+s.env+"` | `--"+s.flag+"` |") {
			t.Errorf("docs/configuration.md has no row for %s (--%s)", s.env, s.flag)
		}
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	cases := []struct {
		env, value, want string
	}{
		{"MAILROOM_RECLASSIFY_DEBOUNCE", "soon", "MAILROOM_RECLASSIFY_DEBOUNCE"},
		{"MAILROOM_RECLASSIFY_DEBOUNCE", "-1s", "--reclassify-debounce"},
		{"MAILROOM_SHEETS_FLUSH_THRESHOLD", "0", "--sheets-flush-threshold"},
		{"MAILROOM_REDIS_URL", "http://x", "--redis-url"},
		{"MAILROOM_SECRET_KEY", "c2hvcnQ=", "--secret-key"},
		{"MAILROOM_PUBSUB_TOPIC", "topic", "--pubsub-topic"},
		{"MAILROOM_HTTP_ADDR", "8080", "--http-addr"},
		{"MAILROOM_MAX_RETRIES", "x", "MAILROOM_MAX_RETRIES"},
		{"MAILROOM_BROKER_ADDR", "0.0.0.0:6379", "--broker-addr"},
		{"MAILROOM_RETRY_MULTIPLIER", "0.5", "--retry-multiplier"},
		{"MAILROOM_LOG_LEVEL", "loud", "--log-level"},
		{"MAILROOM_TRUSTED_PROXIES", "10.0.0.1,proxy.local", "--trusted-proxies"},
		{"MAILROOM_TASK_SERVER_LINGER", "0s", "--task-server-linger"},
		{"MAILROOM_TASK_SERVERS_ALWAYS_ON", "sometimes", "MAILROOM_TASK_SERVERS_ALWAYS_ON"},
		{"MAILROOM_SUBMISSIONS_PER_FORM", "0", "--submissions-per-form"},
		{"MAILROOM_SUBMISSIONS_PER_USER", "-5", "--submissions-per-user"},
		{"MAILROOM_SUBMISSIONS_WINDOW", "0s", "--submissions-window"},
		{"MAILROOM_SUBMISSIONS_USER_BYTES", "lots", "MAILROOM_SUBMISSIONS_USER_BYTES"},
		{"MAILROOM_SHEETS_MAX_WAITING", "0", "--sheets-max-waiting"},
		{"MAILROOM_API_TOKEN", strings.Repeat(" ", 40), "--api-token"},
		{"MAILROOM_API_TOKEN", "0123456789abcdef 0123456789abcdef", "--api-token"},
		{"MAILROOM_API_TOKEN", "\t" + strings.Repeat("x", 40), "--api-token"},
		{"MAILROOM_GMAIL_QUOTA_PRICES", "2024", "MAILROOM_GMAIL_QUOTA_PRICES"},
		{"MAILROOM_GMAIL_QUOTA_PRICES", "new", "--gmail-quota-prices"},
		{"MAILROOM_GMAIL_USER_UNITS_PER_MINUTE", "50", "--gmail-user-units-per-minute"},
	}
	for _, c := range cases {
		env := map[string]string{c.env: c.value}
		_, err := ParseConfig("serve", nil, func(k string) string { return env[k] }, nopWriter{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%q: error %v, want one naming %s", c.env, c.value, err, c.want)
		}
	}
	// A flag overrides its environment twin.
	cfg, err := ParseConfig("serve", []string{"--sheets-flush-delay", "3s"}, func(k string) string {
		return map[string]string{"MAILROOM_SHEETS_FLUSH_DELAY": "9s"}[k]
	}, nopWriter{})
	if err != nil || cfg.SheetsFlushDelay.String() != "3s" {
		t.Fatalf("flag over env: %v, %v", cfg, err)
	}
}

// The Gmail price list chooses the per-user limit unless it is set.
func TestGmailQuotaPricesSetting(t *testing.T) {
	for _, c := range []struct {
		env   map[string]string
		list  string
		units int
	}{
		{map[string]string{}, "2026", 6000},
		{map[string]string{"MAILROOM_GMAIL_QUOTA_PRICES": "2025"}, "2025", 15000},
		{map[string]string{"MAILROOM_GMAIL_QUOTA_PRICES": "2025", "MAILROOM_GMAIL_USER_UNITS_PER_MINUTE": "9000"}, "2025", 9000},
		{map[string]string{"MAILROOM_GMAIL_USER_UNITS_PER_MINUTE": "3000"}, "2026", 3000},
	} {
		cfg, err := ParseConfig("serve", nil, func(k string) string { return c.env[k] }, nopWriter{})
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if cfg.GmailPrices().Name != c.list || cfg.GmailUserUnitsInForce() != c.units {
			t.Errorf("%v: the %s list at %d units a minute, want %s at %d", c.env, cfg.GmailPrices().Name, cfg.GmailUserUnitsInForce(), c.list, c.units)
		}
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

// The sizing (docs/benchmarks.md, "How far one mailroom goes") quotes
// Google's price lists as mailroom charges them (queue/google's), not
// numbers of its own.
func TestREADMEQuotesThePriceLists(t *testing.T) {
	raw, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	now, old := google.MustPrices(google.Prices2026), google.MustPrices(google.Prices2025)
	for _, want := range []string{
		fmt.Sprintf("messages.get %d [%d]", now.MessagesGet, old.MessagesGet),
		fmt.Sprintf("(%d [%d] with\nthe body", now.MessagesGetBody, old.MessagesGetBody),
		fmt.Sprintf("threads.get %d [%d]", now.ThreadsGet, old.ThreadsGet),
		fmt.Sprintf("%s units a minute per user", thousandsOf(now.UserUnitsPerMinute)),
		fmt.Sprintf("%s a minute per user and the earlier table", thousandsOf(old.UserUnitsPerMinute)),
		fmt.Sprintf("| a new message, alone in its push | a history.list page, messages.get | %d |", now.HistoryList+now.MessagesGet),
		fmt.Sprintf("At the 2025 list a new message costs %d units", old.HistoryList+old.MessagesGet),
	} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("docs/benchmarks.md does not say %q", want)
		}
	}
}

func thousandsOf(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
