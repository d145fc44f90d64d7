package app_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mailroom/internal/bench/story"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/rules"
)

// TestRulesCrashBetweenLabelWriteAndBookkeeping kills the binary with
// SIGKILL exactly after a reclassify's first batchModify landed in Gmail
// and before mailroom heard back (the label writer's call of up to 1,000
// ids): after the restart on the same data dir the job finishes, done only
// once its labels are in Gmail, and the labels are exactly the rules'
// matches: no change lost, none made twice with another effect.
func TestRulesCrashBetweenLabelWriteAndBookkeeping(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	fake := googlefake.New(googlefake.Options{GmailQuotaWindow: 2 * time.Second})
	var killer atomic.Pointer[func()]
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/batchModify") {
			if kill := killer.Swap(nil); kill != nil {
				fake.Handler().ServeHTTP(httptest.NewRecorder(), r) // the labels land
				(*kill)()                                           // kill -9 before the answer
				panic(http.ErrAbortHandler)
			}
		}
		fake.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	url := hs.URL + "/"
	fake.SetBaseURL(url)
	refresh := fake.AddAccount(gmailAddr)
	if err := story.AddThreads(fake, gmailAddr, 1500); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	env := []string{
		"MAILROOM_GOOGLE_API_URL=" + url, "MAILROOM_GOOGLE_TOKEN_URL=" + url + "token",
		"MAILROOM_GMAIL_POLL_INTERVAL=1h", "MAILROOM_GMAIL_QUOTA_WINDOW=2s",
		"MAILROOM_RECLASSIFY_DEBOUNCE=200ms", "MAILROOM_RECLASSIFY_MAX_WAIT=1s", "MAILROOM_RECLASSIFY_TICK=100ms",
		"MAILROOM_DELAYED_CHECK_INTERVAL=100ms", "MAILROOM_RETRY_INITIAL=100ms", "MAILROOM_RETRY_MAX=500ms",
	}
	p := startProc(t, dir, env...)
	var user struct{ ID string }
	p.call(http.MethodPost, "/api/v1/users", map[string]string{"email": "owner@example.com", "name": "Owner"}, http.StatusCreated, &user)
	var acc gmailTestAccount
	p.call(http.MethodPost, "/api/v1/accounts", map[string]string{"userId": user.ID, "email": gmailAddr, "refreshToken": refresh}, http.StatusCreated, &acc)
	testkit.Eventually(t, 60*time.Second, "the first full sync", func() bool {
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &a)
		return a.Status == "ready"
	})

	specs := []rules.Spec{
		{Label: "GitHub", Match: rules.MatchAll, Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@github.com"}}},
		{Label: "Repo1", Match: rules.MatchAll, Conditions: []rules.Condition{{Field: "subject", Op: "contains", Value: "[repo-1]"}}},
	}
	kill := func() { p.Kill9() }
	killer.Store(&kill)
	before := fake.Calls(googlefake.MethodMessagesBatchModify)
	for _, s := range specs {
		p.call(http.MethodPost, "/api/v1/users/"+user.ID+"/rules", s, http.StatusCreated, nil)
	}
	testkit.Eventually(t, 60*time.Second, "the child to die on its label write", func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	})
	if killer.Load() != nil || fake.Calls(googlefake.MethodMessagesBatchModify) == before {
		t.Fatal("no batchModify reached the emulator")
	}

	p = startProc(t, dir, env...)
	var st reclassifyStatus
	testkit.Eventually(t, 60*time.Second, "the reclassify to finish after the restart", func() bool {
		p.call(http.MethodGet, "/api/v1/users/"+user.ID+"/reclassify", nil, http.StatusOK, &st)
		if len(st.Jobs) == 0 {
			return false
		}
		for _, j := range st.Jobs {
			if j.FinishedAt == nil {
				return false
			}
		}
		return true
	})
	for _, s := range specs {
		want, got := matching(t, fake, gmailAddr, s), labelled(fake, gmailAddr, s.Label)
		slices.Sort(want)
		slices.Sort(got)
		if len(want) == 0 || !slices.Equal(want, got) {
			t.Errorf("label %q: %d messages labelled in Gmail, want its %d matches", s.Label, len(got), len(want))
		}
	}
	for _, j := range st.Jobs {
		if j.State != rules.JobDone && j.State != rules.JobSuperseded {
			t.Errorf("job %s is %s after the restart", j.JobID, j.State)
		}
	}
}
