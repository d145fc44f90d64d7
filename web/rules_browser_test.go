package web

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mailroom/internal/testkit"
	"mailroom/queue/rules"
	"mailroom/store"
	"mailroom/web/webtest"
)

// seedRulesPage gives the user an account with 300 threads in the mirror
// and three finished jobs, so the page has something to preview and chart.
func seedRulesPage(t *testing.T, db *store.DB, uid string) {
	t.Helper()
	err := db.Update(func(tx *store.Tx) error {
		acc := store.NewID()
		if err := tx.AccountPut(store.Account{ID: acc, UserID: uid, Email: "ann@example.com", Status: store.AccountReady}); err != nil {
			return err
		}
		for i := range 300 {
			from := fmt.Sprintf("Person %d <p%d@example.org>", i, i)
			if i%3 == 0 {
				from = fmt.Sprintf("GitHub <notifications+%d@github.com>", i)
			}
			m := store.Message{ID: fmt.Sprintf("m%05d", i), ThreadID: fmt.Sprintf("m%05d", i), From: from, Subject: fmt.Sprintf("[repo] issue %d", i),
				Date: time.Date(2026, 3, 4, 5, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute), Fetched: true}
			if err := tx.MessagePut(acc, m); err != nil {
				return err
			}
		}
		for _, j := range []store.ReclassifyJob{
			{UserID: uid, RuleIDs: []string{"r"}, Threads: 3000, Batches: 60, BatchesDone: 60, ThreadsLabeled: 1000},
			{UserID: uid, RuleIDs: []string{"r"}, Threads: 3000, Batches: 60, BatchesDone: 12, BatchesSkippedStale: 48},
			{UserID: uid, RuleIDs: []string{"r"}, Threads: 3000, Batches: 60, BatchesDone: 25},
		} {
			j.StartedAt = time.Now()
			if err := tx.ReclassifyJobCreate(&j); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBrowserRulesEditor writes a rule in headless Chromium: the live
// preview counts matches, a broken regular expression is flagged next to
// its row before saving, and a save shows the pending reclassify with its
// countdown.
//
// The save's answer is held for longer than the page's status poll
// (2 s): the poll then sees the save's pending reclassify while the answer
// is on its way, and must not reload the page over it (that lost the
// answer and its flash, and CI once waited out its deadline on it).
func TestBrowserRulesEditor(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e, _, uid := rulesEnv(t, rules.Config{})
	seedRulesPage(t, e.db, uid)
	savePath := "/admin/rules/" + uid + "/save"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.h.ServeHTTP(w, r) // the answer is buffered until this handler returns
		if r.Method == http.MethodPost && r.URL.Path == savePath {
			time.Sleep(3 * time.Second)
		}
	}))
	t.Cleanup(srv.Close)

	br := webtest.Start(t, 1360, 1100, 60*time.Second)
	shot := func(name string) chromedp.Action[chromedp.Void] { return br.Shot(name, true) }
	do := br.Do
	text := br.Text
	waitText := func(sel, want string) {
		t.Helper()
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("%s to say %q", sel, want), func() bool { return strings.Contains(text(sel), want) })
	}

	do("sign in",
		chromedp.Navigate(srv.URL+"/admin/login"),
		chromedp.WaitVisible(chromedp.CSS(`#password`)),
		chromedp.SendKeys(chromedp.CSS(`#password`), testPassword),
		chromedp.Submit(chromedp.CSS(`#password`)),
		chromedp.WaitVisible(chromedp.CSS(`.topbar`)),
	)
	do("open the user's rules",
		chromedp.Navigate(srv.URL+"/admin/rules"),
		chromedp.Click(chromedp.CSS(`a[href="/admin/rules/`+uid+`"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#editor`)),
	)
	do("type a condition",
		chromedp.SendKeys(chromedp.CSS(`#label`), "GitHub"),
		chromedp.SendKeys(chromedp.CSS(`.condition[data-row="0"] input[name=value]`), "@github.com"),
	)
	waitText("[data-preview-count]", "Matches 100 of 300 threads")
	do("break a regular expression",
		chromedp.SetValue(chromedp.CSS(`.condition[data-row="1"] select[name=op]`), "matches"),
		chromedp.SendKeys(chromedp.CSS(`.condition[data-row="1"] input[name=value]`), "(issue"),
	)
	waitText(`[data-error-row="1"]`, "missing closing )")
	do("see the inline error", shot("rules-01-inline-error.png"))
	do("fix it and save",
		chromedp.SetValue(chromedp.CSS(`.condition[data-row="1"] input[name=value]`), `issue \d+`),
		chromedp.Click(chromedp.CSS(`.rule-editor button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash-ok`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-pending] [data-countdown]`)),
	)
	waitText(`[data-pending] [data-countdown]`, "in ")
	if !strings.Contains(text(".rules-table"), "GitHub") {
		t.Error("the saved rule is not listed")
	}
	do("see the page", shot("rules-02-saved.png"))

	br.CheckProblems()
	t.Logf("screenshots in %s", br.Dir)
}
