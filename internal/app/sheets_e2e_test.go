package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/web/webtest"
)

// sheetsForm is a form as the API answers it.
type sheetsForm struct {
	ID            string   `json:"id"`
	UserID        string   `json:"userId"`
	AccountID     string   `json:"accountId"`
	SpreadsheetID string   `json:"spreadsheetId"`
	Sheet         string   `json:"sheet"`
	Columns       []string `json:"columns"`
	StartRow      int      `json:"startRow"`
	Buffered      int      `json:"buffered"`
	RowsWritten   int      `json:"rowsWritten"`
	WriteCalls    int      `json:"writeCalls"`
	LastFlushAt   string   `json:"lastFlushAt"`
	State         string   `json:"state"`
	LastError     string   `json:"lastError"`
}

type apiErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Field   string `json:"field"`
	} `json:"error"`
}

func getForm(ta *apptest.App, id string) sheetsForm {
	ta.T().Helper()
	var f sheetsForm
	ta.JSON(http.MethodGet, "/api/v1/forms/"+id, nil, http.StatusOK, &f)
	return f
}

// sheetsApp starts the app against the emulator with a user, a connected
// account and a spreadsheet it owns.
func sheetsApp(t *testing.T, fake *googlefake.Server, more func(*app.Config)) (ta *apptest.App, userID, accountID, book string) {
	t.Helper()
	ta = apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.PubSubTopic = ""
		cfg.SheetsFlushDelay = 500 * time.Millisecond
		cfg.SheetsQuotaWindow = time.Second
		cfg.SheetsWritesPerMinute = 10
		if more != nil {
			more(cfg)
		}
	}))
	userID = createUser(ta, "forms@example.com")
	accountID = connectAccount(ta, fake, userID, "forms@example.com").ID
	book, err := fake.Sheets.CreateSpreadsheet("forms@example.com", "Survey", "Responses", "Other")
	if err != nil {
		t.Fatal(err)
	}
	return ta, userID, accountID, book
}

// TestSheetsEndToEnd drives the forms API over HTTP: create a form,
// submit, and find the rows in the emulator's sheet, once each and in
// order, with the metrics and the admin page telling the same.
func TestSheetsEndToEnd(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{SheetsWriteLimit: 10, SheetsWindow: time.Second})
	ta, userID, accountID, book := sheetsApp(t, fake, nil)

	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name", "email"},
	}, http.StatusCreated, &f)
	if f.ID == "" || f.Sheet != "Responses" || f.StartRow != 1 || f.Buffered != 0 || f.LastFlushAt != "" {
		t.Fatalf("created %+v", f)
	}

	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		ids []string
	)
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				var got struct{ ID string }
				ta.JSON(http.MethodPost, "/api/v1/forms/"+f.ID+"/submissions", map[string]any{
					"answers": map[string]any{"name": fmt.Sprint("n", w, "-", i), "email": "=HYPERLINK(\"http://x\")"},
				}, http.StatusAccepted, &got)
				mu.Lock()
				ids = append(ids, got.ID)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	testkit.Eventually(t, 15*time.Second, "100 rows written", func() bool { return getForm(ta, f.ID).RowsWritten == 100 })

	cells, err := fake.Sheets.Cells(book, "Responses")
	if err != nil {
		t.Fatal(err)
	}
	if len(cells) != 100 {
		t.Fatalf("sheet has %d rows, want 100", len(cells))
	}
	seen := map[string]bool{}
	prev := ""
	for i, r := range cells {
		if len(r) != 4 {
			t.Fatalf("row %d has %d cells: %+v", i+1, len(r), r)
		}
		if _, err := time.Parse(time.RFC3339, r[0].Value); err != nil {
			t.Fatalf("row %d: submittedAt %q: %v", i+1, r[0].Value, err)
		}
		if r[2].Formula || r[2].Value != `=HYPERLINK("http://x")` {
			t.Fatalf("row %d: formula text became %+v", i+1, r[2])
		}
		id := r[3].Value
		if seen[id] || id <= prev {
			t.Fatalf("row %d: id %s repeated or out of order (after %s)", i+1, id, prev)
		}
		seen[id], prev = true, id
	}
	for _, id := range ids {
		if !seen[id] {
			t.Fatalf("accepted submission %s is not in the sheet", id)
		}
	}
	got := getForm(ta, f.ID)
	if got.Buffered != 0 || got.LastFlushAt == "" || got.LastError != "" || got.WriteCalls < 1 || got.WriteCalls > 4 {
		t.Fatalf("form after the flush: %+v", got)
	}
	var list struct{ Forms []sheetsForm }
	ta.JSON(http.MethodGet, "/api/v1/forms?userId="+userID, nil, http.StatusOK, &list)
	if len(list.Forms) != 1 || list.Forms[0].ID != f.ID {
		t.Fatalf("list %+v", list)
	}

	// The counters move just after the commit that GET reads.
	var (
		status  int
		metrics []byte
	)
	testkit.Eventually(t, 5*time.Second, "the metrics to count the last write", func() bool {
		status, metrics = ta.Do(http.MethodGet, "/metrics", nil)
		return bytes.Contains(metrics, []byte("mailroom_sheets_flush_latency_seconds_count 100"))
	})
	for _, want := range []string{
		"mailroom_sheets_rows_written_total 100", "mailroom_sheets_rows_buffered 0",
		fmt.Sprintf("mailroom_sheets_write_calls_total %d", got.WriteCalls), "mailroom_sheets_quota_waits_total",
		"mailroom_sheets_flush_latency_seconds_count 100",
	} {
		if status != http.StatusOK || !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	page := adminGet(t, ta, "/admin/forms")
	for _, want := range []string{f.ID, "Responses", "forms@example.com", "rows-chart", "quota-meter"} {
		if !strings.Contains(page, want) {
			t.Errorf("admin Forms page lacks %q", want)
		}
	}
}

// adminGet logs in to the admin page and returns the body of path.
func adminGet(t *testing.T, ta *apptest.App, path string) string {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := webtest.SignIn(c, ta.URL, url.Values{"password": {ta.Config().AdminPassword}, "next": {path}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("login then %s: %s\n%s", path, resp.Status, body)
	}
	return string(body)
}

// TestSheetsBadInput: every malformed form or submission gets a clear
// 4xx naming the field, never a 500, and nothing is stored.
func TestSheetsBadInput(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta, userID, accountID, book := sheetsApp(t, fake, nil)
	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name", "email"},
	}, http.StatusCreated, &f)
	stranger, err := fake.Sheets.CreateSpreadsheet("stranger@example.com", "Not yours")
	if err != nil {
		t.Fatal(err)
	}
	form := func(mod func(map[string]any)) map[string]any {
		m := map[string]any{"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Other", "columns": []string{"a"}}
		mod(m)
		return m
	}
	sub := "/api/v1/forms/" + f.ID + "/submissions"
	big := strings.Repeat("x", 50_001)
	cases := []struct {
		name   string
		path   string
		body   any
		status int
		code   string
		field  string
	}{
		{"unknown form", "/api/v1/forms/nope/submissions", map[string]any{"answers": map[string]any{"name": "a"}}, 404, "not_found", ""},
		{"unknown column", sub, map[string]any{"answers": map[string]any{"name": "a", "phone": "1"}}, 400, "unknown_field", "answers.phone"},
		{"object answer", sub, map[string]any{"answers": map[string]any{"email": map[string]any{"a": 1}}}, 400, "invalid_type", "answers.email"},
		{"array answer", sub, map[string]any{"answers": map[string]any{"email": []string{"a"}}}, 400, "invalid_type", "answers.email"},
		{"oversized value", sub, map[string]any{"answers": map[string]any{"email": big}}, 400, "too_long", "answers.email"},
		{"oversized body", sub, []byte(`{"answers":{"name":"` + strings.Repeat("y", 1<<20) + `"}}`), 413, "too_large", ""},
		{"answers not an object", sub, map[string]any{"answers": "x"}, 400, "invalid_type", "answers"},
		{"no answers", sub, map[string]any{"answers": map[string]any{}}, 400, "required", "answers"},
		{"empty body", sub, []byte(``), 400, "malformed_json", ""},
		{"broken JSON", sub, []byte(`{"answers":{"name":`), 400, "malformed_json", ""},
		{"unknown body field", sub, map[string]any{"answers": map[string]any{"name": "a"}, "extra": 1}, 400, "unknown_field", "extra"},
		{"form: missing spreadsheet", "/api/v1/forms", form(func(m map[string]any) { m["spreadsheetId"] = "missing" }), 400, "not_found", "spreadsheetId"},
		{"form: not shared", "/api/v1/forms", form(func(m map[string]any) { m["spreadsheetId"] = stranger }), 400, "forbidden", "spreadsheetId"},
		{"form: missing sheet", "/api/v1/forms", form(func(m map[string]any) { m["sheet"] = "Nope" }), 400, "not_found", "sheet"},
		{"form: sheet taken", "/api/v1/forms", form(func(m map[string]any) { m["sheet"] = "responses" }), 409, "conflict", "sheet"},
		{"form: unknown account", "/api/v1/forms", form(func(m map[string]any) { m["accountId"] = "nope" }), 400, "not_found", "accountId"},
		{"form: unknown user", "/api/v1/forms", form(func(m map[string]any) { m["userId"] = "nope" }), 400, "not_found", "userId"},
		{"form: no columns", "/api/v1/forms", form(func(m map[string]any) { m["columns"] = []string{} }), 400, "required", "columns"},
		{"form: column not a string", "/api/v1/forms", form(func(m map[string]any) { m["columns"] = []any{1} }), 400, "invalid_type", "columns"},
		{"form: unknown form id", "/api/v1/forms/nope", nil, 404, "not_found", ""},
	}
	for _, tc := range cases {
		method := http.MethodPost
		if tc.body == nil {
			method = http.MethodGet
		}
		status, raw := ta.Do(method, tc.path, tc.body)
		var e apiErrorBody
		_ = json.Unmarshal(raw, &e)
		if status != tc.status || e.Error.Code != tc.code || e.Error.Field != tc.field || e.Error.Message == "" {
			t.Errorf("%s: %d %s, want %d %s on %q", tc.name, status, raw, tc.status, tc.code, tc.field)
		}
	}
	if got := getForm(ta, f.ID); got.Buffered != 0 {
		t.Fatalf("a refused submission was buffered: %+v", got)
	}
	// Formula text is accepted and stays text.
	var s struct{ ID string }
	ta.JSON(http.MethodPost, sub, map[string]any{"answers": map[string]any{"name": "=1+1", "email": 42}}, http.StatusAccepted, &s)
	testkit.Eventually(t, 10*time.Second, "the row", func() bool { return getForm(ta, f.ID).RowsWritten == 1 })
	cells, _ := fake.Sheets.Cells(book, "Responses")
	if len(cells) != 1 || cells[0][1].Formula || cells[0][1].Value != "=1+1" || cells[0][2].Value != "42" || cells[0][3].Value != s.ID {
		t.Fatalf("row %+v", cells)
	}
}

// TestSheetsFormErrorPutRetry: over HTTP, a form whose spreadsheet is
// deleted is in state "error" with a lastError that says what to do, keeps
// taking submissions (202), and PUT /api/v1/forms/{id} points it at a new
// sheet (200) where its waiting rows land; POST .../retry answers 202; bad
// input is a 4xx naming the field.
func TestSheetsFormErrorPutRetry(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta, userID, accountID, book := sheetsApp(t, fake, func(cfg *app.Config) { cfg.SheetsRecheckMax = 2 * time.Second })
	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name"},
	}, http.StatusCreated, &f)
	if f.State != "ok" {
		t.Fatalf("new form state %q", f.State)
	}
	if err := fake.Sheets.DeleteSpreadsheet(book); err != nil {
		t.Fatal(err)
	}
	sub := "/api/v1/forms/" + f.ID + "/submissions"
	var ids []string
	for i := range 3 {
		var s struct{ ID string }
		ta.JSON(http.MethodPost, sub, map[string]any{"answers": map[string]any{"name": fmt.Sprint("n", i)}}, http.StatusAccepted, &s)
		ids = append(ids, s.ID)
	}
	testkit.Eventually(t, 10*time.Second, "form in error", func() bool { return getForm(ta, f.ID).State == "error" })
	if got := getForm(ta, f.ID); !strings.Contains(got.LastError, "point the form at another sheet") || got.Buffered != 3 {
		t.Fatalf("form in error: %+v", got)
	}
	ta.JSON(http.MethodPost, "/api/v1/forms/"+f.ID+"/retry", nil, http.StatusAccepted, nil)
	page := adminGet(t, ta, "/admin/forms")
	for _, want := range []string{`action="/admin/forms/` + f.ID + `/retry"`, "Retry now", "does not exist"} {
		if !strings.Contains(page, want) {
			t.Errorf("Forms page of a form in error lacks %q", want)
		}
	}

	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		code       string
		field      string
	}{
		{"no spreadsheet", "/api/v1/forms/" + f.ID, map[string]any{"sheet": "x"}, 400, "required", "spreadsheetId"},
		{"bad spreadsheet id", "/api/v1/forms/" + f.ID, map[string]any{"spreadsheetId": "a b"}, 400, "invalid", "spreadsheetId"},
		{"unknown field", "/api/v1/forms/" + f.ID, map[string]any{"spreadsheetId": "x", "columns": []string{"a"}}, 400, "unknown_field", "columns"},
		{"broken JSON", "/api/v1/forms/" + f.ID, []byte(`{"spreadsheetId":`), 400, "malformed_json", ""},
		{"unknown form", "/api/v1/forms/nope", map[string]any{"spreadsheetId": book}, 404, "not_found", ""},
	} {
		status, raw := ta.Do(http.MethodPut, tc.path, tc.body)
		var e apiErrorBody
		_ = json.Unmarshal(raw, &e)
		if status != tc.status || e.Error.Code != tc.code || e.Error.Field != tc.field {
			t.Errorf("PUT %s: %d %s, want %d %s on %q", tc.name, status, raw, tc.status, tc.code, tc.field)
		}
	}
	if status, raw := ta.Do(http.MethodPost, "/api/v1/forms/nope/retry", nil); status != http.StatusNotFound {
		t.Errorf("retry of an unknown form: %d %s", status, raw)
	}

	fresh, err := fake.Sheets.CreateSpreadsheet("forms@example.com", "Fresh", "Sheet1")
	if err != nil {
		t.Fatal(err)
	}
	var moved sheetsForm
	ta.JSON(http.MethodPut, "/api/v1/forms/"+f.ID, map[string]any{"spreadsheetId": fresh, "sheet": "Sheet1"}, http.StatusOK, &moved)
	if moved.SpreadsheetID != fresh || moved.State != "ok" {
		t.Fatalf("after PUT: %+v", moved)
	}
	testkit.Eventually(t, 10*time.Second, "rows in the new sheet", func() bool { return getForm(ta, f.ID).RowsWritten == 3 })
	rows, _ := fake.Sheets.Rows(fresh, "Sheet1")
	if len(rows) != 3 || rows[0][2] != ids[0] || rows[2][2] != ids[2] {
		t.Fatalf("new sheet rows %q, want the 3 submissions in order", rows)
	}
}

// TestSheetsDeleteForm: a form with rows waiting is not deleted (409) unless
// told to drop them; deleted, it is gone (404, its submissions refused), its
// rows stay in the sheet and the sheet takes a new form.
func TestSheetsDeleteForm(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	ta, userID, accountID, book := sheetsApp(t, fake, func(cfg *app.Config) { cfg.SheetsFlushDelay = time.Hour })
	newForm := func(columns ...string) sheetsForm {
		var f sheetsForm
		ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
			"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": columns,
		}, http.StatusCreated, &f)
		return f
	}
	f := newForm("name")
	sub := "/api/v1/forms/" + f.ID + "/submissions"
	ta.JSON(http.MethodPost, sub, map[string]any{"answers": map[string]any{"name": "waits"}}, http.StatusAccepted, nil)

	status, raw := ta.Do(http.MethodDelete, "/api/v1/forms/"+f.ID, nil)
	var e apiErrorBody
	_ = json.Unmarshal(raw, &e)
	if status != http.StatusConflict || e.Error.Code != "rows_waiting" || !strings.Contains(e.Error.Message, "1 rows") {
		t.Fatalf("delete with a row waiting: %d %s; want 409 rows_waiting", status, raw)
	}
	if status, raw := ta.Do(http.MethodDelete, "/api/v1/forms/"+f.ID+"?discardWaiting=maybe", nil); status != http.StatusBadRequest {
		t.Fatalf("discardWaiting=maybe: %d %s; want 400", status, raw)
	}
	if got := getForm(ta, f.ID); got.Buffered != 1 {
		t.Fatalf("a refused delete changed the form: %+v", got)
	}
	if status, raw := ta.Do(http.MethodDelete, "/api/v1/forms/"+f.ID+"?discardWaiting=true", nil); status != http.StatusNoContent {
		t.Fatalf("delete dropping the waiting row: %d %s; want 204", status, raw)
	}
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodGet, "/api/v1/forms/" + f.ID, nil},
		{http.MethodPost, sub, map[string]any{"answers": map[string]any{"name": "late"}}},
		{http.MethodDelete, "/api/v1/forms/" + f.ID, nil},
	} {
		if status, raw := ta.Do(c.method, c.path, c.body); status != http.StatusNotFound {
			t.Errorf("%s %s after the delete: %d %s; want 404", c.method, c.path, status, raw)
		}
	}
	// The sheet is free: a new form with other columns writes it.
	g := newForm("email", "name")
	ta.JSON(http.MethodPost, "/api/v1/forms/"+g.ID+"/submissions", map[string]any{"answers": map[string]any{"email": "a@example.com"}}, http.StatusAccepted, nil)
	var list struct{ Forms []sheetsForm }
	ta.JSON(http.MethodGet, "/api/v1/forms", nil, http.StatusOK, &list)
	if len(list.Forms) != 1 || list.Forms[0].ID != g.ID {
		t.Fatalf("forms after the delete: %+v", list.Forms)
	}

	// From the admin page: the delete drops at most the waiting rows the
	// page showed; one more since makes it refuse.
	c := adminClient(ta)
	deleteFromPage := func() string {
		t.Helper()
		_, page := getPage(t, c, ta.URL+"/admin/forms")
		m := csrfRE.FindStringSubmatch(page)
		seen := regexp.MustCompile(`action="/admin/forms/` + g.ID + `/delete"[^>]*>.*?name="dropWaiting" value="(\d+)"`).FindStringSubmatch(page)
		if m == nil || seen == nil {
			t.Fatalf("no delete form for %s on the Forms page:\n%s", g.ID, page)
		}
		ta.JSON(http.MethodPost, "/api/v1/forms/"+g.ID+"/submissions", map[string]any{"answers": map[string]any{"name": "meanwhile"}}, http.StatusAccepted, nil)
		resp, err := c.PostForm(ta.URL+"/admin/forms/"+g.ID+"/delete", url.Values{"csrf": {m[1]}, "dropWaiting": {seen[1]}})
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return string(raw)
	}
	if page := deleteFromPage(); !strings.Contains(page, "was not deleted") {
		t.Fatalf("a delete with more rows waiting than the page showed went through:\n%s", page)
	}
	if got := getForm(ta, g.ID); got.Buffered != 2 {
		t.Fatalf("after the refused delete: %+v", got)
	}
	// Confirmed again from a fresh page (2 waiting), but a third row comes.
	if page := deleteFromPage(); !strings.Contains(page, "was not deleted") {
		t.Fatalf("second refused delete:\n%s", page)
	}
	_, page := getPage(t, c, ta.URL+"/admin/forms")
	m := csrfRE.FindStringSubmatch(page)
	resp, err := c.PostForm(ta.URL+"/admin/forms/"+g.ID+"/delete", url.Values{"csrf": {m[1]}, "dropWaiting": {"3"}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), "3 waiting rows dropped") {
		t.Fatalf("delete from the page:\n%s", raw)
	}
	if status, _ := ta.Do(http.MethodGet, "/api/v1/forms/"+g.ID, nil); status != http.StatusNotFound {
		t.Fatalf("the form deleted from the page answers %d", status)
	}
}
