package web

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/google"
	"mailroom/queue/rules"
	"mailroom/store"
)

// The admin Rules page: /admin/rules lists the users, /admin/rules/:uid
// shows a user's rules, the editor (with inline validation and a live
// preview), the pending reclassify with its countdown and the recent jobs.

type rulesUserRow struct {
	User    store.User
	Rules   int
	Pending *store.ReclassifyPending
}

type rulesUsersView struct {
	Users []rulesUserRow
}

func (e *rulesHandlers) usersPage(c *gin.Context) {
	s := e.server
	var users []store.User
	if err := s.deps.DB.View(func(tx *store.Tx) (err error) { users, err = tx.Users(); return err }); err != nil {
		e.fail(c, err)
		return
	}
	v := rulesUsersView{}
	for _, u := range users {
		rs, err := e.p.Rules(u.ID)
		if err != nil {
			e.fail(c, err)
			return
		}
		st, err := e.p.Status(u.ID, 1)
		if err != nil {
			e.fail(c, err)
			return
		}
		v.Users = append(v.Users, rulesUserRow{User: u, Rules: len(rs), Pending: st.Pending})
	}
	e.render(c, http.StatusOK, "rules_users", v)
}

// conditionRow is one row of the editor's conditions.
type conditionRow struct {
	Field, Op, Value string
	Error            string
}

// ruleEditor is the editor's state: a rule being written, and what is
// wrong with it.
type ruleEditor struct {
	ID      string // empty: a new rule
	Version int
	// NextVersion is the version a save makes.
	NextVersion int
	Label       string
	Match       string
	Rows        []conditionRow
	MarkRead    bool
	Archive     bool
	// Errors by field: label, match, conditions.
	Errors map[string]string
	// Error is a problem not tied to a field (rate limited).
	Error string
}

// editorRows is the number of condition rows the editor shows at least.
const editorRows = 3

func newEditor() ruleEditor {
	return ruleEditor{Match: rules.MatchAll, Rows: make([]conditionRow, editorRows)}
}

func editorOf(r rules.Rule) ruleEditor {
	ed := ruleEditor{ID: r.ID, Version: r.Version, NextVersion: r.Version + 1, Label: r.Spec.Label, Match: r.Spec.Match, MarkRead: r.Spec.Actions.MarkRead, Archive: r.Spec.Actions.Archive}
	for _, cond := range r.Spec.Conditions {
		ed.Rows = append(ed.Rows, conditionRow{Field: cond.Field, Op: cond.Op, Value: cond.Value})
	}
	for len(ed.Rows) < editorRows || len(ed.Rows) < rules.MaxConditions && ed.Rows[len(ed.Rows)-1].Value != "" {
		ed.Rows = append(ed.Rows, conditionRow{})
	}
	return ed
}

type ruleRow struct {
	Rule    rules.Rule
	Pending bool // in the pending reclassify
}

type jobRow struct {
	rules.Job
	Labels []string
}

type rulesView struct {
	User    store.User
	Rules   []ruleRow
	Editor  ruleEditor
	Preview *rules.Preview
	Pending *store.ReclassifyPending
	// PendingLabels name the pending reclassify's rules.
	PendingLabels []string
	Labels        map[string]string // rule id -> label, for pending and jobs
	Jobs          []jobRow
	Chart         template.HTML
	Settings      rules.Config
	// Debounce, MaxWait and SaveWindow are the settings in words.
	Debounce, MaxWait, SaveWindow string
	Fields                        []string
	Ops                           []string
	// PreviewError says why the draft cannot be previewed (it is invalid).
	PreviewError string
	// JobPage is the page of recent jobs shown (1: the newest); OlderJobs
	// tells there is a next page.
	JobPage   int
	OlderJobs bool
}

// jobsPerPage is how many reclassify jobs a page of the editor lists;
// maxJobPages the deepest page it goes.
const (
	jobsPerPage = 8
	maxJobPages = 100
)

var (
	ruleFields = []string{rules.FieldFrom, rules.FieldTo, rules.FieldCc, rules.FieldSubject, rules.FieldBody, rules.FieldAny}
	ruleOps    = []string{rules.OpContains, rules.OpNotContains, rules.OpEquals, rules.OpMatches}
)

// previewSample is how many matching messages a preview shows.
const previewSample = 5

func (e *rulesHandlers) view(c *gin.Context, uid string, ed ruleEditor) (rulesView, error) {
	page, _ := strconv.Atoi(c.Query("page"))
	page = min(max(page, 1), maxJobPages)
	s := e.server
	cfg := e.p.Config()
	v := rulesView{Editor: ed, Settings: cfg, Fields: ruleFields, Ops: ruleOps, Labels: map[string]string{},
		Debounce: spell(cfg.Debounce), MaxWait: spell(cfg.MaxWait), SaveWindow: timeSpan(cfg.SaveWindow)}
	err := s.deps.DB.View(func(tx *store.Tx) error {
		u, err := tx.UserGet(uid)
		if err != nil {
			return notFound("There is no user with that id.")
		}
		v.User = u
		return nil
	})
	if err != nil {
		return v, err
	}
	rs, err := e.p.Rules(uid)
	if err != nil {
		return v, err
	}
	st, err := e.p.Status(uid, page*jobsPerPage+1)
	if err != nil {
		return v, err
	}
	// This page's jobs, newest first; one more tells there are older.
	v.JobPage, v.OlderJobs = page, len(st.Jobs) > page*jobsPerPage
	st.Jobs = st.Jobs[min((page-1)*jobsPerPage, len(st.Jobs)):min(page*jobsPerPage, len(st.Jobs))]
	v.Pending = st.Pending
	for _, r := range rs {
		v.Labels[r.ID] = r.Spec.Label
		row := ruleRow{Rule: r}
		if st.Pending != nil {
			for _, id := range st.Pending.RuleIDs {
				row.Pending = row.Pending || id == r.ID
			}
		}
		v.Rules = append(v.Rules, row)
	}
	if st.Pending != nil {
		for _, id := range st.Pending.RuleIDs {
			v.PendingLabels = append(v.PendingLabels, ruleName(v.Labels, id))
		}
	}
	for _, j := range st.Jobs {
		row := jobRow{Job: j}
		for _, id := range j.RuleIDs {
			row.Labels = append(row.Labels, ruleName(v.Labels, id))
		}
		v.Jobs = append(v.Jobs, row)
	}
	v.Chart = jobsChart(st.Jobs)
	if spec, _, ok := specOf(ed); ok {
		pv, err := e.p.Preview(uid, spec, previewSample)
		var invalid *rules.ValidationError
		switch {
		case err == nil:
			v.Preview = &pv
		case errors.As(err, &invalid):
			v.PreviewError = "Nothing to preview until this is fixed: " + invalid.Message
		}
	}
	return v, nil
}

// ruleName names a rule by its label, or "deleted rule" when it is gone.
func ruleName(labels map[string]string, id string) string {
	if l, ok := labels[id]; ok {
		return l
	}
	return "deleted rule " + id[:min(6, len(id))]
}

func (e *rulesHandlers) rulesPage(c *gin.Context) {
	uid := c.Param("uid")
	ed := newEditor()
	if id := c.Query("edit"); id != "" {
		r, err := e.p.Rule(id)
		if err != nil || r.UserID != uid {
			e.fail(c, notFound("There is no such rule for this user."))
			return
		}
		ed = editorOf(r)
	}
	if d, ok := e.takeRuleDraft(c, uid); ok && d.ID == ed.ID {
		ed = d
	}
	v, err := e.view(c, uid, ed)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.render(c, http.StatusOK, "rules", v)
}

// editorFromForm reads the editor's form.
func (e *rulesHandlers) editorFromForm(c *gin.Context) ruleEditor {
	ed := ruleEditor{ID: c.PostForm("id"), Label: c.PostForm("label"), Match: c.PostForm("match"), MarkRead: c.PostForm("markRead") != "", Archive: c.PostForm("archive") != ""}
	fields, ops, values := c.PostFormArray("field"), c.PostFormArray("op"), c.PostFormArray("value")
	for i := range min(len(values), rules.MaxConditions+5) {
		row := conditionRow{Value: values[i]}
		if i < len(fields) {
			row.Field = fields[i]
		}
		if i < len(ops) {
			row.Op = ops[i]
		}
		ed.Rows = append(ed.Rows, row)
	}
	for len(ed.Rows) < editorRows {
		ed.Rows = append(ed.Rows, conditionRow{})
	}
	if ed.ID != "" {
		if r, err := e.p.Rule(ed.ID); err == nil {
			ed.Version, ed.NextVersion = r.Version, r.Version+1
		}
	}
	return ed
}

// specOf makes a spec of the editor's rows with a value; rowOf maps a
// condition's index to its row. ok is false when no row has a value.
func specOf(ed ruleEditor) (spec rules.Spec, rowOf []int, ok bool) {
	spec = rules.Spec{Label: ed.Label, Match: ed.Match, Actions: rules.Actions{MarkRead: ed.MarkRead, Archive: ed.Archive}}
	for i, row := range ed.Rows {
		if strings.TrimSpace(row.Value) == "" {
			continue
		}
		spec.Conditions = append(spec.Conditions, rules.Condition{Field: row.Field, Op: row.Op, Value: row.Value})
		rowOf = append(rowOf, i)
	}
	return spec, rowOf, len(spec.Conditions) > 0
}

var conditionPath = regexp.MustCompile(`^conditions\[(\d+)\]`)

// showError puts a validation error next to its field in the editor.
func (ed *ruleEditor) showError(ve *rules.ValidationError, rowOf []int) {
	if ed.Errors == nil {
		ed.Errors = map[string]string{}
	}
	if m := conditionPath.FindStringSubmatch(ve.Field); m != nil {
		if i, _ := strconv.Atoi(m[1]); i < len(rowOf) {
			ed.Rows[rowOf[i]].Error = ve.Message
			return
		}
	}
	switch ve.Field {
	case "label", "match", "conditions":
		ed.Errors[ve.Field] = ve.Message
	default:
		ed.Error = ve.Message
	}
}

func (e *rulesHandlers) saveForm(c *gin.Context) {
	uid := c.Param("uid")
	ed := e.editorFromForm(c)
	spec, rowOf, _ := specOf(ed)
	var (
		saved rules.Saved
		err   error
	)
	if ed.ID == "" {
		saved, err = e.p.Create(c.Request.Context(), uid, spec)
	} else {
		var r rules.Rule
		if r, err = e.p.Rule(ed.ID); err == nil && r.UserID != uid {
			err = rules.ErrNotFound
		}
		if err == nil {
			saved, err = e.p.Update(c.Request.Context(), ed.ID, spec)
		}
	}
	var (
		invalid *rules.ValidationError
		refused *rules.RefusedError
	)
	switch {
	case err == nil:
		e.setFlash(c, "ok", fmt.Sprintf("Saved %q (version %d). Existing mail is relabelled %s.%s", saved.Rule.Spec.Label, saved.Rule.Version, firesIn(e.server.now(), saved.Pending.FiresAt), e.bodyCost(saved.Rule.Spec)))
		redirect(c, "/admin/rules/"+uid)
		return
	case errors.As(err, &invalid):
		ed.showError(invalid, rowOf)
	case errors.Is(err, rules.ErrLabelTaken):
		ed.Errors = map[string]string{"label": "This user already has a rule for that label; edit that rule instead."}
	case errors.As(err, &refused):
		ed.Error = mapRulesError(e.p.Config(), err).Message
		c.Header("Retry-After", strconv.Itoa(int((refused.RetryAfter+time.Second-1)/time.Second)))
	default:
		e.fail(c, err)
		return
	}
	// Post/redirect/get: the refused draft and its errors wait in a signed
	// cookie for the editor's page, so a reload there never posts again.
	// A draft too big for a cookie is drawn here instead, at this URL.
	if e.keepRuleDraft(c, uid, ed) {
		to := "/admin/rules/" + uid
		if ed.ID != "" {
			to += "?edit=" + url.QueryEscape(ed.ID)
		}
		redirect(c, to+"#editor")
		return
	}
	v, verr := e.view(c, uid, ed)
	if verr != nil {
		e.fail(c, verr)
		return
	}
	e.render(c, mapRulesError(e.p.Config(), err).Status, "rules", v)
}

// ruleDraft is a refused editor's state on its way to the next page.
type ruleDraft struct {
	UserID string     `json:"u"`
	Editor ruleEditor `json:"e"`
}

// maxDraftCookie is the longest draft cookie value kept (browsers keep
// about 4 KB a cookie).
const maxDraftCookie = 3500

// keepRuleDraft puts ed in the signed draft cookie for user uid; false
// when it is too big for one.
func (s *server) keepRuleDraft(c *gin.Context, uid string, ed ruleEditor) bool {
	raw, err := json.Marshal(ruleDraft{UserID: uid, Editor: ed})
	if err != nil {
		return false
	}
	v := base64.RawURLEncoding.EncodeToString(raw)
	v += "." + s.keys.sign("rule-draft", v)
	if len(v) > maxDraftCookie {
		return false
	}
	http.SetCookie(c.Writer, s.cookie(s.cookies.draft, v, 60))
	return true
}

// takeRuleDraft reads and clears the draft cookie; ok when it holds a
// draft of user uid this server signed.
func (s *server) takeRuleDraft(c *gin.Context, uid string) (ruleEditor, bool) {
	ck, err := c.Request.Cookie(s.cookies.draft)
	if err != nil {
		return ruleEditor{}, false
	}
	http.SetCookie(c.Writer, s.cookie(s.cookies.draft, "", -1))
	v, mac, _ := strings.Cut(ck.Value, ".")
	if !s.keys.verify("rule-draft", v, mac) {
		return ruleEditor{}, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(v)
	var d ruleDraft
	if err != nil || json.Unmarshal(raw, &d) != nil || d.UserID != uid {
		return ruleEditor{}, false
	}
	return d.Editor, true
}

// opWords says a condition's operator in words: not_contains is "does not
// contain".
func opWords(op string) string {
	switch op {
	case rules.OpContains:
		return "contains"
	case rules.OpNotContains:
		return "does not contain"
	case rules.OpEquals:
		return "is"
	case rules.OpMatches:
		return "matches"
	}
	return op
}

// spell says a setting's duration in words: "60 seconds" is "1 minute".
func spell(d time.Duration) string { return humanDuration(d) }

func firesIn(now, at time.Time) string {
	d := at.Sub(now).Round(time.Second)
	if d <= 0 {
		return "now"
	}
	return "in " + spell(d)
}

func (e *rulesHandlers) deleteForm(c *gin.Context) {
	uid, id := c.Param("uid"), c.PostForm("id")
	r, err := e.p.Rule(id)
	if err != nil || r.UserID != uid {
		e.fail(c, notFound("There is no such rule for this user."))
		return
	}
	saved, err := e.p.Delete(c.Request.Context(), id)
	var refused *rules.RefusedError
	switch {
	case errors.As(err, &refused):
		e.setFlash(c, "error", mapRulesError(e.p.Config(), err).Message)
	case err != nil:
		e.fail(c, err)
		return
	default:
		e.setFlash(c, "ok", fmt.Sprintf("Deleted %q. The labels it applied are removed %s; labels put on by hand stay.", r.Spec.Label, firesIn(e.server.now(), saved.Pending.FiresAt)))
	}
	redirect(c, "/admin/rules/"+uid)
}

type previewJSONAnswer struct {
	Valid           bool               `json:"valid"`
	Error           *errorDetail       `json:"error"`
	Threads         int                `json:"threads"`
	MatchedThreads  int                `json:"matchedThreads"`
	Messages        int                `json:"messages"`
	BodyFromSnippet bool               `json:"bodyFromSnippet"`
	Truncated       bool               `json:"truncated"`
	Sample          []previewMessageJS `json:"sample"`
}

type previewMessageJS struct {
	From    string `json:"from"`
	Subject string `json:"subject"`
	Date    string `json:"date"`
}

// previewJSON answers the editor's live preview: the draft rule (the API's
// JSON shape) is validated and matched against the user's mail. A label is
// not needed to preview.
func (e *rulesHandlers) previewJSON(c *gin.Context) {
	var spec rules.Spec
	if err := bindJSON(c, &spec); err != nil {
		e.fail(c, err)
		return
	}
	if strings.TrimSpace(spec.Label) == "" {
		spec.Label = "preview"
	}
	pv, err := e.p.Preview(c.Param("uid"), spec, previewSample)
	var invalid *rules.ValidationError
	if errors.As(err, &invalid) {
		e.writeJSON(c, http.StatusOK, previewJSONAnswer{Error: &errorDetail{Code: "invalid", Message: invalid.Message, Field: invalid.Field}, Sample: []previewMessageJS{}})
		return
	}
	if err != nil {
		e.fail(c, err)
		return
	}
	out := previewJSONAnswer{Valid: true, Threads: pv.Threads, MatchedThreads: pv.MatchedThreads, Messages: pv.Messages,
		BodyFromSnippet: pv.BodyFromSnippet, Truncated: pv.Truncated, Sample: []previewMessageJS{}}
	for _, m := range pv.Sample {
		out.Sample = append(out.Sample, previewMessageJS{From: m.From, Subject: m.Subject, Date: datetime(m.Date)})
	}
	e.writeJSON(c, http.StatusOK, out)
}

// statusJSON is the reclassify state with the recentJobs newest jobs, or
// ?limit= of them (the editor's page asks for the jobs it lists).
func (e *rulesHandlers) statusJSON(c *gin.Context) {
	limit := recentJobs
	if n, err := strconv.Atoi(c.Query("limit")); err == nil && n > 0 {
		limit = min(n, recentJobs)
	}
	st, err := e.p.Status(c.Param("uid"), limit)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusOK, toReclassifyJSON(st))
}

// Job chart geometry, in SVG user units.
const (
	chartW     = 240.0
	chartRowH  = 14.0
	chartBarH  = 10.0
	chartLabel = 0.0
)

// jobsChart draws each recent job as a bar of its batches: done, skipped
// as stale, and still waiting. It is built from numbers only, so it is
// safe as HTML.
func jobsChart(jobs []rules.Job) template.HTML {
	if len(jobs) == 0 {
		return ""
	}
	top := 1
	var done, skipped int
	for _, j := range jobs {
		top = max(top, j.Batches)
		done += j.BatchesDone
		skipped += j.BatchesSkippedStale
	}
	h := chartRowH * float64(len(jobs))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="jobs-chart" viewBox="0 0 %g %g" width="%g" height="%g" role="img" aria-label="recent jobs: %d batches done, %d skipped as stale">`, chartW, h, chartW, h, done, skipped)
	fmt.Fprintf(&b, `<title>Batches per job, newest on top: done (green), skipped as stale (grey), failed (red), waiting (light)</title>`)
	for i, j := range jobs {
		y := float64(i)*chartRowH + (chartRowH-chartBarH)/2
		x := chartLabel
		for _, part := range []struct {
			n     int
			class string
			what  string
		}{{j.BatchesDone, "bar-done", "done"}, {j.BatchesSkippedStale, "bar-stale", "skipped as stale"}, {j.BatchesFailed, "bar-fail", "failed"}, {j.Waiting(), "bar-wait", "waiting"}} {
			if part.n <= 0 {
				continue
			}
			w := float64(part.n) / float64(top) * (chartW - chartLabel)
			fmt.Fprintf(&b, `<rect class="%s" x="%.1f" y="%.1f" width="%.1f" height="%g"><title>job %s: %d %s</title></rect>`, part.class, x, y, w, chartBarH, template.HTMLEscapeString(j.ID), part.n, part.what)
			x += w
		}
		if j.Batches == 0 {
			fmt.Fprintf(&b, `<rect class="bar-empty" x="0" y="%.1f" width="2" height="%g"><title>job %s: no threads</title></rect>`, y, chartBarH, template.HTMLEscapeString(j.ID))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // numbers and escaped ids only
}

// bodyCost is the sentence a saved rule that reads bodies gets: at the
// Gmail price list in force a body read can cost a multiple of a metadata
// read, and applying the rule to old mail reads every thread's bodies.
func (e *rulesHandlers) bodyCost(spec rules.Spec) string {
	pr := google.MustPrices(google.DefaultPrices)
	if o := e.server.deps.Setup; o != nil && o.GmailPrices.Name != "" {
		pr = o.GmailPrices
	}
	if !spec.ReadsBodies() || pr.MessagesGetBody <= pr.MessagesGet {
		return ""
	}
	return fmt.Sprintf(" It reads message bodies: at Google's %s prices a body read costs %d Gmail units against %d for the headers, so applying it to old mail costs %s as much.",
		pr.Name, pr.MessagesGetBody, pr.MessagesGet, timesWord(pr.MessagesGetBody, pr.MessagesGet))
}

// timesWord says a/b in words: "three times", or "2.5 times".
func timesWord(a, b int) string {
	words := []string{2: "twice", 3: "three times", 4: "four times", 5: "five times"}
	if a%b == 0 && a/b < len(words) {
		return words[a/b]
	}
	return fmt.Sprintf("%.1f times", float64(a)/float64(b))
}
