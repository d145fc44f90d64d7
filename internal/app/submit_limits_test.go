package app_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/queue/sheets"
)

// TestSubmitLimitsFromConfig: MAILROOM_SUBMISSIONS_PER_FORM reaches the
// Sheets pipeline: past it a submission is answered 429 rate_limited.
func TestSubmitLimitsFromConfig(t *testing.T) {
	t.Parallel()
	const email = "limits@example.com"
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.PubSubTopic = ""
		cfg.SheetsFlushDelay = 200 * time.Millisecond
		cfg.SubmissionsPerForm, cfg.SubmissionsPerUser, cfg.SubmissionsWindow = 2, 100, time.Hour
	}))
	userID := createUser(ta, email)
	accountID := connectAccount(ta, fake, userID, email).ID
	book, err := fake.Sheets.CreateSpreadsheet(email, "Survey")
	if err != nil {
		t.Fatal(err)
	}
	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{"userId": userID, "accountId": accountID, "spreadsheetId": book, "columns": []string{"name"}}, http.StatusCreated, &f)
	sub := "/api/v1/forms/" + f.ID + "/submissions"
	for range 2 {
		ta.JSON(http.MethodPost, sub, map[string]any{"answers": map[string]string{"name": "a"}}, http.StatusAccepted, nil)
	}
	status, raw := ta.Do(http.MethodPost, sub, map[string]any{"answers": map[string]string{"name": "b"}})
	if status != http.StatusTooManyRequests || !strings.Contains(string(raw), `"rate_limited"`) {
		t.Fatalf("3rd submission with a limit of 2: %d %s", status, raw)
	}
}

// TestSubmissionUserBytesFromConfig: MAILROOM_SUBMISSIONS_USER_BYTES
// reaches the Sheets pipeline: once a user's forms keep that many bytes, a
// submission is answered 429 naming userId, and the rows accepted stay.
func TestSubmissionUserBytesFromConfig(t *testing.T) {
	t.Parallel()
	const email = "bytes@example.com"
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.PubSubTopic = ""
		cfg.SheetsFlushDelay = time.Hour
		env := map[string]string{"MAILROOM_SUBMISSIONS_USER_BYTES": "1KiB"}
		parsed, err := app.ParseConfig("serve", nil, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg.SubmissionsUserBytes = parsed.SubmissionsUserBytes
	}))
	userID := createUser(ta, email)
	accountID := connectAccount(ta, fake, userID, email).ID
	book, err := fake.Sheets.CreateSpreadsheet(email, "Survey")
	if err != nil {
		t.Fatal(err)
	}
	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{"userId": userID, "accountId": accountID, "spreadsheetId": book, "columns": []string{"name"}}, http.StatusCreated, &f)
	sub := "/api/v1/forms/" + f.ID + "/submissions"
	big := map[string]any{"answers": map[string]string{"name": strings.Repeat("a", 600)}}
	for range 2 {
		ta.JSON(http.MethodPost, sub, big, http.StatusAccepted, nil)
	}
	status, raw := ta.Do(http.MethodPost, sub, big)
	if status != http.StatusTooManyRequests || !strings.Contains(string(raw), `"field":"userId"`) {
		t.Fatalf("past 1KiB of a user's submissions: %d %s, want 429 naming userId", status, raw)
	}
	var view sheetsForm
	ta.JSON(http.MethodGet, "/api/v1/forms/"+f.ID, nil, http.StatusOK, &view)
	if view.Buffered != 2 {
		t.Fatalf("the form keeps %d rows, want the 2 accepted", view.Buffered)
	}
}

// TestSubmissionUserBytesDefault: the default bound is a tenth of the free
// space, between 64MiB and 4GiB.
func TestSubmissionUserBytesDefault(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		free uint64
		want int64
	}{{0, 64 << 20}, {100 << 20, 64 << 20}, {10 << 30, 1 << 30}, {1 << 40, 4 << 30}} {
		if got := sheets.DefaultUserBytes(c.free); got != c.want {
			t.Errorf("free %d: %d, want %d", c.free, got, c.want)
		}
	}
}
