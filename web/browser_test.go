package web

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mailroom/internal/testkit"
	"mailroom/queue/webhooks"
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
	e := newEnv(t, envOptions{startQueue: true, deps: func(d *Deps) {
		d.Demo = true
		d.EventsRetention = 168 * time.Hour
		p, err := webhooks.New(webhooks.Config{}, webhooks.Deps{DB: d.DB, Queue: d.Queue})
		if err != nil {
			t.Fatal(err)
		}
		d.Webhooks = p
	}})

	// Some work for the charts, and one task that fails for good.
	if err := e.db.Update(func(tx *store.Tx) error {
		for i := range 25 {
			if _, _, err := e.q.Enqueue(tx, typeDebugRecord, map[string]any{"id": fmt.Sprint("ok", i)}); err != nil {
				return err
			}
		}
		_, _, err := e.q.Enqueue(tx, typeDebugRecord, map[string]any{"id": "invoice-42", "fail": 1})
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

	webhookFlow(t, br, e, srv.URL)

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

// webhookLayout reports what a person on this screen cannot reach or
// read: the page wider than the viewport, buttons, links and fields of
// main off-screen (and not in a scroll box of their own), and Go's
// duration format in the text.
const webhookLayout = `(() => {
  const vw = window.innerWidth;
  const inView = r => r.left >= -1 && r.right <= vw + 1;
  const scrolls = el => { for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) { const ox = getComputedStyle(p).overflowX; if ((ox === "auto" || ox === "scroll") && inView(p.getBoundingClientRect())) return true; } return false; };
  const off = [];
  document.querySelectorAll("main a, main button, main input, main select, main summary").forEach(el => {
    const r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) return;
    if (!inView(r) && !scrolls(el)) off.push((el.textContent || el.id || el.name || "").trim().slice(0, 30) + " at " + Math.round(r.left) + ".." + Math.round(r.right));
  });
  const goDur = (document.body.innerText.match(/\b\d+h\d+m\d+s\b|\b\d+m\d+s\b|\b\d+(\.\d+)?(ms|s)\b/g) || []);
  return JSON.stringify({overflow: document.documentElement.scrollWidth - vw, off, goDur});
})()`

// webhookFlow adds a webhook in the Webhooks page (its secret shown
// once), sends it a test event and replays the last hour from its page,
// and checks both pages, with a delivery log, at 390 and 1,360 px.
func webhookFlow(t *testing.T, br *webtest.Browser, e *env, base string) {
	t.Helper()
	const hookURL = "https://93.184.216.34/a/rather/long/path/for/the/service/that/receives/mailroom-events"
	br.Do("add a webhook",
		chromedp.Navigate(base+"/admin/webhooks"),
		chromedp.WaitVisible(chromedp.CSS(`#webhook-url`)),
		chromedp.SendKeys(chromedp.CSS(`#webhook-url`), hookURL),
		chromedp.Click(chromedp.CSS(`.webhook-types summary`)),
		chromedp.Click(chromedp.CSS(`input[name=types][value="message.added"]`)),
		chromedp.Click(chromedp.CSS(`#webhook-add`)),
		chromedp.WaitVisible(chromedp.CSS(`#new-secret`)),
		br.Shot("07-webhook-added.png", true),
	)
	secret, err := chromedp.Run(br.Ctx, chromedp.Value(chromedp.CSS(`#new-secret`)))
	if err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Errorf("the new webhook's secret box: %q, %v", secret, err)
	}
	var hook store.Webhook
	if err := e.db.Update(func(tx *store.Tx) error {
		all, err := tx.Webhooks()
		if err != nil || len(all) != 1 {
			return fmt.Errorf("webhooks %v: %w", all, err)
		}
		hook = all[0]
		// A delivery log: a refusal two minutes ago, then a success.
		now := time.Now()
		for _, d := range []store.Delivery{
			{Attempt: 1, At: now.Add(-2 * time.Minute), Status: 503, Latency: 1500 * time.Millisecond, Events: 2, Error: "webhooks: answered 503 Service Unavailable", Response: strings.Repeat("<p>Our service is down for maintenance; back soon.</p>", 18)},
			{Attempt: 2, At: now.Add(-time.Minute), Status: 204, Latency: 90 * time.Millisecond, Events: 2},
		} {
			d.WebhookID, d.BatchID = hook.ID, "msg_1"
			if _, err := tx.DeliveryAppend(d); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(hook.Types) != 1 || hook.Types[0] != "message.added" || hook.URL != hookURL {
		t.Errorf("the webhook made: %+v", hook)
	}
	page := base + "/admin/webhooks/" + hook.ID
	br.Do("send a test event",
		chromedp.Navigate(page),
		chromedp.WaitVisible(chromedp.CSS(`#send-test`)),
		chromedp.Click(chromedp.CSS(`#send-test`)),
		chromedp.WaitVisible(chromedp.CSS(`.flash-ok`)),
	)
	if flash := br.Text(`.flash-ok`); !strings.Contains(flash, "webhook.test") {
		t.Errorf("after the test: %q", flash)
	}
	var tests int
	_ = e.db.View(func(tx *store.Tx) error {
		evs, _, err := tx.Events(hook.Query(hook.Cursor, 100))
		for _, ev := range evs {
			if ev.Type == store.EventWebhookTest {
				tests++
			}
		}
		return err
	})
	if tests != 1 {
		t.Errorf("%d webhook.test events for the webhook, want 1", tests)
	}
	br.Do("replay the last hour",
		chromedp.SetValue(chromedp.CSS(`#replay-since`), "1h0m0s"),
		chromedp.Click(chromedp.CSS(`#replay`)),
	)
	// The test's flash is on screen until the replay's page replaces it.
	testkit.Eventually(t, 10*time.Second, "the replay's flash", func() bool {
		v, err := chromedp.Run(br.Ctx, chromedp.Evaluate[string](`(document.querySelector('.flash-ok') || {}).textContent || ''`))
		if err == nil && strings.Contains(v, "Replaying") {
			return true
		}
		time.Sleep(100 * time.Millisecond)
		return false
	})
	br.Do("see the delivery log", chromedp.WaitVisible(chromedp.CSS(`table.deliveries`)))
	log := br.Text(`table.deliveries`)
	for _, want := range []string{"2 minutes ago", "1 minute ago", "1.5 seconds", "90 ms", "503", "204"} {
		if !strings.Contains(log, want) {
			t.Errorf("the delivery log lacks %q:\n%s", want, log)
		}
	}

	for _, width := range []int64{390, 1360} {
		br.Do(fmt.Sprintf("set the viewport to %d px", width), chromedp.EmulateViewport(width, 900))
		for name, path := range map[string]string{"webhooks": "/admin/webhooks", "webhook": "/admin/webhooks/" + hook.ID} {
			step := fmt.Sprintf("%s at %d px", name, width)
			br.Do("open "+step, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS(`main h1`)),
				br.Shot(fmt.Sprintf("08-%s-%d.png", name, width), true))
			raw, err := chromedp.Run(br.Ctx, chromedp.Evaluate[string](webhookLayout))
			if err != nil {
				t.Fatalf("check %s: %v", step, err)
			}
			var r struct {
				Overflow int      `json:"overflow"`
				Off      []string `json:"off"`
				GoDur    []string `json:"goDur"`
			}
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				t.Fatal(err)
			}
			if r.Overflow > 0 || len(r.Off) > 0 || len(r.GoDur) > 0 {
				t.Errorf("%s: %d px wider than the screen; off-screen: %v; Go durations: %v", step, r.Overflow, r.Off, r.GoDur)
			}
		}
	}
	br.Do("back to a laptop's width", chromedp.EmulateViewport(1360, 1000))
}
