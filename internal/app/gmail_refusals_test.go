package app_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/google"
	"mailroom/queue/rules"
)

// Issue 21: Google refuses one busy mailbox in the field's per-user shape
// (403 rateLimitExceeded in usageLimits, "Quota exceeded for quota metric
// 'Queries' and limit 'Queries per minute per user' …": elie222/inbox-zero
// issue 480) all along, while another account receives new mail that a
// rule labels. The refusals are the first account's alone: the other's
// labels arrive within 5 s (p99 over 25 messages), its budget and the
// project's stay at their settings, and only the refused account's budget
// shrinks. (Read as the project's, as before, each refusal blocked every
// account for Google's wait and shrank the project's budget to 1%.)
func TestOneAccountRefusedLeavesTheOthersAlone(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
	}))
	const busy, other = "busy@example.com", "bob@example.com"
	busyUser, otherUser := createUser(ta, "busy-owner@example.com"), createUser(ta, "bob-owner@example.com")
	for _, email := range []string{busy, other} {
		fake.AddAccount(email)
		storyThreads(t, fake, email, 10)
	}
	busyID := seedAccount(t, ta, fake, busyUser, busy)
	otherID := seedAccount(t, ta, fake, otherUser, other)
	spec := rules.Spec{Label: "Deploys", Match: "any", Conditions: []rules.Condition{{Field: "subject", Op: "contains", Value: "deploy-7f3a"}}}
	ta.JSON(http.MethodPost, "/api/v1/users/"+otherUser+"/rules", spec, http.StatusCreated, nil)
	testkit.Eventually(t, 30*time.Second, "the rule's reclassify to end", func() bool {
		st := reclassify(ta, otherUser)
		return st.Pending == nil && len(st.Jobs) == 1 && st.Jobs[0].FinishedAt != nil
	})

	refusal, err := fake.InjectFault(googlefake.Fault{Account: busy, Refusal: googlefake.RefusalQueriesPerUser})
	if err != nil {
		t.Fatal(err)
	}
	// The busy account is refused from here on: new mail keeps it calling.
	mail := func(to, subject string) string {
		t.Helper()
		id, err := fake.Gmail.AddMessage(to, googlefake.Message{From: "ci@example.com", To: to, Subject: subject, Body: "build finished"})
		if err != nil {
			t.Fatal(err)
		}
		if st := push(ta, fake, to, fake.Gmail.HistoryID(to)); st != http.StatusNoContent {
			t.Fatalf("push for %s: %d", to, st)
		}
		return id
	}
	mail(busy, "deploy-7f3a started")
	testkit.Eventually(t, 10*time.Second, "Google to refuse the busy account", func() bool { return refusal.Fired() > 0 })

	// One message to each account every 600 ms, 15 s in all: the busy
	// account is refused again each time Google's wait (5 s) has passed.
	const messages = 25
	var took []time.Duration
	fired := make([]int, 0, messages)
	pace := time.NewTicker(600 * time.Millisecond)
	defer pace.Stop()
	for range messages {
		<-pace.C
		mail(busy, "deploy-7f3a again")
		id := mail(other, "deploy-7f3a finished")
		pushed := time.Now()
		labelID := ""
		testkit.Eventually(t, 30*time.Second, "the other account's new message to be labelled", func() bool {
			if labelID == "" {
				labelID, _ = fake.Gmail.LabelID(other, "Deploys")
			}
			m, _ := fake.Gmail.Message(other, id)
			return labelID != "" && slices.Contains(m.LabelIDs, labelID)
		})
		took = append(took, time.Since(pushed))
		fired = append(fired, refusal.Fired())
	}
	slices.Sort(took)
	p99 := took[(99*len(took)+99)/100-1]
	t.Logf("the other account's labels after their pushes: median %s, p99 %s; Google refused the busy account %d times",
		took[len(took)/2].Round(time.Millisecond), p99.Round(time.Millisecond), refusal.Fired())
	if p99 > 5*time.Second {
		t.Errorf("p99 from a push to the rule's label on the other account = %s, want at most 5 s while another account is refused", p99)
	}
	if half := fired[messages/2-1]; fired[messages-1] <= half || half <= fired[0] {
		t.Errorf("Google refused the busy account %v times after each message, want it refused all along", fired)
	}

	ctx := context.Background()
	o, err := ta.Gmail().Quota(ctx, otherID)
	if err != nil {
		t.Fatal(err)
	}
	if o.Limit != o.Setting || o.ProjectLimit != google.DefaultProjectUnitsPerMinute || o.BlockedUntil != nil {
		t.Errorf("the other account's quota = %+v, want its budget at its setting, the project's at %d, nothing blocked",
			o, google.DefaultProjectUnitsPerMinute)
	}
	b, err := ta.Gmail().Quota(ctx, busyID)
	if err != nil {
		t.Fatal(err)
	}
	if b.Limit >= b.Setting {
		t.Errorf("the busy account's quota = %+v, want its own budget shrunk by Google's refusals", b)
	}
}
