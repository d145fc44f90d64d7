package app_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/store"
)

// TestMoveUser moves a user with two synced accounts, a rule, a form with
// rows waiting and a webhook to a fresh mailroom: the target resumes from
// the watermarks (no messages.list of a full sync), takes new mail, writes
// every waiting row once; the source, started again, writes none of them
// and refuses the form's submissions.
func TestMoveUser(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))
	srcDir, dstDir := t.TempDir(), t.TempDir()
	cfgFor := func(dir string, flushDelay time.Duration) func(*app.Config) {
		return withGoogle(fake, func(c *app.Config) {
			c.DataDir, c.SecretKey, c.SheetsFlushDelay, c.WebhookAllowPrivate = dir, key, flushDelay, true
		})
	}
	src := apptest.Start(t, cfgFor(srcDir, time.Hour)) // rows wait
	boxes := []string{"one@example.com", "two@example.com"}
	userID := createUser(src, "mover@example.com")
	var accIDs []string
	for i, box := range boxes {
		fake.AddAccount(box)
		if _, err := fake.Gmail.Generate(box, 40, uint64(7+i)); err != nil {
			t.Fatal(err)
		}
		accIDs = append(accIDs, connectAccount(src, fake, userID, box).ID)
	}
	for i, box := range boxes {
		waitMirror(src, fake, accIDs[i], box, 20*time.Second)
	}
	// The webhook takes the events made from its creation on.
	made := len(feed(src, "&userId="+userID))
	hooks := newHookReceiver(t)
	var hook struct{ ID, Secret string }
	src.JSON(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": hooks.srv.URL + "/hook", "userId": userID}, http.StatusCreated, &hook)
	hooks.mu.Lock()
	hooks.secret = hook.Secret
	hooks.mu.Unlock()
	src.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", map[string]any{
		"label": "Moved", "match": "all", "conditions": []map[string]any{{"field": "subject", "op": "contains", "value": "zzz-none"}},
	}, http.StatusCreated, nil)
	book, err := fake.Sheets.CreateSpreadsheet(boxes[0], "Survey", "Responses")
	if err != nil {
		t.Fatal(err)
	}
	var form sheetsForm
	src.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accIDs[0], "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name"},
	}, http.StatusCreated, &form)
	for _, n := range []string{"a", "b", "c"} {
		src.JSON(http.MethodPost, "/api/v1/forms/"+form.ID+"/submissions", map[string]any{"answers": map[string]any{"name": n}}, http.StatusAccepted, nil)
	}
	// Every event of the user's the source made reaches the webhook before
	// the source stops (the export refuses while one is undelivered).
	before := feed(src, "&userId="+userID)[made:]
	if len(before) == 0 {
		t.Fatal("the source made no event for the user after the webhook; want form.created at least")
	}
	testkit.EventuallyNil(t, 10*time.Second, "the source's events delivered", func() error {
		return sameEvents(hooks.ids(), eventIDs(before))
	})
	if err := src.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}

	// Export from the stopped source, import into a fresh data dir.
	file := filepath.Join(t.TempDir(), "mover.json.gz")
	db, err := app.MoveStore(srcDir, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.ExportUser(db, userID, file, false); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db, err = app.MoveStore(dstDir, key)
	if err != nil {
		t.Fatal(err)
	}
	m, err := app.ReadMoveFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.ImportUser(db, m); err != nil {
		t.Fatal(err)
	}
	db.Close()

	lists, watches := fake.Calls(googlefake.MethodMessagesList), fake.Calls(googlefake.MethodWatch)
	dst := apptest.Start(t, cfgFor(dstDir, 200*time.Millisecond))
	testkit.Eventually(t, 15*time.Second, "the 3 waiting rows written on the target", func() bool {
		return getForm(dst, form.ID).RowsWritten == 3
	})
	for i, box := range boxes {
		waitMirror(dst, fake, accIDs[i], box, 15*time.Second)
	}
	// New mail after the move reaches the target.
	if _, err := googlefake.NewGenerator(99, time.Time{}).Add(fake.Gmail, boxes[1], 3); err != nil {
		t.Fatal(err)
	}
	if st := push(dst, fake, boxes[1], fake.Gmail.HistoryID(boxes[1])); st != http.StatusNoContent {
		t.Fatalf("push to the target: %d", st)
	}
	waitMirror(dst, fake, accIDs[1], boxes[1], 15*time.Second)
	// The webhook goes on with the target's events from the import on:
	// after the source's, each of the target's once, none of the source's
	// again (docs/operations.md, "what a webhook receiver sees").
	after := feed(dst, "&userId="+userID)
	if len(after) < 4 {
		t.Fatalf("the target made %d events for the user; want the 3 rows' and the new mail's", len(after))
	}
	testkit.EventuallyNil(t, 10*time.Second, "the source's events then the target's, each once", func() error {
		return sameEvents(hooks.ids(), append(eventIDs(before), eventIDs(after)...))
	})
	// Ids keep increasing across the move: the target numbers its events
	// above the source's newest, so a receiver that keeps the highest id
	// seen drops none of the target's.
	if ids := hooks.ids(); !slices.IsSorted(ids) {
		t.Errorf("event ids a receiver took across the move are not increasing: %v", ids)
	}
	if got := fake.Calls(googlefake.MethodMessagesList); got != lists {
		t.Errorf("messages.list calls went from %d to %d: the target ran a full sync", lists, got)
	}
	if got := fake.Calls(googlefake.MethodWatch); got < watches+2 {
		t.Errorf("users.watch calls went from %d to %d: the target did not renew both watches", watches, got)
	}

	// The source, started again, writes none of the rows and refuses the form.
	again := apptest.Start(t, cfgFor(srcDir, 50*time.Millisecond))
	status, raw := again.Do(http.MethodPost, "/api/v1/forms/"+form.ID+"/submissions", map[string]any{"answers": map[string]any{"name": "late"}})
	if status != http.StatusConflict || !contains(raw, "user_moved") {
		t.Errorf("submission to the source after the move: %d %s", status, raw)
	}
	if a := account(again, accIDs[0]); a.Status != "disconnected" || a.StatusReason != store.MovedReason {
		t.Errorf("source account after the move: %+v", a)
	}
	time.Sleep(300 * time.Millisecond) // a flush of the source would be due by now
	if err := sameEvents(hooks.ids(), append(eventIDs(before), eventIDs(after)...)); err != nil {
		t.Errorf("the source started again delivered to the moved webhook: %v", err)
	}
	cells, err := fake.Sheets.Cells(book, "Responses")
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 3 || cells[0][1].Value != "a" || cells[2][1].Value != "c" {
		t.Errorf("sheet after the move: %+v, want rows a, b, c once", cells)
	}
	if err := dst.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A second import of the same file is refused.
	db, err = app.MoveStore(dstDir, key)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := app.ImportUser(db, m); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second import: %v, want a conflict", err)
	}
}

func contains(b []byte, s string) bool { return strings.Contains(string(b), s) }

// sameEvents says how the event ids a receiver took differ from want, in
// order: none missing, none twice, none else.
func sameEvents(got, want []string) error {
	if diff := cmp.Diff(want, got); diff != "" {
		return fmt.Errorf("delivered event ids (-want +got):\n%s", diff)
	}
	return nil
}
