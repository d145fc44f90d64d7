package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/sheets"
	"mailroom/store"
)

// benchStorage measures what the data file costs (the sizing in docs/benchmarks.md):
// bytes of bbolt pages in use per mirrored message, as the live pipeline
// stores new mail, and per stored submission once written to its sheet.
// Pages in use are a consistent copy's size (bbolt's high-water mark)
// less the free pages, measured with nothing running, before and after.
func benchStorage(ctx context.Context, o Options) (Result, error) {
	var r Result
	messages, submissions := 5000, 10000
	if o.Quick {
		messages, submissions = 500, 1000
	}
	perMessage, perEvent, err := storageMessages(ctx, messages)
	if err != nil {
		return r, fmt.Errorf("messages: %w", err)
	}
	perSubmission, err := storageSubmissions(ctx, submissions)
	if err != nil {
		return r, fmt.Errorf("submissions: %w", err)
	}
	r.add("bbolt bytes per mirrored message (pages in use, its message.added event included)", perMessage, "bytes")
	r.add("bbolt bytes per event (its key and value in the event log, and its user index entry)", perEvent, "bytes")
	r.add("bbolt bytes per stored submission (pages in use, written to its sheet)", perSubmission, "bytes")
	r.Notes = append(r.Notes,
		fmt.Sprintf("messages: %d generated messages (googlefake's generator: people, newsletters, threads; headers and a snippet, no body: the mirror keeps none) arriving on a synced 200-message mailbox, one push, every event applied; %s", messages, gmailBenchOverrides),
		fmt.Sprintf("submissions: %d submissions of 3 answers through the API, spread over %d forms of one user (each within the burst serve's defaults admit to one form, 5,000), all written to their sheets (buffers emptied); %s, and MAILROOM_SHEETS_FLUSH_DELAY=1s", submissions, storageForms(submissions), sheetsBenchOverrides),
		"pages in use: the size of a consistent copy (bbolt's high-water mark) less the free pages, before and after, divided by the count; the file itself grows in steps (powers of two, then 1 GiB) ahead of that, and `mailroom compact` packs it")
	return r, nil
}

// storageForms is how many forms n submissions are spread over so that
// none takes more than the burst serve's defaults admit to one form.
func storageForms(n int) int {
	return (n + sheets.DefaultSubmitsPerForm - 1) / sheets.DefaultSubmitsPerForm
}

// pagesInUse is the bytes of the store's pages that hold data.
func pagesInUse(db *store.DB) (int64, error) {
	n, err := db.Backup(io.Discard)
	if err != nil {
		return 0, err
	}
	return n - db.FileStats().Free, nil
}

func storageMessages(ctx context.Context, n int) (perMessage, perEvent float64, err error) {
	g, err := newGmailBench(ctx, gmailBenchOptions{messages: 200, unread: 50})
	if err != nil {
		return 0, 0, err
	}
	defer g.close()
	if err := g.waitIdle(ctx, time.Minute); err != nil {
		return 0, 0, err
	}
	before, err := pagesInUse(g.db)
	if err != nil {
		return 0, 0, err
	}
	if _, err := googlefake.NewGenerator(11, time.Time{}).Add(g.fake.Gmail, benchMailbox, n); err != nil {
		return 0, 0, err
	}
	if err := g.push(ctx); err != nil {
		return 0, 0, err
	}
	if err := g.waitIdle(ctx, 5*time.Minute); err != nil {
		return 0, 0, err
	}
	var counts store.MessageCounts
	if err := g.db.View(func(tx *store.Tx) (err error) { counts, err = tx.MessageCounts(g.account); return err }); err != nil {
		return 0, 0, err
	}
	if counts.Total != 200+n {
		return 0, 0, fmt.Errorf("%d messages mirrored, want %d", counts.Total, 200+n)
	}
	after, err := pagesInUse(g.db)
	if err != nil {
		return 0, 0, err
	}
	var events int
	var bytes int64
	if err := g.db.View(func(tx *store.Tx) error { events, bytes = tx.EventsSize(); return nil }); err != nil || events == 0 {
		return 0, 0, fmt.Errorf("no events measured (%d): %v", events, err)
	}
	// Each event's user index entry: a user id (16 characters), a separator and 8 bytes.
	return float64(after-before) / float64(n), float64(bytes)/float64(events) + float64(len(store.NewID())+9), nil
}

func storageSubmissions(ctx context.Context, n int) (float64, error) {
	fake := googlefake.New(googlefake.Options{})
	if _, err := fake.Start(); err != nil {
		return 0, err
	}
	defer fake.Close()
	a, api, _, stop, err := startSheetsBenchApp(ctx, fake.URL(), func(c *setup) { c.SheetsFlushDelay = time.Second })
	if err != nil {
		return 0, err
	}
	defer stop()
	forms, err := sheetsBenchForms(ctx, api, fake, "storage@example.com", storageForms(n), nil)
	if err != nil {
		return 0, err
	}
	before, err := pagesInUse(a.DB())
	if err != nil {
		return 0, err
	}
	if _, err := sheetsSubmitMany(ctx, api, forms, n, 16); err != nil {
		return 0, err
	}
	err = waitFor(ctx, 5*time.Minute, "every row written", func() (bool, error) {
		written := 0
		for _, id := range forms {
			var f struct {
				Buffered    int `json:"buffered"`
				RowsWritten int `json:"rowsWritten"`
			}
			if err := api.do(ctx, http.MethodGet, "/api/v1/forms/"+id, nil, http.StatusOK, &f); err != nil || f.Buffered > 0 {
				return false, err
			}
			written += f.RowsWritten
		}
		return written == n, nil
	})
	if err != nil {
		return 0, err
	}
	after, err := pagesInUse(a.DB())
	if err != nil {
		return 0, err
	}
	return float64(after-before) / float64(n), nil
}
