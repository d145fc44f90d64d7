package sheets

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"mailroom/internal/testkit"
	"mailroom/store"
)

// Pruning deletes the submissions whose rows are in the sheet once they are
// older than the retention, and never one that still waits; the pruner loop
// does it on its own.
func TestPruneWrittenSubmissions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: Config{FlushDelay: time.Hour, Threshold: 10, Retention: 50 * time.Millisecond}})
	a := e.account("ann@example.com")
	f := e.form(a, "name")
	var subs []store.Submission
	for i := range 25 {
		subs = append(subs, e.submit(f.ID, map[string]string{"name": fmt.Sprint("n", i)}))
	}
	// Two writes of ten at the threshold; five wait for the (hour-long) delay.
	testkit.Eventually(t, 10*time.Second, "20 rows written", func() bool { return e.formView(f.ID).RowsWritten == 20 })
	time.Sleep(60 * time.Millisecond) // past the retention
	n, err := e.p.Prune(context.Background())
	if err != nil || n != 20 {
		t.Fatalf("Prune = %d, %v; want the 20 written", n, err)
	}
	for i, s := range subs {
		err := e.db.View(func(tx *store.Tx) error { _, err := tx.SubmissionGet(s.ID); return err })
		switch {
		case i < 20 && !errors.Is(err, store.ErrNotFound):
			t.Errorf("written submission %d is still stored (%v)", i, err)
		case i >= 20 && err != nil:
			t.Errorf("waiting submission %d was pruned: %v", i, err)
		}
	}
	if v := e.formView(f.ID); v.Buffered != 5 || v.RowsWritten != 20 {
		t.Errorf("after pruning: buffered %d, written %d; want 5, 20", v.Buffered, v.RowsWritten)
	}
	if got := e.metric("mailroom_sheets_submissions_pruned_total"); got != 20 {
		t.Errorf("pruned metric %v, want 20", got)
	}

	// Five more fill the buffer to ten: written, then pruned by the loop.
	for i := range 5 {
		e.submit(f.ID, map[string]string{"name": fmt.Sprint("m", i)})
	}
	loop := e.p.Services()[0] // the pruner
	if err := loop.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = loop.Stop(context.Background()) })
	testkit.Eventually(t, 10*time.Second, "the loop to prune the next ten", func() bool {
		return e.metric("mailroom_sheets_submissions_pruned_total") == 30
	})
	if e.formView(f.ID).RowsWritten != 30 {
		t.Errorf("rows written %d, want 30", e.formView(f.ID).RowsWritten)
	}
}

func TestPrunerOffWithoutRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	if len(e.p.Services()) != 0 {
		t.Fatal("a pruner with no retention: want none (keep for ever)")
	}
}
