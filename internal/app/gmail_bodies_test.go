package app_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/google"
	"mailroom/queue/rules"
)

// Issue 33: with a rule on the body in force when an account connects, the
// full sync reads each message once, with its body (a messages.get of
// format full, 60 units at the 2026 prices), and its label pass reads no
// body again (before, a metadata read in the full sync and a body read in
// the pass: 80 units a message). The label lands on exactly the messages
// whose body matches.
func TestFullSyncReadsEachBodyOnce(t *testing.T) {
	t.Parallel()
	fake, ta, userID := quotaApp(t, 3*time.Second)
	storyThreads(t, fake, gmailAddr, 80) // 96 messages, threads of one and two
	var want []string
	for i := range 12 {
		id, err := fake.Gmail.AddMessage(gmailAddr, googlefake.Message{From: "ci@example.com", To: gmailAddr,
			Subject: fmt.Sprint("build ", i), Body: fmt.Sprintf("build %d: deploy-7f3a finished", i)})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	size := len(fake.Gmail.Messages(gmailAddr))
	spec := rules.Spec{Label: "Deploys", Match: "any", Conditions: []rules.Condition{{Field: "body", Op: "contains", Value: "deploy-7f3a"}}}
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", spec, http.StatusCreated, nil)
	connectAccount(ta, fake, userID, gmailAddr)

	slices.Sort(want)
	testkit.Eventually(t, 60*time.Second, "the full sync's label pass to finish", func() bool {
		st := reclassify(ta, userID)
		got := labelled(fake, gmailAddr, "Deploys")
		slices.Sort(got)
		return st.Pending == nil && len(st.Jobs) > 0 && st.Jobs[0].FinishedAt != nil && slices.Equal(got, want)
	})
	pr := google.MustPrices(google.Prices2026)
	units := fake.Gmail.QuotaUnitsByMethod(gmailAddr)
	if got := units[googlefake.MethodMessagesGet]; got != size*pr.MessagesGetBody || units[googlefake.MethodThreadsGet] != 0 {
		t.Errorf("messages.get cost %d units and threads.get %d for %d messages; want each message read once with its body (%d units) and no thread read",
			got, units[googlefake.MethodThreadsGet], size, size*pr.MessagesGetBody)
	}
}
