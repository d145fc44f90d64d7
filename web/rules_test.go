package web

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"mailroom/queue/broker/brokertest"
	"mailroom/queue/rules"
	"mailroom/store"
)

func rulesSample(at time.Time) rulesView {
	r := rules.Rule{ID: "r1", UserID: "u1", Version: 3, CreatedAt: at, UpdatedAt: at, Spec: rules.Spec{
		Label: "Dev", Match: rules.MatchAll, Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@github.com"}},
		Actions: rules.Actions{MarkRead: true},
	}}
	ed := editorOf(r)
	ed.Rows[0].Error = "The value to look for is empty; type some text."
	ed.Errors = map[string]string{"label": "The label name is required."}
	ed.Error = "Too many rule saves."
	pending := &store.ReclassifyPending{UserID: "u1", RuleIDs: []string{"r1", "gone123"}, FirstSave: at, LastSave: at, FiresAt: at.Add(time.Minute)}
	jobs := []rules.Job{
		{ReclassifyJob: store.ReclassifyJob{ID: "0000000000000002", RuleIDs: []string{"r1"}, Batches: 60, BatchesDone: 20, BatchesFailed: 1, StartedAt: at}, State: rules.JobRunning},
		{ReclassifyJob: store.ReclassifyJob{ID: "0000000000000001", RuleIDs: []string{"r1"}, Batches: 60, BatchesDone: 10, BatchesSkippedStale: 50, StartedAt: at, FinishedAt: at}, State: rules.JobSuperseded},
		{ReclassifyJob: store.ReclassifyJob{ID: "0000000000000000", StartedAt: at, FinishedAt: at}, State: rules.JobDone},
	}
	var rows []jobRow
	for _, j := range jobs {
		rows = append(rows, jobRow{Job: j, Labels: []string{"Dev"}})
	}
	return rulesView{
		User: store.User{ID: "u1", Email: "ann@example.com"}, Rules: []ruleRow{{Rule: r, Pending: true}}, Editor: ed,
		Preview: &rules.Preview{Threads: 3000, MatchedThreads: 412, BodyFromSnippet: true,
			Sample: []rules.PreviewMessage{{From: "CI <ci@github.com>", Subject: "Build <failed>", Date: at}}},
		Pending: pending, PendingLabels: []string{"Dev", "deleted rule gone12"}, Labels: map[string]string{"r1": "Dev"},
		Jobs: rows, Chart: jobsChart(jobs), Settings: rules.Config{Debounce: time.Minute, MaxWait: 10 * time.Minute, BatchSize: 50, SaveLimit: 20, SaveWindow: time.Minute},
		Fields: ruleFields, Ops: ruleOps,
	}
}

func rulesUsersSample(at time.Time) rulesUsersView {
	return rulesUsersView{Users: []rulesUserRow{
		{User: store.User{ID: "u1", Email: "ann@example.com", Name: "Ann"}, Rules: 2, Pending: &store.ReclassifyPending{FiresAt: at}},
		{User: store.User{ID: "u2", Email: "bob@example.com"}},
	}}
}

// rulesEnv is a web handler with the rules pipeline over a pipeline with
// no Gmail (the API and pages only save and read).
func rulesEnv(t *testing.T, cfg rules.Config) (*env, *rules.Pipeline, string) {
	t.Helper()
	var p *rules.Pipeline
	e := newEnv(t, envOptions{deps: func(d *Deps) {
		var err error
		p, err = rules.New(cfg, rules.Deps{DB: d.DB, Broker: brokertest.Embedded(t).Client()})
		if err != nil {
			t.Fatal(err)
		}
		d.Rules = p
	}})
	var u store.User
	if err := e.db.Update(func(tx *store.Tx) (err error) { u, err = tx.UserCreate("ann@example.com", "Ann"); return err }); err != nil {
		t.Fatal(err)
	}
	return e, p, u.ID
}

const devRule = `{"label":"Dev","match":"all","conditions":[{"field":"from","op":"contains","value":"@github.com"}],"actions":{"markRead":false,"archive":false}}`

func TestRulesAPI(t *testing.T) {
	t.Parallel()
	e, _, uid := rulesEnv(t, rules.Config{SaveLimit: 4, SaveWindow: time.Minute})
	auth := bearer(testAPIToken)

	w := request(t, e.h, http.MethodPost, "/api/v1/users/"+uid+"/rules", devRule, auth)
	if w.Code != http.StatusCreated {
		t.Fatalf("create: %d %s", w.Code, w.Body.String())
	}
	created := decode[savedJSON](t, w)
	if created.Rule.ID == "" || created.Rule.Version != 1 || created.Reclassify.State != "pending" || created.Reclassify.FiresAt.IsZero() {
		t.Fatalf("create answer %+v", created)
	}
	id := created.Rule.ID

	tests := []struct {
		name, method, path, body string
		status                   int
		code, field              string
	}{
		{"duplicate label", "POST", "/api/v1/users/" + uid + "/rules", strings.Replace(devRule, `"Dev"`, `"dev"`, 1), 409, "conflict", "label"},
		{"bad field names the path", "POST", "/api/v1/users/" + uid + "/rules", `{"label":"X","conditions":[{"field":"from","op":"contains","value":"a"},{"field":"from","op":"contains","value":"b"},{"field":"subject","op":"matches","value":"(x"}]}`, 400, "invalid", "conditions[2].value"},
		{"wrong type names the path", "POST", "/api/v1/users/" + uid + "/rules", `{"label":"X","conditions":[{"field":"from","op":"contains","value":1}]}`, 400, "invalid_type", "conditions[0].value"},
		{"unknown field", "POST", "/api/v1/users/" + uid + "/rules", `{"label":"X","colour":1,"conditions":[]}`, 400, "unknown_field", "colour"},
		{"unknown action", "POST", "/api/v1/users/" + uid + "/rules", `{"label":"X","conditions":[{"field":"from","op":"contains","value":"a"}],"actions":{"delete":true}}`, 400, "unknown_field", "actions.delete"},
		{"malformed json", "POST", "/api/v1/users/" + uid + "/rules", `{"label":`, 400, "malformed_json", ""},
		{"unknown user", "POST", "/api/v1/users/nobody/rules", devRule, 404, "not_found", ""},
		{"unknown rule", "PUT", "/api/v1/rules/nope", devRule, 404, "not_found", ""},
		{"list of unknown user", "GET", "/api/v1/users/nobody/rules", "", 404, "not_found", ""},
		{"status of unknown user", "GET", "/api/v1/users/nobody/reclassify", "", 404, "not_found", ""},
		{"delete unknown", "DELETE", "/api/v1/rules/nope", "", 404, "not_found", ""},
	}
	for _, tt := range tests {
		var body any
		if tt.body != "" {
			body = tt.body
		}
		w := request(t, e.h, tt.method, tt.path, body, auth)
		if w.Code != tt.status {
			t.Errorf("%s: status %d, want %d: %s", tt.name, w.Code, tt.status, w.Body.String())
			continue
		}
		if got := apiError(t, w); got.Code != tt.code || got.Field != tt.field {
			t.Errorf("%s: error %+v, want code %s field %q", tt.name, got, tt.code, tt.field)
		}
	}

	// Update: version 2; list and status show it.
	w = request(t, e.h, http.MethodPut, "/api/v1/rules/"+id, strings.Replace(devRule, "@github.com", "@gitlab.com", 1), auth)
	if w.Code != http.StatusOK || decode[savedJSON](t, w).Rule.Version != 2 {
		t.Fatalf("update: %d %s", w.Code, w.Body.String())
	}
	w = request(t, e.h, http.MethodGet, "/api/v1/users/"+uid+"/rules", nil, auth)
	list := decode[struct{ Rules []ruleJSON }](t, w)
	if len(list.Rules) != 1 || list.Rules[0].Conditions[0].Value != "@gitlab.com" {
		t.Fatalf("list: %s", w.Body.String())
	}
	w = request(t, e.h, http.MethodGet, "/api/v1/users/"+uid+"/reclassify", nil, auth)
	if !strings.Contains(w.Body.String(), `"pending":{`) || !strings.Contains(w.Body.String(), `"jobs":[]`) || !strings.Contains(w.Body.String(), id) {
		t.Fatalf("status: %s", w.Body.String())
	}

	// Three accepted saves so far (one create, one update; refused and
	// invalid ones do not count), limit 4: one more, then 429.
	if w := request(t, e.h, http.MethodPost, "/api/v1/users/"+uid+"/rules", strings.Replace(devRule, `"Dev"`, `"Ops"`, 1), auth); w.Code != 201 {
		t.Fatalf("third save: %d %s", w.Code, w.Body.String())
	}
	if w := request(t, e.h, http.MethodDelete, "/api/v1/rules/"+id, nil, auth); w.Code != http.StatusNoContent {
		t.Fatalf("delete (4th save): %d %s", w.Code, w.Body.String())
	}
	w = request(t, e.h, http.MethodPost, "/api/v1/users/"+uid+"/rules", strings.Replace(devRule, `"Dev"`, `"Five"`, 1), auth)
	if w.Code != http.StatusTooManyRequests || apiError(t, w).Code != "rate_limited" {
		t.Fatalf("5th save: %d %s", w.Code, w.Body.String())
	}
	if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
}

func TestRulesAdminPage(t *testing.T) {
	t.Parallel()
	e, p, uid := rulesEnv(t, rules.Config{})
	s := login(t, e.h)
	if w := request(t, e.h, http.MethodGet, "/admin/rules", nil, s.headers()); w.Code != 200 || !strings.Contains(w.Body.String(), "/admin/rules/"+uid) {
		t.Fatalf("users page: %d", w.Code)
	}
	form := url.Values{"csrf": {s.csrf}, "label": {"Dev"}, "match": {"all"},
		"field": {"from", "subject", "from"}, "op": {"contains", "matches", "contains"}, "value": {"@github.com", "(broken", ""}}
	// A refused save redirects to the editor (post/redirect/get: a reload
	// never posts again), which shows the draft with its error, in the
	// preview too, once.
	w := request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/save", form, s.headers())
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/admin/rules/"+uid+"#editor" {
		t.Fatalf("invalid save: %d to %q\n%s", w.Code, w.Header().Get("Location"), w.Body.String())
	}
	w = request(t, e.h, http.MethodGet, "/admin/rules/"+uid, nil, s.withCookies(w))
	if body := w.Body.String(); w.Code != 200 || !strings.Contains(body, "missing closing )") || !strings.Contains(body, `value="(broken" aria-label="Value" placeholder="@github.com" aria-invalid="true"`) ||
		!strings.Contains(body, "Nothing to preview until this is fixed") || strings.Contains(body, "Type a condition") {
		t.Fatalf("the editor after a refused save: %d\n%s", w.Code, body)
	}
	if body := request(t, e.h, http.MethodGet, "/admin/rules/"+uid, nil, s.withCookies(w)).Body.String(); strings.Contains(body, "(broken") {
		t.Error("a reload still shows the refused draft")
	}
	form["value"] = []string{"@github.com", "", ""}
	if w := request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/save", form, s.headers()); w.Code != http.StatusSeeOther {
		t.Fatalf("save: %d %s", w.Code, w.Body.String())
	}
	w = request(t, e.h, http.MethodGet, "/admin/rules/"+uid, nil, s.headers())
	if w.Code != 200 || !strings.Contains(w.Body.String(), "Pending reclassify") || !strings.Contains(w.Body.String(), "data-countdown") {
		t.Fatalf("page: %d\n%s", w.Code, w.Body.String())
	}
	w = request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/save", url.Values{"csrf": {s.csrf}, "label": {"dev"}, "field": {"to"}, "op": {"contains"}, "value": {"x"}}, s.headers())
	if w.Code != http.StatusSeeOther {
		t.Fatalf("duplicate: %d", w.Code)
	}
	if body := request(t, e.h, http.MethodGet, "/admin/rules/"+uid, nil, s.withCookies(w)).Body.String(); !strings.Contains(body, "already has a rule for that label") {
		t.Fatalf("duplicate: the editor does not say why")
	}
	// The live preview answers validation errors with their field.
	h := s.headers()
	h["X-CSRF-Token"] = s.csrf
	w = request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/preview.json", `{"match":"all","conditions":[{"field":"subject","op":"equals","value":""}]}`, h)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"field":"conditions[0].value"`) {
		t.Fatalf("preview: %d %s", w.Code, w.Body.String())
	}
	w = request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/preview.json", `{"conditions":[{"field":"from","op":"contains","value":"x"}]}`, h)
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"valid":true`) {
		t.Fatalf("preview: %d %s", w.Code, w.Body.String())
	}
	rs, _ := p.Rules(uid)
	if w := request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/delete", url.Values{"csrf": {s.csrf}, "id": {rs[0].ID}}, s.headers()); w.Code != http.StatusSeeOther {
		t.Fatalf("delete: %d", w.Code)
	}
	if w := request(t, e.h, http.MethodGet, "/admin/rules/"+uid+"/status.json", nil, s.headers()); w.Code != 200 || !strings.Contains(w.Body.String(), `"pending":{`) {
		t.Fatalf("status.json: %d %s", w.Code, w.Body.String())
	}
	if w := request(t, e.h, http.MethodGet, "/admin/rules/nobody", nil, s.headers()); w.Code != 404 {
		t.Fatalf("unknown user page: %d", w.Code)
	}
}

// A job's failed batches (in the dead letters) show in the API, the chart
// and the page.
func TestJobFailedBatchesShown(t *testing.T) {
	t.Parallel()
	v := rulesSample(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	var jobs []rules.Job
	for _, r := range v.Jobs {
		jobs = append(jobs, r.Job)
	}
	js := toReclassifyJSON(rules.Status{Jobs: jobs})
	if js.Jobs[0].BatchesFailed != 1 {
		t.Errorf("API batchesFailed %d, want 1", js.Jobs[0].BatchesFailed)
	}
	if chart := string(v.Chart); !strings.Contains(chart, `class="bar-fail"`) || !strings.Contains(chart, "1 failed") {
		t.Errorf("chart lacks the failed batch: %s", chart)
	}
	body := renderPage(t, "rules", v)
	if !strings.Contains(body, `data-field="batchesFailed">1</b> failed`) {
		t.Errorf("page lacks the failed batch count")
	}
}

// A rule that reads bodies says, when saved, what applying it to old mail
// costs at the Gmail price list in force (2026 by default: a body read is
// 60 units against 20); one on headers says nothing of it.
func TestSavedBodyRuleSaysItsCost(t *testing.T) {
	t.Parallel()
	e, _, uid := rulesEnv(t, rules.Config{})
	s := login(t, e.h)
	save := func(label, field string) string {
		form := url.Values{"csrf": {s.csrf}, "label": {label}, "match": {"all"}, "field": {field}, "op": {"contains"}, "value": {"invoice"}}
		w := request(t, e.h, http.MethodPost, "/admin/rules/"+uid+"/save", form, s.headers())
		if w.Code != http.StatusSeeOther {
			t.Fatalf("save %s: %d %s", label, w.Code, w.Body.String())
		}
		return request(t, e.h, http.MethodGet, "/admin/rules/"+uid, nil, s.withCookies(w)).Body.String()
	}
	const cost = "It reads message bodies: at Google&#39;s 2026 prices a body read costs 60 Gmail units against 20 for the headers, so applying it to old mail costs three times as much."
	if page := save("Bills", "body"); !strings.Contains(page, cost) {
		t.Errorf("a body rule's save does not say its cost:\n%s", page)
	}
	if page := save("Subjects", "subject"); strings.Contains(page, "reads message bodies") {
		t.Error("a subject rule's save speaks of bodies")
	}
}
