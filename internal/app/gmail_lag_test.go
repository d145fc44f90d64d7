package app_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/web"
)

// lagApp is an app on an emulator whose history lags its pushes by lag
// (Options.HistoryLag), with pushes on and polls an hour apart (the fast
// poll too), and an account synced.
func lagApp(t *testing.T, lag time.Duration, more func(*app.Config)) (*apptest.App, *googlefake.Server, string) {
	t.Helper()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, HistoryLag: lag})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.GmailFastPollInterval = time.Hour
		if more != nil {
			more(cfg)
		}
	}))
	fake.SetPushURL(ta.URL + "/push/gmail")
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 10, 3); err != nil {
		t.Fatal(err)
	}
	acc := connectAccount(ta, fake, createUser(ta, "owner@example.com"), gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second+lag)
	return ta, fake, acc.ID
}

// newMail adds a message to the emulator's mailbox (Gmail pushes it at
// once) and returns its id.
func newMail(t *testing.T, fake *googlefake.Server, subject string) string {
	t.Helper()
	id, err := fake.Gmail.AddMessage(gmailAddr, googlefake.Message{From: "bob@example.com", To: gmailAddr, Subject: subject, LabelIDs: []string{"INBOX", "UNREAD"}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestPushedMailArrivesThoughHistoryLags: Gmail's history shows a change
// lag after the push that names it (the field reports one to three
// seconds). Each round's new mail must reach the mirror within the lag
// plus the re-read's longest step (2 s) and a second of slack, with no
// poll in between: the sync reads again for the pushed id instead of
// leaving the change to the next poll. The rounds are a few seconds apart,
// so each has its own push (Gmail drops pushes above one a second).
func TestPushedMailArrivesThoughHistoryLags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lag    time.Duration
		rounds int
	}{{3 * time.Second, 10}, {time.Second, 4}, {5 * time.Second, 3}} {
		t.Run(tc.lag.String(), func(t *testing.T) {
			t.Parallel()
			ta, fake, accID := lagApp(t, tc.lag, nil)
			bound := tc.lag + 3*time.Second
			var took []time.Duration
			for r := range tc.rounds {
				time.Sleep(1100 * time.Millisecond) // past Gmail's one push a second
				start := time.Now()
				id := newMail(t, fake, fmt.Sprintf("round %d", r))
				testkit.Eventually(t, bound+10*time.Second, "round's mail in the mirror", func() bool {
					status, _ := ta.Do(http.MethodGet, "/api/v1/accounts/"+accID+"/messages/"+id, nil)
					return status == http.StatusOK
				})
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			if worst := took[len(took)-1]; worst > bound {
				t.Errorf("with history %s behind its push, the slowest round took %s (all: %v), want at most %s", tc.lag, worst, took, bound)
			}
			d := accountDetail(t, ta, accID)
			if d.polls > 0 {
				t.Errorf("%d poll syncs ran; the rounds must arrive through pushes", d.polls)
			}
			if d.shortReads == 0 || d.lagged == 0 {
				t.Errorf("sync runs record %d short reads and %d catch-ups, want both", d.shortReads, d.lagged)
			}
			m := scrapeMetrics(ta)
			if m["mailroom_gmail_history_short_reads_total"] == 0 || m["mailroom_gmail_history_lag_seconds_count"] == 0 {
				t.Errorf("metrics: short reads %v, lag observations %v; want both counted", m["mailroom_gmail_history_short_reads_total"], m["mailroom_gmail_history_lag_seconds_count"])
			}
		})
	}
}

// TestBurstWithDroppedPushesConverges: 30 changes within 2 s, of which
// Gmail pushes only the first (it drops pushes above one a second; here
// the later ones are held back entirely), with history 2 s behind: the
// trailing read after the pushed sync brings in everything within 10 s.
func TestBurstWithDroppedPushesConverges(t *testing.T) {
	t.Parallel()
	ta, fake, accID := lagApp(t, 2*time.Second, nil)
	time.Sleep(1100 * time.Millisecond)
	start := time.Now()
	first := newMail(t, fake, "burst 0")
	fake.ExpireSubscription() // the first push is out; every later one is lost
	ids := []string{first}
	for i := 1; i < 30; i++ {
		ids = append(ids, newMail(t, fake, fmt.Sprintf("burst %d", i)))
		time.Sleep(60 * time.Millisecond)
	}
	t.Cleanup(func() {
		if t.Failed() {
			d, _ := ta.Gmail().Detail(accID, 50)
			for _, r := range d.Runs {
				t.Logf("run %+v", r)
			}
			t.Logf("push stats %+v", fake.PushStats())
		}
	})
	testkit.Eventually(t, 20*time.Second, "the burst in the mirror", func() bool {
		got := mirror(ta, accID, "")
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				return false
			}
		}
		return true
	})
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the burst took %s to reach the mirror, want at most 10 s", took)
	}
	if st := fake.PushStats(); st.Dropped < 29 {
		t.Errorf("push stats %+v: want the burst's later pushes dropped", st)
	}
}

// TestStoppedPushesAlertAndPollFaster: pushes stop (the subscription
// expired) while mail keeps arriving. A poll finds changes no push
// announced: the account is "stopped", polled at the fast interval, one
// alert names what to check, the Overview and /metrics say so, and the
// mirror converges. When pushes return, the alert resolves once.
func TestStoppedPushesAlertAndPollFaster(t *testing.T) {
	t.Parallel()
	alerts := make(chan string, 16)
	hook := alertHook(t, alerts)
	ta, fake, accID := lagApp(t, 0, func(cfg *app.Config) {
		cfg.GmailPollInterval, cfg.GmailFastPollInterval = 4*time.Second, time.Second
		cfg.AlertWebhookURL = hook
	})
	time.Sleep(1100 * time.Millisecond)
	newMail(t, fake, "pushed")
	testkit.Eventually(t, 10*time.Second, "a push recorded", func() bool { return account(ta, accID).Pushes == "arriving" })

	fake.ExpireSubscription()
	// Past the trailing read after the last push (3 s): what comes now only
	// a poll finds.
	time.Sleep(4 * time.Second)
	for i := range 3 {
		newMail(t, fake, fmt.Sprintf("unannounced %d", i))
	}
	testkit.Eventually(t, 20*time.Second, "the account's pushes seen as stopped", func() bool { return account(ta, accID).Pushes == "stopped" })
	waitMirror(ta, fake, accID, gmailAddr, 10*time.Second)
	text := waitAlert(t, alerts, "pushes look stopped")
	for _, want := range []string{"expiration policy", "gmail-api-push@system.gserviceaccount.com", "/push/gmail"} {
		if !strings.Contains(text, want) {
			t.Errorf("alert %q does not say %q", text, want)
		}
	}
	if m := scrapeMetrics(ta); m["mailroom_gmail_push_unhealthy_accounts"] != 1 || m["mailroom_gmail_unannounced_changes_total"] == 0 {
		t.Errorf("metrics: unhealthy %v, unannounced %v", m["mailroom_gmail_push_unhealthy_accounts"], m["mailroom_gmail_unannounced_changes_total"])
	}
	if problems := ta.Problems(); !slices.ContainsFunc(problems, func(p web.Problem) bool { return strings.Contains(p.Title, "pushes look stopped") }) {
		t.Errorf("overview problems %+v: want the stopped pushes", problems)
	}
	// Faster polls: more mail, unannounced, arrives within the fast poll
	// (1 s) plus a tick, not the normal 4 s.
	id := newMail(t, fake, "fast poll")
	start := time.Now()
	testkit.Eventually(t, 10*time.Second, "mail found by the fast poll", func() bool {
		status, _ := ta.Do(http.MethodGet, "/api/v1/accounts/"+accID+"/messages/"+id, nil)
		return status == http.StatusOK
	})
	if took := time.Since(start); took > 3500*time.Millisecond {
		t.Errorf("the fast poll took %s to find new mail, want within about 1 s", took)
	}
	// No second alert while it lasts.
	select {
	case again := <-alerts:
		if strings.Contains(again, "pushes look stopped") {
			t.Errorf("a second alert: %q", again)
		}
	default:
	}

	fake.RestoreSubscription()
	time.Sleep(1100 * time.Millisecond)
	newMail(t, fake, "pushed again")
	testkit.Eventually(t, 10*time.Second, "pushes arriving again", func() bool { return account(ta, accID).Pushes == "arriving" })
	waitAlert(t, alerts, "pushes arrive again")
}

type lagDetail struct{ polls, shortReads, lagged int }

// accountDetail counts the account's recent sync runs by what they record.
func accountDetail(t *testing.T, ta *apptest.App, accID string) lagDetail {
	t.Helper()
	d, err := ta.Gmail().Detail(accID, 50)
	if err != nil {
		t.Fatal(err)
	}
	var out lagDetail
	for _, r := range d.Runs {
		if r.Trigger == "poll" {
			out.polls++
		}
		if r.ShortRead {
			out.shortReads++
		}
		if r.HistoryLagMs > 0 {
			out.lagged++
		}
	}
	return out
}

// alertHook is an alert webhook receiver: each alert's body goes to ch.
func alertHook(t *testing.T, ch chan<- string) string {
	t.Helper()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		select {
		case ch <- string(raw):
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)
	return hook.URL
}

// waitAlert waits up to 30 s for an alert that says want and returns it;
// other alerts are skipped.
func waitAlert(t *testing.T, ch <-chan string, want string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case a := <-ch:
			if strings.Contains(a, want) {
				return a
			}
		case <-deadline:
			t.Fatalf("no alert saying %q within 30 s", want)
			return ""
		}
	}
}

// TestFailedWatchRenewalAlerts: a users.watch that Google refuses (the
// topic lost its publisher grant: 403) goes to the dead letters and the
// alert names it. With serve's retries (30 s, 1 and 2 minutes, then the
// dead letter) that is within 4 minutes of the first failure, well within
// 15; the test shortens the retries.
func TestFailedWatchRenewalAlerts(t *testing.T) {
	t.Parallel()
	alerts := make(chan string, 16)
	hook := alertHook(t, alerts)
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodWatch, Code: http.StatusForbidden, Reason: "forbidden",
		Message: "User not authorized to perform this action."}); err != nil {
		t.Fatal(err)
	}
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.AlertWebhookURL = hook
		cfg.GmailWatchRenew = 2 * time.Second
	}))
	fake.AddAccount(gmailAddr)
	connectAccount(ta, fake, createUser(ta, "owner@example.com"), gmailAddr)
	text := waitAlert(t, alerts, "gmail:watch-renew")
	if !strings.Contains(text, "not authorized") {
		t.Errorf("the alert %q does not say what Google answered", text)
	}
}
