package demo

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/testkit"
	"mailroom/queue/gmail"
	"mailroom/web/webtest"
)

// TestDemoBrowser walks the demo as a newcomer would, in headless
// Chromium: sign in with the generated ("printed") password, see the
// overview's counts change live, edit a rule in the editor and watch its
// reclassify count down and its job finish, see rows arrive in the demo
// sheets, and open the always-failing message's dead letter and redrive
// it. It saves a screenshot of each page (MAILROOM_SCREENSHOT_DIR, or a
// temp dir); script errors and CSP refusals fail it.
func TestDemoBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	webtest.ChromiumPath(t) // skip (or fail under CI) before starting the demo
	start := time.Now()
	const reclassifyLabel = "Receipts"

	ta := startApp(t, func(c *app.Config) {
		c.Demo = true
		c.DemoScale = 0.02   // 60, 10 and 5 messages
		c.AdminPassword = "" // generated on this first start, as serve prints it
		c.SheetsFlushDelay = time.Second
		c.ReclassifyDebounce = 5 * time.Second // long enough to see the countdown
		c.ReclassifyTick = 250 * time.Millisecond
	})
	password := ta.GeneratedPassword()
	if password == "" {
		t.Fatal("no admin password was generated on the first start")
	}
	d := demoOf(t, ta)

	// The demo seeds itself; wait for its user and rules (the browser
	// needs their ids to find its way).
	snap := waitDemoSeeded(t, ta, 30*time.Second)
	ruleID := snap.rules[reclassifyLabel]
	t.Logf("demo seeded after %s", demoSince(start))

	br := webtest.Start(t, 1360, 900, 60*time.Second)
	bctx := br.Ctx
	// The viewport, not the whole page: what a person sees, and a small
	// enough PNG to commit.
	shot := func(name string) chromedp.Action[chromedp.Void] { return br.Shot(name, false) }
	do := br.Do
	text := func(sel string) string { return strings.TrimSpace(br.Text(sel)) }
	// eval evaluates a script, bounded, tolerating a page that reloads
	// under it (the live pages reload themselves).
	eval := func(expr string) (string, error) {
		ectx, cancel := context.WithTimeout(bctx, 3*time.Second)
		defer cancel()
		return chromedp.Run(ectx, chromedp.Evaluate[string](expr))
	}
	waitJS := func(what string, within time.Duration, expr string, ok func(string) bool) string {
		t.Helper()
		var v string
		var err error
		testkit.Eventually(t, within, what, func() bool {
			v, err = eval(expr)
			if err == nil && ok(v) {
				return true
			}
			time.Sleep(200 * time.Millisecond)
			return false
		})
		return v
	}
	css := func(sel string, args ...any) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(sel, args...)) }

	// 1. Sign in with the password the first start printed.
	do("open the admin page",
		chromedp.EmulateViewport(1360, 900),
		chromedp.Navigate(ta.URL+"/admin"),
		chromedp.WaitVisible(css(`#password`)),
		shot("01-login.png"),
	)
	do("sign in with the generated password",
		chromedp.SendKeys(css(`#password`), password),
		chromedp.Submit(css(`#password`)),
		chromedp.WaitVisible(css(`table.queues`)),
		chromedp.WaitVisible(css(`.demo-banner`)),
		// The live refresh script ran (and so passed the CSP).
		chromedp.WaitVisible(css(`[data-live]`)),
	)
	t.Logf("signed in after %s", demoSince(start))

	// 2. The overview's counts change without a reload.
	processed := `document.querySelector('[data-total="processed"]').textContent.trim()`
	before, err := eval(processed)
	if err != nil {
		t.Fatalf("read the processed count: %v", err)
	}
	after := waitJS("the overview's processed count to change live", 20*time.Second, processed, func(v string) bool { return v != before })
	do("see the overview", chromedp.WaitReady(css(`[data-refresh][data-refreshes]`)), shot("02-overview.png"))
	t.Logf("overview: processed %s -> %s after %s", before, after, demoSince(start))

	// 3. Edit a rule; see its reclassify count down, then its job done.
	// First let any reclassify the demo started itself fire, so the job
	// the test waits for is the one of its own save.
	testkit.Eventually(t, 20*time.Second, "no reclassify pending for the demo user", func() bool {
		st, err := ta.Rules().Status(snap.userID, 1)
		return err == nil && st.Pending == nil
	})
	do("open the demo user's rules",
		chromedp.Navigate(ta.URL+"/admin/rules"),
		chromedp.Click(css(`a[href="/admin/rules/%s"]`, snap.userID)),
		chromedp.WaitVisible(css(`#editor`)),
		chromedp.Click(css(`a[href="/admin/rules/%s?edit=%s"]`, snap.userID, ruleID)),
		chromedp.WaitVisible(css(`#editor`)),
	)
	if v := text(`#editor h2`); !strings.Contains(v, reclassifyLabel) {
		t.Fatalf("the editor shows %q, want the rule for %s", v, reclassifyLabel)
	}
	const newValue = `(?i)receipt|invoice|order #\d+`
	value := css(`.condition[data-row="0"] input[name=value]`)
	do("change the rule's condition",
		chromedp.Clear(value),
		chromedp.SendKeys(value, newValue),
	)
	waitJS("the editor's live preview", 10*time.Second,
		`document.querySelector('[data-preview-count]').textContent`,
		func(v string) bool { return strings.HasPrefix(v, "Matches ") })
	if got, err := chromedp.Run(bctx, chromedp.Value(value)); err != nil || got != newValue {
		t.Fatalf("the condition reads %q (%v), want %q", got, err, newValue)
	}
	do("see the editor", shot("03-rule-editor.png"))
	jobsBefore, err := eval(`JSON.stringify([...document.querySelectorAll('[data-job]')].map(e => e.dataset.job))`)
	if err != nil {
		t.Fatalf("list the jobs: %v", err)
	}
	saved := time.Now()
	do("save the rule",
		chromedp.Click(css(`.rule-editor button[type=submit]`)),
		chromedp.WaitVisible(css(`.flash-ok`)),
		chromedp.WaitVisible(css(`[data-pending] [data-countdown]`)),
	)
	if flash := text(`.flash-ok`); !strings.Contains(flash, reclassifyLabel) {
		t.Errorf("flash after the save = %q", flash)
	}
	countdown := waitJS("the pending reclassify's countdown", 3*time.Second,
		`(document.querySelector('[data-pending] [data-countdown]') || {textContent: ''}).textContent`,
		func(v string) bool { return strings.HasPrefix(v, "in ") })
	do("see the countdown", shot("04-rules-countdown.png"))
	t.Logf("rule saved, reclassify %s, after %s", countdown, demoSince(start))
	// The page reloads itself when the pending reclassify fires, and
	// then updates the new job's counts in place.
	jobState := fmt.Sprintf(`(() => {
		const known = new Set(%s);
		for (const li of document.querySelectorAll('[data-job]')) {
			if (known.has(li.dataset.job)) continue;
			const labels = [...li.querySelectorAll('.chip')].map(c => c.textContent.trim());
			if (labels.includes(%q)) return li.dataset.job + ' ' + li.querySelector('[data-field="state"]').textContent.trim();
		}
		return '';
	})()`, jobsBefore, reclassifyLabel)
	job := waitJS("the new reclassify job to be done on the page", 25*time.Second, jobState,
		func(v string) bool { return strings.HasSuffix(v, " done") })
	jobID := strings.Fields(job)[0]
	do("see the finished job",
		chromedp.WaitNotPresent(css(`[data-pending] [data-countdown]`)),
		chromedp.ScrollIntoView(css(`[data-job="%s"]`, jobID)),
		shot("05-rules-job-done.png"),
	)
	if st, err := ta.Rules().Status(snap.userID, 10); err != nil {
		t.Fatal(err)
	} else {
		found := false
		for _, j := range st.Jobs {
			if j.ID == jobID {
				found = !j.StartedAt.Before(saved) && slices.Contains(j.RuleIDs, ruleID)
			}
		}
		if !found {
			t.Errorf("job %s is not a reclassify of rule %s started after the save", jobID, ruleID)
		}
	}
	t.Logf("reclassify job %s done %s after the save (%s in)", jobID, demoSince(saved), demoSince(start))

	// 4. Rows arrive in the emulated sheets while the page is open.
	rows := `document.querySelector('[data-spreadsheet] [data-rows]').textContent.trim()`
	do("open the demo sheets",
		chromedp.Navigate(ta.URL+"/admin/demo/sheets"),
		chromedp.WaitVisible(css(`[data-spreadsheet] [data-rows]`)),
	)
	first, err := eval(rows)
	if err != nil {
		t.Fatalf("read the row count: %v", err)
	}
	n0 := demoAtoi(first)
	grown := waitJS("more rows in the first demo sheet, without a reload", 15*time.Second, rows,
		func(v string) bool { return demoAtoi(v) > n0 })
	do("see the rows", chromedp.WaitVisible(css(`table.demo-rows`)), shot("06-demo-sheets.png"))
	t.Logf("demo sheet rows %s -> %s after %s", first, grown, demoSince(start))
	do("see the mailbox",
		chromedp.Navigate(ta.URL+"/admin/demo/mailbox"),
		chromedp.WaitVisible(css(`main h1`)),
		shot("07-demo-mailbox.png"),
	)
	do("see the forms, each with its delete button",
		chromedp.Navigate(ta.URL+"/admin/forms"),
		chromedp.WaitVisible(css(`table.forms form[action$="/delete"] button`)),
		shot("07b-forms.png"),
	)

	// 5. The always-failing message's dead letter: open it, redrive it.
	poisonID, deadID := demoPoison(t, ta, d)
	// The demo lifts the message's fault once it sees the dead letter, so
	// that a redrive succeeds; redriving before that would only fail again.
	testkit.Eventually(t, 15*time.Second, "the demo to lift the always-failing message's fault", func() bool {
		if demoMessageFetches(t, d, demoAccounts[1].Email, poisonID) {
			return true
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	t.Logf("dead letter %s (message %s) after %s", deadID, poisonID, demoSince(start))
	do("open the dead letters",
		chromedp.Navigate(ta.URL+"/admin/deadletters"),
		chromedp.WaitVisible(css(`tr[data-id="%s"]`, deadID)),
		shot("08-deadletters.png"),
		chromedp.Click(css(`a[href="/admin/deadletters/%s"]`, deadID)),
		chromedp.WaitVisible(css(`#payload`)),
		chromedp.WaitVisible(css(`#redrive`)),
		shot("09-deadletter.png"),
	)
	if payload := text(`#payload`); !strings.Contains(payload, poisonID) {
		t.Errorf("the dead letter's payload does not name message %s: %s", poisonID, payload)
	}
	do("redrive it",
		chromedp.Click(css(`#redrive`)),
		chromedp.WaitVisible(css(`.flash-ok`)),
		shot("10-redriven.png"),
	)
	if flash := text(`.flash-ok`); !strings.Contains(flash, "queued again") {
		t.Errorf("flash after the redrive = %q", flash)
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('tr[data-id="%s"]').length`, deadID))); err != nil || n != 0 {
		t.Errorf("the redriven dead letter is still listed (%d rows, %v)", n, err)
	}
	// The demo lifted the message's fault once it was dead-lettered, so
	// the redrive brings it into mailroom's mirror.
	accID := snap.accounts[demoAccounts[1].Email].ID
	testkit.Eventually(t, 20*time.Second, "the redriven message in mailroom's mirror", func() bool {
		status, _ := ta.Do(http.MethodGet, "/api/v1/accounts/"+accID+"/messages/"+poisonID, nil)
		if status != http.StatusOK {
			time.Sleep(200 * time.Millisecond)
		}
		return status == http.StatusOK
	})

	// Back to the overview, now with more work done: the top of the page,
	// and the whole page with its charts.
	do("see the overview again",
		chromedp.Navigate(ta.URL+"/admin"),
		chromedp.WaitReady(css(`[data-refresh][data-refreshes]`)),
		shot("11-overview.png"),
		br.Shot("12-overview-full.png", true),
	)

	br.CheckProblems()
	t.Logf("walked the demo in %s; screenshots in %s", demoSince(start), br.Dir)
}

// demoPoison waits for the demo's always-failing message and its dead
// letter, and returns both ids.
func demoPoison(t *testing.T, ta *apptest.App, d *demo) (messageID, deadLetterID string) {
	t.Helper()
	testkit.Eventually(t, 30*time.Second, "the always-failing message's dead letter", func() bool {
		if messageID == "" {
			for _, m := range d.fake.Gmail.Messages(demoAccounts[1].Email) {
				if strings.HasPrefix(m.Subject, "Scanned document 0042.pdf") {
					messageID = m.ID
				}
			}
		}
		if messageID != "" {
			var list struct {
				DeadLetters []demoAPIDeadLetter `json:"deadletters"`
			}
			ta.JSON(http.MethodGet, "/api/v1/deadletters?type="+gmail.TypeMessageAdded+"&limit=100", nil, http.StatusOK, &list)
			for _, dl := range list.DeadLetters {
				if strings.Contains(string(dl.Payload), messageID) {
					deadLetterID = dl.ID
					return true
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	return messageID, deadLetterID
}

// demoMessageFetches reports whether the emulated Gmail now serves the
// message to a client (with a 2% chance of an injected 503, so callers
// poll).
func demoMessageFetches(t *testing.T, d *demo, email, id string) bool {
	t.Helper()
	token, err := d.fake.AccessToken(email)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, d.fake.URL()+"gmail/v1/users/me/messages/"+id+"?format=metadata", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func demoSince(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// demoAtoi reads a count as the pages print it ("1,234"); -1 if it is not one.
func demoAtoi(s string) int {
	n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(s), ",", ""))
	if err != nil {
		return -1
	}
	return n
}
