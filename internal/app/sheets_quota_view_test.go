package app_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

// sheetsQuota is a form's quota use as the API answers it.
type sheetsQuota struct {
	Writes, Reads, ProjectWrites, ProjectReads struct {
		LastMinute int `json:"lastMinute"`
		Limit      int `json:"limit"`
		Waiting    int `json:"waiting"`
	}
	SpentUntil string `json:"spentUntil"`
}

// TestSheetsQuotaShown: the forms API and the Forms page show the use of
// both Sheets quotas, reads as well as writes, of the form's account and
// of the project, against their limits, as the Accounts page does for
// Gmail. With a one-minute window every call of the test is in it: the
// form's creation made two reads (the tabs and its columns), its rows one
// write per write call.
func TestSheetsQuotaShown(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta, userID, accountID, book := sheetsApp(t, fake, func(cfg *app.Config) {
		cfg.SheetsQuotaWindow = time.Minute
		cfg.SheetsWritesPerMinute, cfg.SheetsReadsPerMinute = 40, 50
		cfg.SheetsProjectWritesPerMinute, cfg.SheetsProjectReadsPerMinute = 200, 250
	})
	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name"},
	}, http.StatusCreated, &f)
	for i := range 3 {
		ta.JSON(http.MethodPost, "/api/v1/forms/"+f.ID+"/submissions", map[string]any{"answers": map[string]string{"name": fmt.Sprint("n", i)}}, http.StatusAccepted, nil)
	}
	testkit.Eventually(t, 10*time.Second, "3 rows written", func() bool { return getForm(ta, f.ID).RowsWritten == 3 })

	var got struct {
		WriteCalls int         `json:"writeCalls"`
		Quota      sheetsQuota `json:"quota"`
	}
	ta.JSON(http.MethodGet, "/api/v1/forms/"+f.ID, nil, http.StatusOK, &got)
	q := got.Quota
	if q.Writes.LastMinute != got.WriteCalls || q.Writes.Limit != 40 || q.Reads.LastMinute != 2 || q.Reads.Limit != 50 ||
		q.ProjectWrites.LastMinute != got.WriteCalls || q.ProjectWrites.Limit != 200 || q.ProjectReads.LastMinute != 2 || q.ProjectReads.Limit != 250 || q.SpentUntil != "" {
		t.Fatalf("quota of the form (%d write calls): %+v", got.WriteCalls, q)
	}
	var list struct {
		Forms []struct {
			Quota *sheetsQuota `json:"quota"`
		}
	}
	ta.JSON(http.MethodGet, "/api/v1/forms", nil, http.StatusOK, &list)
	if len(list.Forms) != 1 || list.Forms[0].Quota == nil || *list.Forms[0].Quota != q {
		t.Fatalf("the list's quota %+v, want the form's %+v", list.Forms, q)
	}

	page := adminGet(t, ta, "/admin/forms")
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`data-field="used">` + fmt.Sprint(got.WriteCalls) + ` / 40<`),
		regexp.MustCompile(`data-field="reads">2 / 50<`),
		regexp.MustCompile(`(?s)data-field="project-writes">.*?Project's Sheets writes.*?<span class="stat-value">` + fmt.Sprint(got.WriteCalls) + `</span><span class="stat-note">of 200 `),
		regexp.MustCompile(`(?s)data-field="project-reads">.*?Project's Sheets reads.*?<span class="stat-value">2</span><span class="stat-note">of 250 `),
		regexp.MustCompile(`aria-label="2 of 50 reads used"`),
	} {
		if !want.MatchString(page) {
			t.Errorf("the Forms page lacks %s", want)
		}
	}
	if strings.Contains(page, "data-quota-spent") {
		t.Error("the Forms page says the quota counts were lost; nothing was")
	}
}
