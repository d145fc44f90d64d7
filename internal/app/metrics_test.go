package app_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"mailroom/internal/app/apptest"
)

// TestMetricsFirstScrape: the first scrape of a freshly built app, before
// any work, has every series of CONTRACT.md's table with a sample for each
// known label value (each task type, queue, state and outcome).
func TestMetricsFirstScrape(t *testing.T) {
	t.Parallel()
	ta := apptest.Start(t, nil)
	status, raw := ta.Do(http.MethodGet, "/metrics", nil)
	if status != http.StatusOK {
		t.Fatalf("/metrics: %d", status)
	}
	samples := map[string]float64{}
	families := map[string]bool{}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			families[strings.Fields(name)[0]] = true
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		samples[line[:i]] = v
	}

	// The contract's task types and their queues.
	types := map[string]string{
		"gmail:sync": "gmail-sync", "gmail:message-added": "gmail-message-added",
		"gmail:message-read": "gmail-message-read", "gmail:message-unread": "gmail-message-unread",
		"gmail:message-trashed": "gmail-message-trashed", "gmail:message-restored": "gmail-message-restored",
		"gmail:message-deleted": "gmail-message-deleted", "gmail:message-labeled": "gmail-message-labeled",
		"gmail:watch-renew": "gmail-maintenance", "rules:reclassify-batch": "rules-reclassify",
		"sheets:flush": "sheets-flush", "webhooks:deliver": "webhooks",
	}
	var want []string
	for typ, q := range types {
		for _, name := range []string{"mailroom_tasks_processed_total", "mailroom_tasks_failed_total", "mailroom_tasks_dead_lettered_total", "mailroom_task_duration_seconds_count", "mailroom_task_duration_seconds_sum"} {
			want = append(want, fmt.Sprintf(`%s{type=%q}`, name, typ))
		}
		want = append(want, fmt.Sprintf(`mailroom_task_duration_seconds_bucket{type=%q,le="+Inf"}`, typ))
		for _, state := range []string{"pending", "active", "scheduled", "retry"} {
			want = append(want, fmt.Sprintf(`mailroom_queue_tasks{queue=%q,state=%q}`, q, state))
		}
	}
	for _, o := range []string{"accepted", "unknown_address", "bad_request", "unauthorized", "forbidden"} {
		want = append(want, fmt.Sprintf(`mailroom_push_requests_total{outcome=%q}`, o))
	}
	for _, o := range []string{"accepted", "rate_limited", "invalid"} {
		want = append(want, fmt.Sprintf(`mailroom_rule_saves_total{outcome=%q}`, o))
	}
	for _, o := range []string{"run", "stale"} {
		want = append(want, fmt.Sprintf(`mailroom_reclassify_batches_total{outcome=%q}`, o))
	}
	for _, api := range []string{"gmail", "sheets"} {
		want = append(want, fmt.Sprintf(`mailroom_google_rate_limited_total{api=%q}`, api))
	}
	// The contract's events section.
	for _, typ := range []string{"message.added", "message.read", "message.unread", "message.trashed", "message.restored",
		"message.deleted", "message.labeled", "account.status", "reclassify.done", "form.rows_written", "form.state",
		"form.created", "form.deleted", "deadletter.added", "deadletter.redriven", "deadletter.discarded"} {
		want = append(want, fmt.Sprintf(`mailroom_events_total{type=%q}`, typ))
	}
	for _, o := range []string{"delivered", "retried", "deadlettered"} {
		want = append(want, fmt.Sprintf(`mailroom_webhook_deliveries_total{outcome=%q}`, o))
	}
	want = append(want,
		"mailroom_webhook_delivery_latency_seconds_count",
		"mailroom_webhook_oldest_undelivered_seconds",
		"mailroom_reclassify_publishes_total",
		"mailroom_sheets_rows_buffered",
		"mailroom_sheets_rows_written_total",
		"mailroom_sheets_write_calls_total",
		"mailroom_sheets_quota_waits_total",
		"mailroom_gmail_quota_units_total",
	)
	// Every series the README and docs/ name is there too (more than the
	// contract's).
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	for _, file := range append([]string{"../../README.md"}, docs...) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`mailroom_[a-z0-9_]+`).FindAllString(string(text), -1) {
			if !families[strings.TrimSuffix(name, "_bucket")] {
				t.Errorf("first scrape lacks %s, which %s names", name, filepath.Base(file))
			}
		}
	}
	for _, w := range want {
		v, ok := samples[w]
		switch {
		case !ok:
			t.Errorf("first scrape lacks %s", w)
		case v != 0:
			t.Errorf("first scrape: %s = %v, want 0 before any work", w, v)
		}
	}
}
