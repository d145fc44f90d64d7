package app_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/google"
	"mailroom/queue/rules"
	"mailroom/store"
)

// budgetCoversGmail checks that every Gmail unit Google (the emulator)
// counted was spent from mailroom's budget (mailroom_gmail_quota_units_total):
// a call site that went around the budget makes Google's count the larger
// for good. It waits a moment for calls still in flight. With exact, the
// two must be equal (no call was granted and then given up); without, the
// budget may have spent more (a full sync's fetchers cancelled by a quota
// wait give up calls they were granted).
func budgetCoversGmail(ta *apptest.App, fake *googlefake.Server, exact bool) {
	ta.T().Helper()
	testkit.EventuallyNil(ta.T(), 5*time.Second, "the budget's units to cover Google's count", func() error {
		google, budget := float64(fake.Gmail.TotalQuotaUnits()), scrapeMetrics(ta)["mailroom_gmail_quota_units_total"]
		if google > 0 && (google == budget || !exact && google < budget) {
			return nil
		}
		return fmt.Errorf("Google counted %v Gmail units, mailroom's budget spent %v: a Gmail call went around the budget", google, budget)
	})
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		ta.T().Errorf("Google refused %d calls for quota under mailroom's budget", r)
	}
}

// The Gmail settings reach the budget: a lower per-account limit holds the
// app's calls to it, and the account API shows the account's use.
func TestGmailQuotaSettings(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) { cfg.GmailUserUnits = 150 }))
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 40) // more than 150 units of gets
	userID := createUser(ta, "owner@example.com")
	acc := connectAccount(ta, fake, userID, gmailAddr)
	var v struct {
		GmailQuota struct {
			UnitsLastMinute, Limit, Setting int
			QueuedUnits, QueuedMinutes      int
			Waiting                         []string
			Status                          string
		}
	}
	// The watch (100 units, live) comes first; the full sync's work is paced
	// at the account's rate behind it (about 40 s at 150 units a minute), so
	// the full sync begins, and its downloads are known, a little later.
	// The accounts page is read in the same look: it shows the state at its
	// own moment, and the wait comes and goes between calls' turns.
	admin := adminClient(ta)
	pageWaits := false
	testkit.Eventually(t, 90*time.Second, "the account to wait for quota with its full sync begun", func() bool {
		ta.JSON("GET", "/api/v1/accounts/"+acc.ID, nil, 200, &v)
		if len(v.GmailQuota.Waiting) == 0 || v.GmailQuota.QueuedUnits == 0 {
			return false
		}
		_, body := getPage(t, admin, ta.URL+"/admin/accounts")
		pageWaits = pageWaits || strings.Contains(body, "waiting for Gmail quota: about ") && strings.Contains(body, " of work queued (bulk waiting")
		return pageWaits
	})
	if q := v.GmailQuota; q.Setting != 150 || q.UnitsLastMinute > 150 || q.Status == "" {
		t.Errorf("gmailQuota = %+v, want the 150 setting, at most 150 units and a status", q)
	}
	// 48 messages to download at 5 units, a minute at most done: more
	// than one minute of 150 units is queued.
	if q := v.GmailQuota; q.QueuedUnits < 150 || q.QueuedMinutes < 2 ||
		!strings.Contains(q.Status, fmt.Sprintf("waiting for Gmail quota: about %d minutes of work queued", q.QueuedMinutes)) {
		t.Errorf("gmailQuota = %+v, want the full sync's downloads left in minutes of the budget", q)
	}
	if u := fake.Gmail.PeakProjectUnits(); u > 150 {
		t.Errorf("Google counted %d units in a minute; the setting is 150", u)
	}
	budgetCoversGmail(ta, fake, false)
	m := scrapeMetrics(ta)
	for _, series := range []string{`mailroom_google_rate_limited_total{api="gmail"}`, `mailroom_google_rate_limited_total{api="sheets"}`} {
		if v, ok := m[series]; !ok || v != 0 {
			t.Errorf("%s = %v (present %v), want 0: the budget kept Google from refusing", series, v, ok)
		}
	}
}

// While a reclassify whose rule reads bodies (5 units a message) spends the
// account's quota minute after minute, a new matching message gets its
// label within two quota minutes, not after the reclassify, and Google
// refuses nothing. Gmail's minute is compressed to 3 s (emulator and budget
// alike). (At this scale the window frees units every bucket, so the live
// calls get through quickly even without priorities: TestBudgetPriorities
// in queue/google is the test of the order itself.)
func TestNewMailIsLabelledWhileAReclassifyRuns(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	fake, ta, userID := quotaApp(t, window)
	storyThreads(t, fake, gmailAddr, 1500)
	seedAccount(t, ta, fake, userID, gmailAddr)
	// A rule on the body: the reclassify downloads every message again,
	// several minutes of the account's quota.
	spec := rules.Spec{Label: "Deploys", Match: "any", Conditions: []rules.Condition{{Field: "body", Op: "contains", Value: "deploy-7f3a"}}}
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", spec, http.StatusCreated, nil)
	testkit.Eventually(t, 20*time.Second, "the reclassify to be under way", func() bool {
		st := reclassify(ta, userID)
		return len(st.Jobs) == 1 && st.Jobs[0].BatchesDone > 0
	})
	// Let the reclassify fill the window first.
	time.Sleep(window)

	took := pushDeployAndWaitForLabel(t, ta, fake, window)
	st := reclassify(ta, userID)
	if st.Jobs[0].FinishedAt != nil {
		t.Fatalf("the reclassify finished first (%+v): the test did not overlap them", st.Jobs[0])
	}
	if took > 2*window {
		t.Errorf("the new message took %s to be labelled during the reclassify, want within two quota minutes (%s)", took, 2*window)
	}
	t.Logf("labelled %s after its push; reclassify at %d of %d batches", took.Round(time.Millisecond), st.Jobs[0].BatchesDone, st.Jobs[0].Batches)
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d calls", r)
	}
}

// quotaApp starts the emulator (Google's prices in force, its mailbox
// gmailAddr empty) and the app, Gmail's minute compressed to window on
// both sides and the rules' debounce and tick short, and creates the
// owner; it returns the owner's id.
func quotaApp(t *testing.T, window time.Duration) (*googlefake.Server, *apptest.App, string) {
	t.Helper()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaWindow: window})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.GmailQuotaWindow = window
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
	}))
	userID := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	return fake, ta, userID
}

// fullSyncDue reports whether the account's full sync has not ended (read
// from bbolt: the API shows only the status).
func fullSyncDue(t *testing.T, ta *apptest.App, accountID string) (due, begun bool) {
	t.Helper()
	var acc store.Account
	if err := ta.DB().View(func(tx *store.Tx) (err error) { acc, err = tx.AccountGet(accountID); return err }); err != nil {
		t.Fatal(err)
	}
	return acc.FullSyncCompleted < acc.FullSyncRequested, acc.FullSyncStart != nil
}

// Issue 12: a new message that matches a rule gets its label within
// seconds even while a large reclassify and a full sync share its account.
// A rule on the body is saved (a reclassify that downloads every message
// again); once it is under way, the account (3,000 messages) is resynced
// (a rule saved during a full sync waits for its end, issue 21, so the
// reclassify comes first); once both spend the account's quota, a
// matching message arrives. Its label comes within two quota minutes,
// before the full sync and the reclassify end, with the strict emulator
// and the real budget (Gmail's minute compressed to 3 s, emulator and
// budget alike, at the 2025 price list on both sides so that the body
// reads of 3,000 messages take a few windows, not forty). At the end the
// mirror equals the mailbox.
func TestNewMailIsLabelledDuringAFullSync(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaWindow: window,
		GmailQuotaPrices: googlefake.GmailPrices2025, GmailUserUnitsPerMinute: 6000})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.GmailQuotaWindow, cfg.GmailQuotaPrices, cfg.GmailUserUnits = window, google.Prices2025, 6000
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
	}))
	userID := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 2500) // 3,000 messages: a reclassify of several quota minutes
	accID := seedAccount(t, ta, fake, userID, gmailAddr)

	spec := rules.Spec{Label: "Deploys", Match: "any", Conditions: []rules.Condition{{Field: "body", Op: "contains", Value: "deploy-7f3a"}}}
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", spec, http.StatusCreated, nil)
	testkit.Eventually(t, 20*time.Second, "the reclassify to be under way", func() bool {
		st := reclassify(ta, userID)
		return len(st.Jobs) == 1 && st.Jobs[0].BatchesDone > 0
	})
	gets := fake.Calls(googlefake.MethodMessagesGet) + fake.Calls(googlefake.MethodThreadsGet)
	ta.JSON(http.MethodPost, "/api/v1/accounts/"+accID+"/resync", nil, http.StatusAccepted, nil)
	testkit.Eventually(t, 30*time.Second, "the full sync to be under way", func() bool {
		_, begun := fullSyncDue(t, ta, accID)
		return begun && fake.Calls(googlefake.MethodMessagesGet)+fake.Calls(googlefake.MethodThreadsGet) >= gets+100
	})
	time.Sleep(window) // both fill the account's window

	took := pushDeployAndWaitForLabel(t, ta, fake, window)
	if due, _ := fullSyncDue(t, ta, accID); !due {
		t.Fatal("the full sync ended before the new message was labelled: live mail waited behind it")
	}
	st := reclassify(ta, userID)
	if st.Jobs[0].FinishedAt != nil {
		t.Fatalf("the reclassify finished first (%+v): the test did not overlap them", st.Jobs[0])
	}
	if took > 2*window {
		t.Errorf("the new message took %s to be labelled during the full sync and the reclassify, want within two quota minutes (%s)", took, 2*window)
	}
	t.Logf("labelled %s after its push; reclassify at %d of %d batches; %d downloads so far",
		took.Round(time.Millisecond), st.Jobs[0].BatchesDone, st.Jobs[0].Batches, fake.Calls(googlefake.MethodMessagesGet))

	// Everything ends, and the mirror is the mailbox.
	testkit.Eventually(t, 120*time.Second, "the full sync and every reclassify to end", func() bool {
		due, _ := fullSyncDue(t, ta, accID)
		st := reclassify(ta, userID)
		if due || st.Pending != nil {
			return false
		}
		for _, j := range st.Jobs {
			if j.FinishedAt == nil {
				return false
			}
		}
		return true
	})
	waitMirror(ta, fake, accID, gmailAddr, 60*time.Second)
	// The budget stamps each call's units again when Google has answered
	// (Settle), so its window never lets a unit go before Google's does,
	// however long the time from its grant to Google's count on a loaded
	// machine: Google refuses nothing (issue 12 allows 1% of calls, and a
	// refusal would be a wait, never a failure: the mirror above is
	// complete).
	calls := 0
	for _, n := range fake.CallCounts() {
		calls += n
	}
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d of %d calls under the budget", r, calls)
	}
}

// Issue 14: the Gmail budget lives in the broker, which the embedded store
// forgets at a restart. The next run counts the last window as fully spent
// (until a window after the previous run was last seen alive): a full sync
// stopped while the account's minute was nearly spent makes no Gmail call
// in the new run until that minute has passed, so Google refuses nothing,
// and then goes on to the end. (Before, the account resumed at half its
// budget at once and Google refused the calls of the spent minute.) The
// account's limit is 300 units a minute, the minute compressed to 3 s,
// emulator and budget alike.
func TestGmailQuotaAcrossRestart(t *testing.T) {
	t.Parallel()
	const window = 3 * time.Second
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaWindow: window, GmailUserUnitsPerMinute: 300})
	dir := t.TempDir()
	cfg := withGoogle(fake, func(cfg *app.Config) {
		cfg.DataDir = dir
		cfg.GmailQuotaWindow, cfg.GmailUserUnits = window, 300
	})
	ta := apptest.Start(t, cfg)
	userID := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 100) // 120 messages: 600 units of downloads
	acc := connectAccount(ta, fake, userID, gmailAddr)
	testkit.Eventually(t, 20*time.Second, "the account's minute to be nearly spent", func() bool {
		used, _, _, _ := fake.Gmail.QuotaWindow(gmailAddr)
		return used >= 250
	})
	stopped := time.Now()
	if err := ta.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := fake.Gmail.QuotaUnits(gmailAddr)

	ta = apptest.Start(t, cfg)
	var v struct{ GmailQuota struct{ Status string } }
	ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &v)
	if !strings.Contains(v.GmailQuota.Status, "counts as fully spent") {
		t.Errorf("status right after the restart = %q, want it to say the lost minute counts as fully spent", v.GmailQuota.Status)
	}
	testkit.Eventually(t, 2*window, "the lost minute to nearly pass", func() bool { return time.Since(stopped) > window-200*time.Millisecond })
	if u := fake.Gmail.QuotaUnits(gmailAddr); u != before && time.Since(stopped) < window {
		t.Errorf("the new run spent %d Gmail units within the minute the previous run had spent", u-before)
	} else if time.Since(stopped) >= window {
		t.Logf("the restart took %s, past the lost minute: only Google's refusals are checked", time.Since(stopped))
	}
	waitMirror(ta, fake, acc.ID, gmailAddr, 60*time.Second)
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d calls across the restart", r)
	}
	if spent, counted := scrapeMetrics(ta)["mailroom_gmail_quota_units_total"], fake.Gmail.QuotaUnits(gmailAddr)-before; spent < float64(counted) {
		t.Errorf("Google counted %d units of the new run, its budget spent %v: a call went around the budget", counted, spent)
	}
}

// pushDeployAndWaitForLabel adds a new message the Deploys rule matches,
// pushes it, and waits (up to four quota windows) for Gmail to show the
// rule's label on it; it returns the time from the push to the label.
func pushDeployAndWaitForLabel(t *testing.T, ta *apptest.App, fake *googlefake.Server, window time.Duration) time.Duration {
	t.Helper()
	id, err := fake.Gmail.AddMessage(gmailAddr, googlefake.Message{From: "ci@example.com", To: gmailAddr, Subject: "done", Body: "deploy-7f3a finished"})
	if err != nil {
		t.Fatal(err)
	}
	pushed := time.Now()
	if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)); st != http.StatusNoContent {
		t.Fatalf("push: %d", st)
	}
	labelID := ""
	testkit.Eventually(t, 4*window, "the new message to be labelled", func() bool {
		if labelID == "" {
			labelID, _ = fake.Gmail.LabelID(gmailAddr, "Deploys")
		}
		m, _ := fake.Gmail.Message(gmailAddr, id)
		return labelID != "" && slices.Contains(m.LabelIDs, labelID)
	})
	took := time.Since(pushed)
	return took
}

// Latency isolation between accounts (issue 24): a quiet account's new
// mail gets its rule's label within 2 s (p99) while another account's full
// sync and reclassify press the project's budget. To press the project
// with one busy account, the project's units are set low, 12,000 a
// minute, and the accounts' at Google's 15,000 (its figure for projects
// made before May 2026, with that list's prices), for the emulator and the
// budget alike, in a real
// minute (neither window is compressed: compressing one without the other
// would let the budget and Google disagree). The busy account (3,000
// messages) gets a rule on the body, which reclassifies it, and is then
// resynced: both
// download every message, far more than 12,000 units, so the project's
// window stays full for minutes. The quiet account gets 20 new messages, one
// a second, each pushed, while both go on.
func TestQuietAccountLabelledWhileAnotherPressesTheProject(t *testing.T) {
	t.Parallel()
	const (
		userUnits, projectUnits = 15000, 12000
		mails                   = 20
		quietAddr               = "quiet@example.com"
	)
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaPrices: googlefake.GmailPrices2025,
		GmailUserUnitsPerMinute: userUnits, GmailProjectUnitsPerMinute: projectUnits})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.GmailUserUnits, cfg.GmailProjectUnits, cfg.GmailQuotaPrices = userUnits, projectUnits, google.Prices2025
		cfg.ReclassifyDebounce, cfg.ReclassifyMaxWait, cfg.ReclassifyTick = 100*time.Millisecond, time.Second, 50*time.Millisecond
	}))
	spec := rules.Spec{Label: "Deploys", Match: "any", Conditions: []rules.Condition{{Field: "body", Op: "contains", Value: "deploy-7f3a"}}}

	quietUser := createUser(ta, "quiet-owner@example.com")
	fake.AddAccount(quietAddr)
	storyThreads(t, fake, quietAddr, 20)
	seedAccount(t, ta, fake, quietUser, quietAddr)
	ta.JSON(http.MethodPost, "/api/v1/users/"+quietUser+"/rules", spec, http.StatusCreated, nil)

	busyUser := createUser(ta, "owner@example.com")
	fake.AddAccount(gmailAddr)
	storyThreads(t, fake, gmailAddr, 2500) // 3,000 messages
	busyID := seedAccount(t, ta, fake, busyUser, gmailAddr)
	// The rule first: a rule saved during a full sync waits for its end
	// (one label pass), so the reclassify must be under way before the
	// resync for both to run at once.
	ta.JSON(http.MethodPost, "/api/v1/users/"+busyUser+"/rules", spec, http.StatusCreated, nil)
	testkit.Eventually(t, 60*time.Second, "the busy account's reclassify to be under way", func() bool {
		st := reclassify(ta, busyUser)
		return len(st.Jobs) == 1 && st.Jobs[0].BatchesDone > 0
	})
	ta.JSON(http.MethodPost, "/api/v1/accounts/"+busyID+"/resync", nil, http.StatusAccepted, nil)
	testkit.Eventually(t, 60*time.Second, "the busy account's full sync and reclassify to be under way", func() bool {
		st := reclassify(ta, busyUser)
		_, begun := fullSyncDue(t, ta, busyID)
		return begun && len(st.Jobs) == 1 && st.Jobs[0].BatchesDone > 0
	})
	// The busy account's first busy window keeps a third of its units for
	// its own live mail (queue/google's budget): it reaches the project's
	// limit in its second window.
	testkit.Eventually(t, 150*time.Second, "the busy account to press the project's budget", func() bool {
		return fake.Gmail.PeakProjectUnits() >= projectUnits*9/10
	})

	var took []time.Duration
	labelID := ""
	for i := range mails {
		start := time.Now()
		id, err := fake.Gmail.AddMessage(quietAddr, googlefake.Message{From: "ci@example.com", To: quietAddr,
			Subject: fmt.Sprint("done ", i), Body: "deploy-7f3a finished"})
		if err != nil {
			t.Fatal(err)
		}
		if st := push(ta, fake, quietAddr, fake.Gmail.HistoryID(quietAddr)); st != http.StatusNoContent {
			t.Fatalf("push: %d", st)
		}
		testkit.Eventually(t, 30*time.Second, "the quiet account's new message to be labelled", func() bool {
			if labelID == "" {
				labelID, _ = fake.Gmail.LabelID(quietAddr, "Deploys")
			}
			m, _ := fake.Gmail.Message(quietAddr, id)
			return labelID != "" && slices.Contains(m.LabelIDs, labelID)
		})
		took = append(took, time.Since(start))
		if d := time.Until(start.Add(time.Second)); d > 0 {
			time.Sleep(d) // pacing the load, not waiting for a result
		}
	}
	if due, _ := fullSyncDue(t, ta, busyID); !due {
		t.Fatal("the busy account's full sync ended first: the test did not overlap them")
	}
	slices.Sort(took)
	p99 := took[len(took)*99/100]
	t.Logf("quiet account's labels: p50 %s, p99 %s; the project's busiest minute %d units (limit %d); Google refused %d calls",
		took[len(took)/2].Round(time.Millisecond), p99.Round(time.Millisecond), fake.Gmail.PeakProjectUnits(), projectUnits,
		fake.Gmail.TotalQuotaRefusals())
	if p99 > 2*time.Second {
		t.Errorf("the quiet account's new mail took %s (p99) to be labelled while another account pressed the project, want at most 2 s", p99)
	}
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d calls under the budget", r)
	}
}
