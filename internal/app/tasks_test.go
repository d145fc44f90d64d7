package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/queue"
)

// contractTasks is the contract's table of task types (type, queue),
// in its order.
var contractTasks = [][2]string{
	{"gmail:sync", "gmail-sync"},
	{"gmail:message-added", "gmail-message-added"},
	{"gmail:message-read", "gmail-message-read"},
	{"gmail:message-unread", "gmail-message-unread"},
	{"gmail:message-trashed", "gmail-message-trashed"},
	{"gmail:message-restored", "gmail-message-restored"},
	{"gmail:message-deleted", "gmail-message-deleted"},
	{"gmail:message-labeled", "gmail-message-labeled"},
	{"gmail:watch-renew", "gmail-maintenance"},
	{"rules:reclassify-batch", "rules-reclassify"},
	{"sheets:flush", "sheets-flush"},
	{"webhooks:deliver", "webhooks"},
}

// extraTasks are the types serve has beyond the contract's table (which
// allows extra types).
var extraTasks = [][2]string{
	{"gmail:full-sync", "gmail-full-sync"},
	{"rules:label-write", "rules-label-write"},
}

// TestTaskTableIsTheContracts lists the table serve assembles from the
// pipelines' rows: the contract's types on the contract's queues, and the
// two extra ones, nothing else.
func TestTaskTableIsTheContracts(t *testing.T) {
	table, err := taskTable(Defaults(), Deps{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, row := range table.Types() {
		got[row.Name] = row.Queue
		if row.Handler != nil {
			t.Errorf("%s has a handler before the pipelines register", row.Name)
		}
	}
	want := map[string]string{}
	for _, r := range append(append([][2]string(nil), contractTasks...), extraTasks...) {
		want[r[0]] = r[1]
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("task table, type to queue (-want +got):\n%s", diff)
	}
	var listed []string
	for _, q := range table.Queues() {
		listed = append(listed, q.Name+"="+strings.Join(q.Types, ","))
	}
	t.Logf("task table: %s", strings.Join(listed, " "))
}

// TestTaskTableTakesTheSettingsAndTheCallersRows: the workers and retries
// come from the flags, the debug type comes with --debug-tasks, and a
// caller's own rows (a benchmark's) join the table through Deps.
func TestTaskTableTakesTheSettingsAndTheCallersRows(t *testing.T) {
	cfg := Defaults()
	cfg.MaxRetries, cfg.ConcurrencyMessageAdded, cfg.ConcurrencyState, cfg.DebugTasks = 7, 9, 2, true
	own := queue.TaskType{Name: "bench:nop", Queue: "bench", Concurrency: 10, Timeout: time.Minute,
		Handler: func(context.Context, *queue.Task) error { return nil }}
	table, err := taskTable(cfg, Deps{Tasks: []queue.TaskType{own}})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]int{
		"gmail:message-added": {9, 7}, "gmail:message-read": {2, 7}, "sheets:flush": {16, 7},
		TypeDebugRecord: {10, 7}, "bench:nop": {10, 0},
	} {
		row, ok := table.Lookup(name)
		if !ok || row.Concurrency != want[0] || row.MaxRetries != want[1] {
			t.Errorf("%s: %+v (found %v), want %d workers and %d retries", name, row, ok, want[0], want[1])
		}
	}
	// A caller's row cannot shadow a pipeline's.
	own.Name = "gmail:sync"
	if _, err := taskTable(cfg, Deps{Tasks: []queue.TaskType{own}}); err == nil {
		t.Error("a caller's row named as a pipeline's was accepted")
	}
}
