// Package webtest starts headless Chromium for the tests that drive the
// admin page (the web package's and the demo walkthrough's), with one set
// of flags, one rule for a missing browser and one watch for page errors.
package webtest

import (
	"context"
	"fmt"
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
)

// ChromiumPath finds a headless-capable Chromium ($MAILROOM_CHROMIUM first),
// or skips the test loudly; with CI=true it fails instead: CI must run the
// browser tests.
func ChromiumPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MAILROOM_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := t.Name() + ": Chromium NOT FOUND (looked for chromium, chromium-browser, google-chrome; set MAILROOM_CHROMIUM): the browser test did NOT run"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, msg)
	t.Skip(msg)
	return ""
}

// ScreenshotDir is $MAILROOM_SCREENSHOT_DIR (made if missing), or a temp dir.
func ScreenshotDir(t testing.TB) string {
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

// Browser is one headless Chromium tab for a test.
type Browser struct {
	// Ctx is the tab; the whole test's browser work is bounded by the
	// timeout given to Start.
	Ctx context.Context
	// Dir is where Shot writes screenshots.
	Dir string

	t        testing.TB
	mu       sync.Mutex
	problems []string
}

// Start launches Chromium with a window of width×height (with the flags
// this machine's closed network needs) and watches the page: script
// exceptions and console errors (CSP refusals, failed loads) are collected
// for Problems. It stops when the test ends.
func Start(t testing.TB, width, height int, timeout time.Duration) *Browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(ChromiumPath(t)),
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
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(width, height),
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() { cancelBrowser(); cancelAlloc(); cancel() })
	b := &Browser{Ctx: bctx, Dir: ScreenshotDir(t), t: t}
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	err := chromedp.Listen(bctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.problems = append(b.problems, "exception: "+msg)
		case *log.EventEntryAdded:
			// A missing /favicon.ico is the browser's own guess, not our link.
			if ev.Entry.Level == log.EntryLevelError && !strings.HasSuffix(ev.Entry.URL, "/favicon.ico") {
				b.problems = append(b.problems, fmt.Sprintf("console error: %s (%s)", ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Problems returns the page errors seen so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// CheckProblems fails the test for every page error seen.
func (b *Browser) CheckProblems() {
	b.t.Helper()
	for _, p := range b.Problems() {
		b.t.Errorf("page problem: %s", p)
	}
}

// Shot saves a PNG of the page to Dir/name: the whole page when full is
// set, else the viewport.
func (b *Browser) Shot(name string, full bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		capture := chromedp.CaptureScreenshot()
		if full {
			capture = chromedp.FullScreenshot(100)
		}
		buf, err := capture(ctx, tg)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(b.Dir, name), buf, 0o644)
	})
}

// Do runs actions in the tab and fails the test, naming the step, on error.
func (b *Browser) Do(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.Ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", step, err)
	}
}

// Text reads the text of the first element matching the CSS selector and
// fails the test when it cannot.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.Ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return v
}
