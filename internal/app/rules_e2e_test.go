package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/bench/story"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/rules"
)

func storyThreads(t testing.TB, fake *googlefake.Server, email string, threads int) {
	t.Helper()
	if err := story.AddThreads(fake, email, threads); err != nil {
		t.Fatal(err)
	}
}

func seedAccount(t testing.TB, ta *apptest.App, fake *googlefake.Server, userID, email string) string {
	t.Helper()
	refresh := fake.AddAccount(email)
	id, err := story.SeedMirror(ta.DB(), userID, email, refresh, fake.Gmail.Messages(email), fake.Gmail.LabelNames(email), fake.Gmail.HistoryID(email))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// labelled returns the emulator's messages that carry the label name.
func labelled(fake *googlefake.Server, email, name string) []string {
	id, ok := fake.Gmail.LabelID(email, name)
	var out []string
	for _, m := range fake.Gmail.Messages(email) {
		if ok && slices.Contains(m.LabelIDs, id) {
			out = append(out, m.ID)
		}
	}
	return out
}

// matching returns the emulator's messages that spec matches.
func matching(t testing.TB, fake *googlefake.Server, email string, spec rules.Spec) []string {
	t.Helper()
	c, err := rules.Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range fake.Gmail.Messages(email) {
		if c.Match(&rules.Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: m.Body}) {
			out = append(out, m.ID)
		}
	}
	return out
}

type reclassifyStatus struct {
	Pending *struct {
		RuleIDs []string  `json:"ruleIds"`
		FiresAt time.Time `json:"firesAt"`
	} `json:"pending"`
	Jobs []struct {
		JobID               string     `json:"jobId"`
		RuleIDs             []string   `json:"ruleIds"`
		State               string     `json:"state"`
		Batches             int        `json:"batches"`
		BatchesDone         int        `json:"batchesDone"`
		BatchesSkippedStale int        `json:"batchesSkippedStale"`
		ThreadsLabeled      int        `json:"threadsLabeled"`
		FinishedAt          *time.Time `json:"finishedAt"`
	} `json:"jobs"`
}

func reclassify(ta *apptest.App, userID string) reclassifyStatus {
	ta.T().Helper()
	var st reclassifyStatus
	ta.JSON(http.MethodGet, "/api/v1/users/"+userID+"/reclassify", nil, http.StatusOK, &st)
	return st
}

// TestRuleSaveStory is story 1 of DESIGN.md against the emulator, time
// compressed 100x: 3,000 threads, five saves of one rule 12 s apart (120
// ms here) with a 60 s debounce (600 ms): exactly one publish of 60
// batches, the labels in Gmail equal to the last version's matches
// message by message, and the 21st save in a window refused with 429.
func TestRuleSaveStory(t *testing.T) {
	t.Parallel()
	// Time is compressed 100x, Gmail's quota minute with it (emulator and
	// budget alike): the reclassify's 60 batches spend about 3,000 of the
	// account's 6,000 units.
	fake := googlefake.StartForTest(t, googlefake.Options{GmailQuotaWindow: 600 * time.Millisecond})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.ReclassifyDebounce = 600 * time.Millisecond
		cfg.ReclassifyMaxWait = 6 * time.Second
		cfg.ReclassifyTick = 100 * time.Millisecond
		cfg.GmailQuotaWindow = 600 * time.Millisecond
	}))
	userID := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 3000)
	seedAccount(t, ta, fake, userID, gmailAddr)

	versions := []string{"@github.co", "github.com", "@github.com>", "notifications+", "@github.com"}
	var ruleID string
	start := time.Now()
	for i, v := range versions {
		body := map[string]any{"label": "GitHub", "match": "all", "conditions": []map[string]string{{"field": "from", "op": "contains", "value": v}}}
		var saved struct {
			Rule       struct{ ID string }
			Reclassify struct {
				State   string
				FiresAt time.Time
			}
		}
		if i == 0 {
			ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", body, http.StatusCreated, &saved)
			ruleID = saved.Rule.ID
		} else {
			ta.JSON(http.MethodPut, "/api/v1/rules/"+ruleID, body, http.StatusOK, &saved)
		}
		if saved.Reclassify.State != "pending" || saved.Reclassify.FiresAt.Before(time.Now()) {
			t.Fatalf("save %d: reclassify %+v", i+1, saved.Reclassify)
		}
		if st := reclassify(ta, userID); len(st.Jobs) != 0 {
			t.Fatalf("a job was published %s after the first save, while the user was still editing", time.Since(start))
		}
		time.Sleep(120 * time.Millisecond)
	}
	last := rules.Spec{Label: "GitHub", Match: "all", Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@github.com"}}}

	var st reclassifyStatus
	testkit.Eventually(t, 60*time.Second, "the reclassify to finish", func() bool {
		st = reclassify(ta, userID)
		return len(st.Jobs) > 0 && st.Jobs[0].FinishedAt != nil
	})
	if len(st.Jobs) != 1 || st.Pending != nil {
		t.Fatalf("want exactly one publish: %+v", st)
	}
	j := st.Jobs[0]
	if j.Batches != 60 || j.BatchesDone != 60 || j.BatchesSkippedStale != 0 || j.State != "done" || j.ThreadsLabeled != 1000 {
		t.Fatalf("job %+v: want 60 batches, all done, 1,000 threads labelled", j)
	}
	want, got := matching(t, fake, gmailAddr, last), labelled(fake, gmailAddr, "GitHub")
	slices.Sort(want)
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" || len(want) != 1000 {
		t.Fatalf("labels in Gmail (-want +got), %d wanted:\n%s", len(want), diff)
	}
	metrics := scrapeMetrics(ta)
	for series, value := range map[string]float64{
		`mailroom_reclassify_publishes_total`:                   1,
		`mailroom_reclassify_batches_total{outcome="run"}`:      60,
		`mailroom_reclassify_batches_total{outcome="stale"}`:    0,
		`mailroom_rule_saves_total{outcome="accepted"}`:         5,
		`mailroom_reclassify_threads_total{change="labeled"}`:   1000,
		`mailroom_reclassify_threads_total{change="unlabeled"}`: 0,
	} {
		if metrics[series] != value {
			t.Errorf("%s = %v, want %v", series, metrics[series], value)
		}
	}

	// The limit: 20 saves a minute; 15 more pass, the 21st is refused.
	for i := range 15 {
		body := map[string]any{"label": fmt.Sprintf("Other %d", i), "conditions": []map[string]string{{"field": "subject", "op": "contains", "value": "x"}}}
		ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", body, http.StatusCreated, nil)
	}
	status, raw := ta.Do(http.MethodPost, "/api/v1/users/"+userID+"/rules", map[string]any{"label": "21st", "conditions": []map[string]string{{"field": "to", "op": "contains", "value": "x"}}})
	if status != http.StatusTooManyRequests {
		t.Fatalf("21st save: %d %s", status, raw)
	}
	var e struct {
		Error struct{ Code, Message string }
	}
	if json.Unmarshal(raw, &e) != nil || e.Error.Code != "rate_limited" {
		t.Fatalf("21st save answer %s", raw)
	}
	if m := scrapeMetrics(ta); m[`mailroom_rule_saves_total{outcome="rate_limited"}`] != 1 {
		t.Errorf("refused saves metric %v", m[`mailroom_rule_saves_total{outcome="rate_limited"}`])
	}
}

// TestRulesApplyToNewMail: a rule labels mail that arrives after it, through
// push, sync and message-added, and records it so that the next change of
// the rule takes the label off again; a label a person applied stays.
func TestRulesApplyToNewMail(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
	}))
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 12)
	// A person made the label and put it on a GitLab message by hand.
	dev, err := fake.Gmail.CreateLabel(gmailAddr, "Dev")
	if err != nil {
		t.Fatal(err)
	}
	hand := ""
	for _, m := range fake.Gmail.Messages(gmailAddr) {
		if hand == "" && slices.Contains([]string{"CI 1 <ci1@gitlab.com>"}, m.From) {
			hand = m.ID
		}
	}
	if err := fake.Gmail.AddLabels(gmailAddr, hand, dev); err != nil {
		t.Fatal(err)
	}
	userID := createUser(ta, "owner@example.com")
	acc := connectAccount(ta, fake, userID, gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)

	v1 := rules.Spec{Label: "Dev", Match: "all", Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@github.com"}},
		Actions: rules.Actions{MarkRead: true}}
	var saved struct{ Rule struct{ ID string } }
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", v1, http.StatusCreated, &saved)
	testkit.Eventually(t, 20*time.Second, "the first reclassify", func() bool {
		st := reclassify(ta, userID)
		return len(st.Jobs) == 1 && st.Jobs[0].FinishedAt != nil
	})
	set := func(ids ...[]string) map[string]bool {
		out := map[string]bool{}
		for _, l := range ids {
			for _, id := range l {
				out[id] = true
			}
		}
		return out
	}
	if diff := cmp.Diff(set(matching(t, fake, gmailAddr, v1), []string{hand}), set(labelled(fake, gmailAddr, "Dev"))); diff != "" {
		t.Fatalf("after the reclassify (-want +got):\n%s", diff)
	}

	// New mail from GitHub: labelled (and marked read) on arrival.
	id, err := fake.Gmail.AddMessage(gmailAddr, googlefake.Message{From: "GitHub <noreply@github.com>", To: gmailAddr, Subject: "new", Body: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)); st != http.StatusNoContent {
		t.Fatalf("push: %d", st)
	}
	testkit.Eventually(t, 20*time.Second, "the new message to be labelled", func() bool {
		m, _ := fake.Gmail.Message(gmailAddr, id)
		return slices.Contains(m.LabelIDs, dev) && !m.Unread()
	})
	// Once Gmail's history brings the rule's change into the mirror, it is
	// one message.labeled event, the rule's, and never Gmail's too.
	if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)); st != http.StatusNoContent {
		t.Fatalf("push: %d", st)
	}
	var by []string
	testkit.Eventually(t, 20*time.Second, "the rule's label as an event", func() bool {
		by = labeledBy(ta, userID, id, "Dev")
		return len(by) > 0
	})
	if want := []string{"rule " + saved.Rule.ID}; !slices.Equal(by, want) {
		t.Errorf("message.labeled events adding Dev to the new message: %v, want %v", by, want)
	}

	// The rule changes to match nothing: every label it applied goes (the
	// new mail's too); the hand-applied one stays.
	v2 := v1
	v2.Conditions = []rules.Condition{{Field: "subject", Op: "equals", Value: "no such subject"}}
	ta.JSON(http.MethodPut, "/api/v1/rules/"+saved.Rule.ID, v2, http.StatusOK, nil)
	testkit.Eventually(t, 20*time.Second, "the second reclassify", func() bool {
		st := reclassify(ta, userID)
		return len(st.Jobs) == 2 && st.Jobs[0].FinishedAt != nil
	})
	if got := labelled(fake, gmailAddr, "Dev"); !slices.Equal(got, []string{hand}) {
		t.Fatalf("labelled %v, want only the hand-applied %s", got, hand)
	}
	if done := feed(ta, "&types=reclassify.done&userId="+userID); len(done) != 2 {
		t.Errorf("%d reclassify.done events, want one per job (2)", len(done))
	} // Sync, events, the rules on new mail and both reclassifies spent every
	// Gmail unit from the budget.
	budgetCoversGmail(ta, fake, true)
}

// scrapeMetrics reads /metrics into series → value.
func scrapeMetrics(ta *apptest.App) map[string]float64 {
	ta.T().Helper()
	resp, err := http.Get(ta.URL + "/metrics")
	if err != nil {
		ta.T().Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		ta.T().Fatal(err)
	}
	return parseMetrics(string(raw))
}

// parseMetrics reads a /metrics answer into series → value.
func parseMetrics(raw string) map[string]float64 {
	out := map[string]float64{}
	for _, line := range strings.Split(raw, "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestRulesApplyAfterFullSync: an account connected after its user made a
// rule gets the rule's labels on the mail its full sync brings in (which
// never passes message-added): the full sync schedules a reclassify, due at
// once (no save of the user waits), which does not count as a save. The
// emulator pushes every change as Gmail does, so the reclassify's own label
// changes, made in Gmail right as the full sync ends, reach the mirror
// (without pushes and with polls an hour apart, nothing would read them).
func TestRulesApplyAfterFullSync(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
	}))
	fake.SetPushURL(ta.URL + "/push/gmail")
	userID := createUser(ta, "owner@example.com")
	spec := rules.Spec{Label: "Dev", Match: "all", Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@github.com"}}}
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", spec, http.StatusCreated, nil)
	testkit.Eventually(t, 20*time.Second, "the save's reclassify (no account yet)", func() bool {
		st := reclassify(ta, userID)
		return len(st.Jobs) == 1 && st.Jobs[0].FinishedAt != nil
	})

	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 30)
	acc := connectAccount(ta, fake, userID, gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)
	want := matching(t, fake, gmailAddr, spec)
	slices.Sort(want)
	testkit.Eventually(t, 20*time.Second, "the rule's labels on the synced mail", func() bool {
		got := labelled(fake, gmailAddr, "Dev")
		slices.Sort(got)
		return len(want) > 0 && slices.Equal(want, got)
	})
	// The labels reach Gmail before the batch's bookkeeping commits: wait
	// for the job to finish before reading its counts.
	testkit.Eventually(t, 20*time.Second, "the full sync's reclassify job to finish", func() bool {
		st := reclassify(ta, userID)
		return len(st.Jobs) == 2 && st.Jobs[0].FinishedAt != nil
	})
	st := reclassify(ta, userID)
	if st.Jobs[0].ThreadsLabeled == 0 {
		t.Fatalf("reclassify %+v: want the second job, after the full sync, to have labelled threads", st)
	}
	if m := scrapeMetrics(ta); m[`mailroom_rule_saves_total{outcome="accepted"}`] != 1 {
		t.Errorf("accepted saves %v, want 1: the full sync's reclassify is not a save", m[`mailroom_rule_saves_total{outcome="accepted"}`])
	} // The label's creation (labels.create) spent from the budget too.
	if fake.Gmail.QuotaUnitsByMethod(gmailAddr)[googlefake.MethodLabelsCreate] == 0 {
		t.Error("no labels.create call: the budget check below does not cover it")
	}
	budgetCoversGmail(ta, fake, true)
}

// labeledBy lists who (by and ruleId) added label to message id, over the
// user's message.labeled events.
func labeledBy(ta *apptest.App, userID, id, label string) []string {
	ta.T().Helper()
	var out []string
	for _, e := range feed(ta, "&types=message.labeled&userId="+userID) {
		var d struct {
			MessageID, By, RuleID string
			Added                 []string
		}
		if err := json.Unmarshal(e.Data, &d); err != nil {
			ta.T().Fatal(err)
		}
		if d.MessageID == id && slices.Contains(d.Added, label) {
			out = append(out, strings.TrimSpace(d.By+" "+d.RuleID))
		}
	}
	return out
}
