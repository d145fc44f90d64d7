package web

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mailroom/internal/testkit"
	"mailroom/queue"
	"mailroom/store"
	"mailroom/web/webtest"
)

// TestBrowserAdminFlow signs in with headless Chromium, sees the queues,
// opens a dead letter made by the real queue machinery, redrives it and
// sees it go and then succeed, saving a screenshot of each step.
func TestBrowserAdminFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	e := newEnv(t, envOptions{startQueue: true, deps: func(d *Deps) { d.Demo = true }})

	// Some work for the charts, and one task that fails for good.
	if err := e.db.Update(func(tx *store.Tx) error {
		for i := range 25 {
			if _, _, err := e.q.Enqueue(tx, queue.TypeDebugRecord, map[string]any{"id": fmt.Sprint("ok", i)}); err != nil {
				return err
			}
		}
		_, _, err := e.q.Enqueue(tx, queue.TypeDebugRecord, map[string]any{"id": "invoice-42", "fail": 1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var dead string
	testkit.Eventually(t, 15*time.Second, "a dead letter", func() bool {
		ids := deadLetterIDs(t, e.q)
		if len(ids) == 1 {
			dead = ids[0]
		}
		return dead != ""
	})

	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)

	br := webtest.Start(t, 1360, 1000, 60*time.Second)
	bctx := br.Ctx
	shot := func(name string) chromedp.Action[chromedp.Void] { return br.Shot(name, true) }
	do := br.Do
	read := func(step string, a chromedp.Action[string]) string {
		t.Helper()
		v, err := chromedp.Run(bctx, a)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return v
	}
	css := func(sel string, args ...any) chromedp.CSS { return chromedp.CSS(fmt.Sprintf(sel, args...)) }

	do("open the login page",
		chromedp.Navigate(srv.URL+"/admin"),
		chromedp.WaitVisible(css(`#password`)),
		shot("01-login.png"),
	)
	do("sign in",
		chromedp.SendKeys(css(`#password`), testPassword),
		chromedp.Submit(css(`#password`)),
		chromedp.WaitVisible(css(`table.queues`)),
		// The live refresh script ran (and so passed the CSP).
		chromedp.WaitVisible(css(`[data-live]`)),
	)
	queuesText := read("read the overview", chromedp.Text(css(`table.queues`)))
	for _, q := range e.q.Table().Queues() {
		if !strings.Contains(queuesText, q.Name) {
			t.Errorf("overview lacks queue %s", q.Name)
		}
	}
	do("see a live refresh",
		chromedp.WaitReady(css(`[data-refresh][data-refreshes]`)),
		shot("02-overview.png"),
	)

	do("open the dead letter",
		chromedp.Navigate(srv.URL+"/admin/deadletters"),
		chromedp.WaitVisible(css(`tr[data-id="%s"]`, dead)),
		shot("03-deadletters.png"),
		chromedp.Click(css(`a[href="/admin/deadletters/%s"]`, dead)),
		chromedp.WaitVisible(css(`#payload`)),
		shot("04-deadletter.png"),
	)
	if payload := read("read the payload", chromedp.Text(css(`#payload`))); !strings.Contains(payload, `"id": "invoice-42"`) {
		t.Errorf("payload not shown pretty-printed: %q", payload)
	}

	do("redrive it",
		chromedp.Click(css(`#redrive`)),
		chromedp.WaitVisible(css(`.flash-ok`)),
		chromedp.WaitVisible(css(`.empty`)),
		shot("05-redriven.png"),
	)
	if flash := read("read the flash", chromedp.Text(css(`.flash-ok`))); !strings.Contains(flash, "queued again") {
		t.Errorf("flash = %q", flash)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll('tr[data-id="%s"]').length`, dead)))
	if err != nil || rows != 0 {
		t.Errorf("the redriven dead letter is still listed (%d rows, %v)", rows, err)
	}
	testkit.Eventually(t, 15*time.Second, "the redriven task to succeed", func() bool { return e.flaky.succeeded("invoice-42") })
	// The page follows the new task and says it succeeded, without a reload.
	testkit.Eventually(t, 15*time.Second, "the dead letters page to say the redriven task succeeded", func() bool {
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector('[data-redriven]') || {dataset: {}}).dataset.outcome || ''`))
		if err == nil && v == "done" {
			return true
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	if got := read("read the outcome", chromedp.Text(css(`[data-redriven]`))); !strings.Contains(got, "succeeded") {
		t.Errorf("the redriven task's outcome reads %q", got)
	}
	do("see the outcome", shot("05b-redrive-succeeded.png"))

	do("make an API token",
		chromedp.Navigate(srv.URL+"/admin/tokens"),
		chromedp.WaitVisible(css(`#token-name`)),
		chromedp.SendKeys(css(`#token-name`), "nightly-report"),
		chromedp.Submit(css(`#token-name`)),
		chromedp.WaitVisible(css(`#new-token`)),
		shot("06-tokens.png"),
	)
	if token := read("read the token", chromedp.Value(css(`#new-token`))); !strings.HasPrefix(token, apiTokenPrefix) {
		t.Errorf("new token = %q", token)
	}

	br.CheckProblems()
	t.Logf("screenshots in %s", br.Dir)
}

// TestBrowserConnectLinkPage opens a connect link at a phone's width
// (390 px): the page fits without sideways scrolling, a reload leaves it
// usable, and its button goes on to Google's consent.
func TestBrowserConnectLinkPage(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	se := newSecEnv(t, nil)
	se.fake.AddAccount("erin@example.com")
	f := newLinkFlow(t, se)
	link := f.create(se.alice.token, se.alice.user, `{"redirectUri":"`+testConnectRedirect+`","email":"erin@example.com"}`)
	srv := httptest.NewServer(se.h)
	t.Cleanup(srv.Close)
	br := webtest.Start(t, 390, 844, 60*time.Second)
	page := srv.URL + link[strings.Index(link, "/connect/"):]
	br.Do("open the link, twice",
		// Headless Chromium's window is at least 500 px wide: emulate
		// the phone's viewport.
		chromedp.EmulateViewport(390, 844),
		chromedp.Navigate(page),
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`form[method=post] button[type=submit]`)),
		br.Shot("connect-390.png", true),
	)
	wide, err := chromedp.Run(br.Ctx, chromedp.Evaluate[bool](`window.innerWidth != 390 || document.documentElement.scrollWidth > window.innerWidth`))
	if err != nil || wide {
		t.Errorf("the connect page scrolls sideways at 390 px (%v)", err)
	}
	if got := br.Text(`.connect`); !strings.Contains(got, "erin@example.com") || !strings.Contains(got, "Continue to Google") {
		t.Errorf("the connect page reads %q", got)
	}
	br.CheckProblems()
	// Google's redirect goes on to mail.example.com, which this machine
	// cannot reach: the emulator seeing the consent is the proof.
	br.Do("continue", chromedp.Click(chromedp.CSS(`form[method=post] button[type=submit]`)))
	testkit.Eventually(t, 15*time.Second, "the consent at Google", func() bool {
		return se.fake.LastConsent().Get("login_hint") == "erin@example.com"
	})
}
