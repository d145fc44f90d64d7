package app_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/rules"
)

// Issue 21: a full sync hands its result to the rules once. A new user
// connects a mailbox of 2,500 messages and saves three rules while its
// full sync runs. The rule saves publish no batch over the syncing
// account; the job the full sync's end schedules carries all three rules
// and labels the mailbox in one pass: one job with batches, as many as
// the account's threads need, and each rule's label on exactly the
// messages it matches. The full sync fetches each message once (one
// threads.get a thread of two or more, one messages.get a lone message).
// Gmail's minute is compressed to 1 s, emulator and budget alike.
func TestFullSyncHandsItsMailToTheRulesOnce(t *testing.T) {
	t.Parallel()
	fake, ta, userID := quotaApp(t, time.Second)
	if _, err := fake.Gmail.Generate(gmailAddr, 2500, 10); err != nil {
		t.Fatal(err)
	}
	threads := map[string]int{}
	for _, m := range fake.Gmail.Messages(gmailAddr) {
		threads[m.ThreadID]++
	}
	acc := connectAccount(ta, fake, userID, gmailAddr)
	testkit.Eventually(t, 30*time.Second, "the full sync to be under way", func() bool {
		_, begun := fullSyncDue(t, ta, acc.ID)
		return begun && fake.Calls(googlefake.MethodThreadsGet) >= 20
	})
	specs := []rules.Spec{
		{Label: "Replies", Match: "any", Conditions: []rules.Condition{{Field: "subject", Op: "contains", Value: "Re:"}}},
		{Label: "Acme", Match: "any", Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "@acme.example"}}},
		{Label: "GitHub", Match: "any", Conditions: []rules.Condition{{Field: "from", Op: "contains", Value: "github.example"}}},
	}
	for _, s := range specs {
		ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", s, http.StatusCreated, nil)
	}
	if due, _ := fullSyncDue(t, ta, acc.ID); !due {
		t.Fatal("the full sync ended before the rules were saved: the test did not overlap them")
	}
	testkit.Eventually(t, 120*time.Second, "the full sync and every reclassify to end", func() bool {
		due, _ := fullSyncDue(t, ta, acc.ID)
		st := reclassify(ta, userID)
		if due || st.Pending != nil || len(st.Jobs) == 0 {
			return false
		}
		for _, j := range st.Jobs {
			if j.FinishedAt == nil {
				return false
			}
		}
		return true
	})
	st := reclassify(ta, userID)
	var passes []int
	for _, j := range st.Jobs {
		if j.Batches > 0 {
			passes = append(passes, j.Batches)
			if len(j.RuleIDs) != len(specs) {
				t.Errorf("the label pass carries %d rules, want all %d", len(j.RuleIDs), len(specs))
			}
		}
	}
	if want := (len(threads) + 49) / 50; len(passes) != 1 || passes[0] != want {
		t.Fatalf("label passes over the account (batches each): %v; want one of %d (%d threads by 50)", passes, want, len(threads))
	}
	for _, s := range specs {
		want, got := matching(t, fake, gmailAddr, s), labelled(fake, gmailAddr, s.Label)
		slices.Sort(want)
		slices.Sort(got)
		if len(want) == 0 {
			t.Errorf("rule %s matches nothing: the test proves nothing for it", s.Label)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("messages labelled %s (-matching +labelled):\n%s", s.Label, diff)
		}
	}
	multi := 0
	for _, n := range threads {
		if n > 1 {
			multi++
		}
	}
	if got := fake.Calls(googlefake.MethodThreadsGet); got != multi {
		t.Errorf("%d threads.get for %d threads of two or more", got, multi)
	}
	t.Logf("2,500 messages in %d threads (%d of two or more): Gmail units by method %v", len(threads), multi, fake.Gmail.QuotaUnitsByMethod(gmailAddr))
}
