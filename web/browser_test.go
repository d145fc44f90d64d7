package web

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"mailroom/queue"
	"mailroom/store"
)

// chromiumPath finds a headless-capable Chromium, or skips the test loudly
// (fails with CI=true: CI must run the browser tests).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MAILROOM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	const msg = "web: Chromium NOT FOUND (looked for chromium, chromium-browser, google-chrome; set MAILROOM_CHROMIUM): the browser tests did NOT run"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// screenshotDir is MAILROOM_SCREENSHOT_DIR, or a temp dir.
func screenshotDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("MAILROOM_SCREENSHOT_DIR")
	if dir == "" {
		return t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestBrowserAdminFlow signs in with headless Chromium, sees the queues,
// opens a dead letter made by the real queue machinery, redrives it and
// sees it go, saving a screenshot of each step.
func TestBrowserAdminFlow(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	chrome := chromiumPath(t)
	shots := screenshotDir(t)
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
	waitFor(t, "a dead letter", 15*time.Second, func() bool {
		ids := deadLetterIDs(t, e.db)
		if len(ids) == 1 {
			dead = ids[0]
		}
		return dead != ""
	})

	srv := httptest.NewServer(e.h)
	t.Cleanup(srv.Close)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 1000),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()

	// Start the browser (bound to ctx, which bounds the whole test), then
	// listen: script errors, CSP refusals and failed loads fail the test.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	var mu sync.Mutex
	var problems []string
	err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			problems = append(problems, "exception: "+msg)
		case *log.EventEntryAdded:
			// CSP refusals, failed loads and the like; a missing
			// /favicon.ico is the browser's own guess, not our link.
			if ev.Entry.Level == log.EntryLevelError && !strings.HasSuffix(ev.Entry.URL, "/favicon.ico") {
				problems = append(problems, fmt.Sprintf("console error: %s (%s)", ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name), buf, 0o644)
		})
	}
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
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
	waitFor(t, "the redriven task to succeed", 15*time.Second, func() bool { return e.flaky.succeeded("invoice-42") })

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

	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
	t.Logf("screenshots in %s", shots)
}
