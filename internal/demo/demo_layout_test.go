package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"mailroom/internal/app"
	"mailroom/internal/testkit"
	"mailroom/web/webtest"
)

// layoutCheck runs in the page and reports what a person on that screen
// cannot reach or read: the page's width against the viewport, the main
// tables' buttons and links outside the viewport and outside a scroll box
// of their own, navigation items that are off-screen or hidden, Go's
// duration format anywhere in the text, and the Forms chart's bars'
// contrast with their background.
const layoutCheck = `(() => {
  const vw = window.innerWidth;
  const out = {scrollWidth: document.documentElement.scrollWidth, viewport: vw, tables: [], nav: [], navCount: 0, goDurations: [], bars: 0, minContrast: 0, scrolling: []};
  const inViewport = r => r.left >= -1 && r.right <= vw + 1;
  // scrollBox is the nearest ancestor that scrolls sideways by itself
  // and fits the viewport.
  const scrollBox = el => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX;
      if ((ox === "auto" || ox === "scroll") && inViewport(p.getBoundingClientRect())) return p;
    }
    return null;
  };
  document.querySelectorAll("main table").forEach(t => {
    t.querySelectorAll("a, button").forEach(el => {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) return; // not shown (a closed details)
      if (inViewport(r) || scrollBox(el)) return;
      out.tables.push((el.textContent || "").trim().slice(0, 40) + " at " + Math.round(r.left) + ".." + Math.round(r.right));
    });
  });
  document.querySelectorAll("nav.nav a").forEach(a => {
    out.navCount++;
    const r = a.getBoundingClientRect();
    const st = getComputedStyle(a);
    if (r.width === 0 || r.height === 0 || !inViewport(r) || st.visibility === "hidden") {
      out.nav.push(a.textContent.trim());
      return;
    }
    // Clipped by a scroller that hides it?
    for (let p = a.parentElement; p && p !== document.body; p = p.parentElement) {
      const pr = p.getBoundingClientRect();
      if (getComputedStyle(p).overflowX !== "visible" && (r.left < pr.left - 1 || r.right > pr.right + 1)) { out.nav.push(a.textContent.trim()); return; }
    }
  });
  // Tables that scroll sideways inside their box.
  out.scrolling = [...document.querySelectorAll("main .table-wrap")].filter(w => w.scrollWidth > w.clientWidth + 1).map(w => (w.querySelector("table") || w).className);
  const goDur = /\b\d+h\d+m\d+s\b|\b\d+m\d+s\b|\b\d+\.\d+s\b/g;
  out.goDurations = (document.body.innerText.match(goDur) || []).slice(0, 10);
  // Contrast (WCAG relative luminance) of the Forms chart's bars with
  // the background behind them.
  const rgb = s => { const m = s.match(/[\d.]+/g) || []; return m.map(Number); };
  const lum = c => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }; return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]); };
  const bgOf = el => { for (let p = el; p; p = p.parentElement) { const c = rgb(getComputedStyle(p).backgroundColor); if (c.length >= 3 && (c.length < 4 || c[3] > 0)) return c; } return [255, 255, 255]; };
  const bars = document.querySelectorAll("svg.rows-chart rect");
  out.bars = bars.length;
  let min = 99;
  bars.forEach(b => {
    const st = getComputedStyle(b);
    const bg = bgOf(b.closest("svg"));
    let fill = rgb(st.fill);
    const op = parseFloat(st.fillOpacity) * parseFloat(st.opacity);
    fill = fill.slice(0, 3).map((v, i) => v * op + bg[i] * (1 - op)); // composed over the background
    const [a, c] = [lum(fill), lum(bg)];
    min = Math.min(min, (Math.max(a, c) + 0.05) / (Math.min(a, c) + 0.05));
  });
  out.minContrast = bars.length ? min : 0;
  return JSON.stringify(out);
})()`

type layoutResult struct {
	ScrollWidth int      `json:"scrollWidth"`
	Viewport    int      `json:"viewport"`
	Tables      []string `json:"tables"`
	Nav         []string `json:"nav"`
	NavCount    int      `json:"navCount"`
	GoDurations []string `json:"goDurations"`
	Bars        int      `json:"bars"`
	MinContrast float64  `json:"minContrast"`
	Scrolling   []string `json:"scrolling"`
}

// TestDemoLayout signs in to the demo and visits every admin page at a
// phone's width (390 px) and a laptop's (1,360 px), and at 360, 768 and
// 1,024 px: no page is wider than
// the screen, every button and link of a page's tables is on screen or in
// a scroll box of its own, every navigation item is on screen, no text is
// in Go's duration format, and the Forms chart's bars contrast with their
// background at 3:1 or more; at 1,360 px no table scrolls inside its card.
// With MAILROOM_SCREENSHOT_DIR set it keeps a
// screenshot of each page at each width (layout-WIDTH-PAGE.png).
func TestDemoLayout(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test skipped in -short mode")
	}
	webtest.ChromiumPath(t) // skip (or fail under CI) before starting the demo
	ta := startApp(t, func(c *app.Config) {
		c.Demo = true
		c.DemoScale = 0.02
		c.SheetsFlushDelay = 300 * time.Millisecond
	})
	d := demoOf(t, ta)
	snap := waitDemoSeeded(t, ta, 30*time.Second)
	// A dead letter for the dead-letter pages, and rows in the sheets for
	// the Forms chart.
	_, deadID := demoPoison(t, ta, d)
	testkit.Eventually(t, 30*time.Second, "rows written to the demo sheets", func() bool {
		var forms struct {
			Forms []struct {
				RowsWritten int `json:"rowsWritten"`
			} `json:"forms"`
		}
		ta.JSON(http.MethodGet, "/api/v1/forms", nil, http.StatusOK, &forms)
		for _, f := range forms.Forms {
			if f.RowsWritten > 0 {
				return true
			}
		}
		time.Sleep(200 * time.Millisecond)
		return false
	})
	accID := snap.accounts[demoAccounts[0].Email].ID
	testkit.Eventually(t, 30*time.Second, "a delivery to the demo's webhook receiver", func() bool { return d.receiver.Stats().Verified > 0 })
	hookID := d.receiver.Stats().WebhookID

	pages := []struct{ name, path string }{
		{"overview", "/admin"},
		{"deadletters", "/admin/deadletters"},
		{"deadletter", "/admin/deadletters/" + deadID},
		{"demo-mailbox", "/admin/demo/mailbox"},
		{"demo-sheets", "/admin/demo/sheets"},
		{"demo-alerts", "/admin/demo/alerts"},
		{"accounts", "/admin/accounts"},
		{"account", "/admin/accounts/" + accID},
		{"rules", "/admin/rules"},
		{"rules-editor", "/admin/rules/" + snap.userID},
		{"forms", "/admin/forms"},
		{"setup", "/admin/setup"},
		{"webhooks", "/admin/webhooks"},
		{"webhook", "/admin/webhooks/" + hookID},
		{"tokens", "/admin/tokens"},
		{"logout", "/admin/logout"},
	}

	br := webtest.Start(t, 1360, 900, 3*time.Minute)
	shots := os.Getenv("MAILROOM_SCREENSHOT_DIR") != ""
	br.Do("sign in",
		chromedp.Navigate(ta.URL+"/admin/login"),
		chromedp.WaitVisible(chromedp.CSS(`#password`)),
		chromedp.SendKeys(chromedp.CSS(`#password`), ta.Config().AdminPassword),
		chromedp.Submit(chromedp.CSS(`#password`)),
		chromedp.WaitVisible(chromedp.CSS(`.topbar`)),
	)
	// A token, so the tokens page shows its one-time box and a row.
	br.Do("make a token",
		chromedp.Navigate(ta.URL+"/admin/tokens"),
		chromedp.WaitVisible(chromedp.CSS(`#token-name`)),
		chromedp.SendKeys(chromedp.CSS(`#token-name`), "nightly-report-for-the-finance-team"),
		chromedp.Submit(chromedp.CSS(`#token-name`)),
		chromedp.WaitVisible(chromedp.CSS(`#new-token`)),
	)

	// 390 and 1,360 px with screenshots; 360, 768 and 1,024 px checked too.
	for _, width := range []int{390, 1360, 360, 768, 1024} {
		height := int64(900)
		if width < 400 {
			height = 844
		}
		br.Do(fmt.Sprintf("set the viewport to %d px", width), chromedp.EmulateViewport(int64(width), height))
		for _, p := range pages {
			step := fmt.Sprintf("%s at %d px", p.name, width)
			br.Do("open "+step,
				chromedp.Navigate(ta.URL+p.path),
				chromedp.WaitVisible(chromedp.CSS(`main h1`)),
			)
			ctx, cancel := context.WithTimeout(br.Ctx, 10*time.Second)
			raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](layoutCheck))
			cancel()
			if err != nil {
				t.Fatalf("check %s: %v", step, err)
			}
			var r layoutResult
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				t.Fatalf("check %s: %v", step, err)
			}
			if r.ScrollWidth > r.Viewport {
				t.Errorf("%s: the page is %d px wide, wider than the %d px screen", step, r.ScrollWidth, r.Viewport)
			}
			if len(r.Tables) > 0 {
				t.Errorf("%s: table buttons and links off-screen and not in a scroll box: %s", step, strings.Join(r.Tables, "; "))
			}
			if r.NavCount == 0 {
				t.Errorf("%s: no navigation", step)
			}
			if len(r.Nav) > 0 {
				t.Errorf("%s: navigation items off-screen or hidden: %s", step, strings.Join(r.Nav, ", "))
			}
			if len(r.GoDurations) > 0 {
				t.Errorf("%s: Go's duration format in the text: %s", step, strings.Join(r.GoDurations, ", "))
			}
			if p.name == "forms" {
				if r.Bars == 0 {
					t.Errorf("%s: the chart draws no bars", step)
				} else if r.MinContrast < 3 {
					t.Errorf("%s: the chart's bars contrast %.2f:1 with their background, want 3:1 or more", step, r.MinContrast)
				}
			}
			// On a laptop every table fits its card (Accounts did not).
			if width >= 1360 && len(r.Scrolling) > 0 {
				t.Errorf("%s: tables wider than their card: %s", step, strings.Join(r.Scrolling, ", "))
			}
			if shots && (width == 390 || width == 1360) {
				br.Do("screenshot "+step, br.Shot(fmt.Sprintf("layout-%d-%s.png", width, p.name), false))
			}
		}
	}
	br.CheckProblems()
}
