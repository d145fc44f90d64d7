package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

// TestSheetsQuotaAcrossRestart: the Sheets read and write logs live in the
// broker, which the embedded store forgets at a restart, while Google still
// counts the calls of the last minute. The next run resumes as if the last
// window were fully spent (issue 14): right after the restart a form
// creation (two reads) answers 429 with Retry-After, and a row submitted
// then is not written before one window after the first run stopped; then
// both go through. Google (the emulator, with the same limits) refuses
// nothing, so no window at Google ever held more than the limits.
func TestSheetsQuotaAcrossRestart(t *testing.T) {
	t.Parallel()
	const (
		window       = 6 * time.Second
		writes, read = 3, 6 // per window: 3 forms spend them all (one write, two reads each)
		email        = "restart@example.com"
	)
	fake := googlefake.StartForTest(t, googlefake.Options{SheetsWriteLimit: writes, SheetsReadLimit: read, SheetsWindow: window})
	dir := t.TempDir()
	cfg := withGoogle(fake, func(cfg *app.Config) {
		cfg.DataDir = dir
		cfg.PubSubTopic = ""
		cfg.SheetsFlushDelay = 200 * time.Millisecond
		cfg.SheetsQuotaWindow = window
		cfg.SheetsWritesPerMinute, cfg.SheetsReadsPerMinute = writes, read
	})
	newForm := func(ta *apptest.App, userID, accountID string, i int) (int, []byte, sheetsForm) {
		book, err := fake.Sheets.CreateSpreadsheet(email, fmt.Sprint("Survey ", i))
		if err != nil {
			t.Fatal(err)
		}
		body := map[string]any{"userId": userID, "accountId": accountID, "spreadsheetId": book, "columns": []string{"name"}}
		var f sheetsForm
		status, raw := ta.Do(http.MethodPost, "/api/v1/forms", body)
		if status == http.StatusCreated {
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
		}
		return status, raw, f
	}
	submit := func(ta *apptest.App, formID, name string) {
		ta.JSON(http.MethodPost, "/api/v1/forms/"+formID+"/submissions", map[string]any{"answers": map[string]string{"name": name}}, http.StatusAccepted, nil)
	}

	ta := apptest.Start(t, cfg)
	userID := createUser(ta, email)
	accountID := connectAccount(ta, fake, userID, email).ID
	var forms []sheetsForm
	for i := range 3 {
		status, raw, f := newForm(ta, userID, accountID, i)
		if status != http.StatusCreated {
			t.Fatalf("form %d: %d %s", i, status, raw)
		}
		forms = append(forms, f)
		submit(ta, f.ID, fmt.Sprint("first run ", i))
	}
	testkit.Eventually(t, 10*time.Second, "the first run's rows written", func() bool {
		for _, f := range forms {
			if getForm(ta, f.ID).RowsWritten != 1 {
				return false
			}
		}
		return true
	})
	if err := ta.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()

	ta = apptest.Start(t, cfg)
	submit(ta, forms[0].ID, "second run")
	status, raw, _ := newForm(ta, userID, accountID, 3)
	if status != http.StatusTooManyRequests {
		t.Fatalf("form creation right after the restart: %d %s; want 429 (the read window counts as spent)", status, raw)
	}
	// Asked at once: on a busy machine the pages below can take the window.
	retry := retryAfterOf(t, ta, userID, accountID)
	if retry < 1 || retry > int(window/time.Second)+2 {
		t.Fatalf("Retry-After %d s; want at most about one window (%s)", retry, window)
	}
	var shown struct{ Quota sheetsQuota }
	ta.JSON(http.MethodGet, "/api/v1/forms/"+forms[0].ID, nil, http.StatusOK, &shown)
	if until, err := time.Parse(time.RFC3339, shown.Quota.SpentUntil); err != nil || until.Before(stopped.Add(window-time.Second)) ||
		shown.Quota.Writes.LastMinute != writes || shown.Quota.Reads.LastMinute != read {
		t.Errorf("the form's quota right after the restart: %+v (%v); want the windows shown full until about a window after the stop", shown.Quota, err)
	}
	if page := adminGet(t, ta, "/admin/forms"); !strings.Contains(page, "data-quota-spent") {
		t.Error("the Forms page does not say the quota counts were lost and count as spent")
	}
	// Until one window after the first run stopped, the row waits.
	testkit.Eventually(t, 2*window, "almost one window after the stop", func() bool { return time.Since(stopped) > window-500*time.Millisecond })
	if f := getForm(ta, forms[0].ID); f.RowsWritten != 1 || f.Buffered != 1 {
		t.Fatalf("%s after the stop, within the window the lost log may have spent: %+v; want the row still waiting", time.Since(stopped).Round(time.Millisecond), f)
	}
	testkit.Eventually(t, 3*window, "the second run's row written", func() bool { return getForm(ta, forms[0].ID).RowsWritten == 2 })
	testkit.Eventually(t, 2*window, "a form created once the window passed", func() bool {
		status, _, _ := newForm(ta, userID, accountID, 4)
		return status == http.StatusCreated
	})
	st := fake.Sheets.Stats()
	if st.RejectedWrites != 0 || st.RejectedReads != 0 {
		t.Errorf("Google refused %d writes and %d reads: a run spent from a window the last one had spent", st.RejectedWrites, st.RejectedReads)
	}
	if w, r := fake.Sheets.MaxWritesInWindow(email), fake.Sheets.MaxReadsInWindow(email); w > writes || r > read {
		t.Errorf("%d writes and %d reads within one window; limits %d and %d", w, r, writes, read)
	}
}

// retryAfterOf makes a form creation that the quota refuses and returns
// its Retry-After, in seconds.
func retryAfterOf(t *testing.T, ta *apptest.App, userID, accountID string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, ta.URL+"/api/v1/forms", jsonBody(t, map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": "whatever-id", "columns": []string{"name"},
	}))
	req.Header.Set("Authorization", "Bearer "+ta.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("form creation while the window counts as spent: %d, want 429", resp.StatusCode)
	}
	n, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return n
}
