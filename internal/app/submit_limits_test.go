package app_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
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
