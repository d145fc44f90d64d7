package demo

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/gmail"
	"mailroom/web/webtest"
)

// demoOf returns the app's demo service.
func demoOf(t *testing.T, ta *apptest.App) *demo {
	t.Helper()
	for _, s := range ta.Services() {
		if d, ok := s.(*demo); ok {
			return d
		}
	}
	t.Fatal("the app has no demo service")
	return nil
}

// startDemo starts the app with --demo on dataDir, with small mailboxes
// and a short flush delay.
func startDemo(t *testing.T, dataDir string) *apptest.App {
	t.Helper()
	return startApp(t, func(c *app.Config) {
		c.Demo = true
		c.DemoScale = 0.02 // 60, 10 and 5 messages
		c.SheetsFlushDelay = 300 * time.Millisecond
		if dataDir != "" {
			c.DataDir = dataDir
		}
	})
}

// waitDemoSeeded waits within d for the demo's user, its two accounts in
// sync and its three rules, and returns them.
func waitDemoSeeded(t *testing.T, ta *apptest.App, d time.Duration) demoSnapshot {
	t.Helper()
	var snap demoSnapshot
	testkit.Eventually(t, d, "the demo user, its two accounts in sync and three rules", func() bool {
		snap = demoSnapshotOf(ta)
		ready := 0
		for _, acc := range demoAccounts {
			if a, ok := snap.accounts[acc.Email]; ok && a.Status == "ready" {
				ready++
			}
		}
		return ready == 2 && len(snap.rules) == 3
	})
	return snap
}

type demoSnapshot struct {
	userID   string
	accounts map[string]demoAPIAccount // by email
	rules    map[string]string         // label -> id
}

func demoSnapshotOf(ta *apptest.App) demoSnapshot {
	s := demoSnapshot{accounts: map[string]demoAPIAccount{}, rules: map[string]string{}}
	var users struct {
		Users []demoAPIUser `json:"users"`
	}
	ta.JSON(http.MethodGet, "/api/v1/users", nil, http.StatusOK, &users)
	for _, u := range users.Users {
		if u.Email == demoUserEmail {
			s.userID = u.ID
		}
	}
	if s.userID == "" {
		return s
	}
	var accs struct {
		Accounts []demoAPIAccount `json:"accounts"`
	}
	ta.JSON(http.MethodGet, "/api/v1/accounts", nil, http.StatusOK, &accs)
	for _, a := range accs.Accounts {
		s.accounts[a.Email] = a
	}
	var rules struct {
		Rules []demoAPIRule `json:"rules"`
	}
	ta.JSON(http.MethodGet, "/api/v1/users/"+s.userID+"/rules", nil, http.StatusOK, &rules)
	for _, r := range rules.Rules {
		s.rules[r.Label] = r.ID
	}
	return s
}

// TestDemo runs `serve --demo` in process and checks, within a minute,
// what a newcomer should see: the seed, synced accounts, sheet rows, the
// always-failing message in the dead letters with its alert, labels from
// the rules in the emulated mailbox, and the demo pages.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo for up to a minute")
	}
	t.Parallel()
	start := time.Now()
	ta := startDemo(t, "")
	d := demoOf(t, ta)
	const deadline = 60 * time.Second

	waitDemoSeeded(t, ta, deadline)
	t.Logf("seeded and in sync after %s", time.Since(start).Round(time.Millisecond))

	testkit.Eventually(t, deadline, "rows in both emulated sheets", func() bool {
		for i, s := range demoSheets {
			rows, err := d.fake.Sheets.Rows(d.sheetIDs[i], s.Sheet)
			if err != nil || len(rows) == 0 {
				return false
			}
		}
		return true
	})
	// A flush writes the rows, then records them: the sheet may show rows
	// a few milliseconds before the form counts them.
	st := d.loadState()
	for i, s := range demoSheets {
		id := st.Forms[d.sheetIDs[i]+"/"+s.Sheet]
		testkit.Eventually(t, 5*time.Second, "form "+id+" ("+s.Title+") to count the rows in its sheet", func() bool {
			var f demoAPIForm
			ta.JSON(http.MethodGet, "/api/v1/forms/"+id, nil, http.StatusOK, &f)
			return f.RowsWritten > 0
		})
	}
	t.Logf("sheet rows after %s", time.Since(start).Round(time.Millisecond))

	var dead demoAPIDeadLetter
	testkit.Eventually(t, deadline, "the always-failing message in the dead letters", func() bool {
		var list struct {
			DeadLetters []demoAPIDeadLetter `json:"deadletters"`
		}
		ta.JSON(http.MethodGet, "/api/v1/deadletters?type="+gmail.TypeMessageAdded, nil, http.StatusOK, &list)
		if len(list.DeadLetters) > 0 {
			dead = list.DeadLetters[0]
			return true
		}
		return false
	})
	t.Logf("dead letter %s after %s: %s", dead.ID, time.Since(start).Round(time.Millisecond), dead.Payload)
	testkit.Eventually(t, deadline, "its alert at the demo webhook", func() bool {
		for _, a := range d.webhook.alerts() {
			if strings.Contains(a.Text, gmail.TypeMessageAdded) {
				return true
			}
		}
		return false
	})

	testkit.Eventually(t, deadline, "a rule's label on a message of the emulated mailbox", func() bool {
		for _, acc := range demoAccounts[:2] {
			names := d.fake.Gmail.LabelNames(acc.Email)
			for _, m := range d.fake.Gmail.Messages(acc.Email) {
				for _, l := range m.LabelIDs {
					if n := names[l]; n == "GitHub" || n == "Receipts" || n == "Newsletters" {
						return true
					}
				}
			}
		}
		return false
	})
	t.Logf("labels in the emulated mailbox after %s", time.Since(start).Round(time.Millisecond))

	// The built-in receiver verifies the events webhook's deliveries.
	testkit.Eventually(t, deadline, "events verified by the demo's webhook receiver", func() bool {
		return d.receiver.Stats().Verified > 0
	})
	if st := d.receiver.Stats(); st.Refused != 0 || st.WebhookID == "" {
		t.Errorf("the demo receiver: %+v, want no delivery refused", st)
	}

	c := adminClient(t, ta)
	for path, want := range map[string]string{
		"/admin/demo/mailbox": demoAccounts[0].Email,
		"/admin/demo/mailbox?account=" + demoAccounts[1].Email:             "Scanned document 0042.pdf",
		"/admin/demo/mailbox?account=" + demoAccounts[0].Email + "&page=2": "Newer", // 60+ messages: page 2 of 2
		"/admin/demo/sheets": "Event sign-ups",
		"/admin/demo/alerts": "events verified",
		"/admin":             "simulated Google",
	} {
		status, body := get(t, c, ta.URL+path)
		if status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: status %d, want 200 with %q; body:\n%.2000s", path, status, want, body)
		}
	}
	for _, path := range []string{"/admin/demo/mailbox?account=nobody@example.com", "/admin/demo/mailbox?page=x"} {
		if status, _ := get(t, c, ta.URL+path); status != http.StatusNotFound && status != http.StatusBadRequest {
			t.Errorf("GET %s: status %d, want 404 or 400", path, status)
		}
	}
	t.Logf("all checks passed after %s", time.Since(start).Round(time.Millisecond))
}

// TestDemoRestartReusesSeed starts the demo twice on one data dir: the
// second start finds the user, reconnects the same accounts, keeps the
// forms and rules, and its new mail still reaches the mirror.
func TestDemoRestartReusesSeed(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the demo twice")
	}
	t.Parallel()
	dir := t.TempDir()
	first := startDemo(t, dir)
	var before demoSnapshot
	testkit.Eventually(t, 60*time.Second, "the first seed", func() bool {
		before = demoSnapshotOf(first)
		ready := 0
		for _, a := range before.accounts {
			if a.Status == "ready" {
				ready++
			}
		}
		return ready == 2 && len(before.rules) == 3 && len(demoOf(t, first).loadState().Forms) == 2
	})
	formsBefore := demoOf(t, first).loadState().Forms
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	second := startDemo(t, dir)
	d := demoOf(t, second)
	var after demoSnapshot
	// Reconnected to the new emulator and synced in full: their watermarks
	// moved on to its (higher) history ids.
	testkit.Eventually(t, 60*time.Second, "the second start's accounts in sync again", func() bool {
		after = demoSnapshotOf(second)
		ready := 0
		for email, a := range after.accounts {
			was, _ := strconv.ParseUint(before.accounts[email].HistoryID, 10, 64)
			now, _ := strconv.ParseUint(a.HistoryID, 10, 64)
			if a.Status == "ready" && now > was {
				ready++
			}
		}
		return ready == 2
	})
	if after.userID != before.userID || len(after.accounts) != 2 || len(after.rules) != 3 {
		t.Fatalf("after a restart: user %s (was %s), %d accounts, %d rules", after.userID, before.userID, len(after.accounts), len(after.rules))
	}
	for email, a := range before.accounts {
		if after.accounts[email].ID != a.ID {
			t.Errorf("account %s: id %s after the restart, was %s", email, after.accounts[email].ID, a.ID)
		}
	}
	for label, id := range before.rules {
		if after.rules[label] != id {
			t.Errorf("rule %s: id %s after the restart, was %s", label, after.rules[label], id)
		}
	}
	// One webhook to the receiver: the first run's, to its old port, is
	// replaced, and the new one's deliveries verify.
	var hooks struct {
		Webhooks []demoAPIWebhook `json:"webhooks"`
	}
	second.JSON(http.MethodGet, "/api/v1/webhooks", nil, http.StatusOK, &hooks)
	if len(hooks.Webhooks) != 1 || hooks.Webhooks[0].URL != d.receiver.url {
		t.Errorf("webhooks after the restart: %+v, want one to %s", hooks.Webhooks, d.receiver.url)
	}
	testkit.Eventually(t, 60*time.Second, "the second receiver verifying events", func() bool { return d.receiver.Stats().Verified > 0 })
	if got := d.loadState().Forms; len(got) != 2 || got[d.sheetIDs[0]+"/"+demoSheets[0].Sheet] != formsBefore[d.sheetIDs[0]+"/"+demoSheets[0].Sheet] {
		t.Errorf("forms after the restart %v, were %v", got, formsBefore)
	}

	// Mail that arrives after the restart reaches mailroom's mirror: its
	// ids and history ids do not collide with the first run's.
	email := demoAccounts[1].Email
	id, err := d.fake.Gmail.AddMessage(email, fakeMessage(email))
	if err != nil {
		t.Fatal(err)
	}
	accID := after.accounts[email].ID
	testkit.Eventually(t, 60*time.Second, "a message delivered after the restart in mailroom's mirror", func() bool {
		status, _ := second.Do(http.MethodGet, "/api/v1/accounts/"+accID+"/messages/"+id, nil)
		return status == http.StatusOK
	})
}

func fakeMessage(to string) googlefake.Message {
	return googlefake.Message{From: "Ada <ada@example.org>", To: to, Subject: "After the restart", Body: "Still here."}
}

// adminClient signs in to the admin page and returns a client with the
// session cookie that does not follow redirects.
func adminClient(t *testing.T, ta *apptest.App) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := webtest.SignIn(c, ta.URL, url.Values{"password": {ta.Config().AdminPassword}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign in: status %d, want 303", resp.StatusCode)
	}
	return c
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

func TestDemoLogHandlerDemotesDemoRequests(t *testing.T) {
	t.Parallel()
	var buf strings.Builder
	log := slog.New(demoLogHandler{slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})}).With("component", "web")
	demoCtx := context.WithValue(context.Background(), demoRequestKey{}, true)
	log.InfoContext(demoCtx, "demo request")
	log.WarnContext(demoCtx, "demo warning")
	log.InfoContext(context.Background(), "someone else's request")
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 || lines[0]["msg"] != "demo warning" || lines[1]["msg"] != "someone else's request" || lines[0]["component"] != "web" {
		t.Fatalf("logged %s", buf.String())
	}
}

func TestDemoConfigKeepsExplicitTimings(t *testing.T) {
	t.Parallel()
	ta := startApp(t, func(c *app.Config) {
		c.Demo = true
		c.DemoScale = 0.01
		c.RetryInitial = 3 * time.Second
		c.RetryMax = 4 * time.Second
	})
	cfg := ta.Config()
	if cfg.RetryInitial != 3*time.Second || cfg.RetryMax != 4*time.Second {
		t.Errorf("explicit retry settings changed: %s, %s", cfg.RetryInitial, cfg.RetryMax)
	}
	if cfg.ReclassifyDebounce != 15*time.Second || cfg.ReclassifyTick != 5*time.Second {
		t.Errorf("default reclassify timings not shortened: %s, %s", cfg.ReclassifyDebounce, cfg.ReclassifyTick)
	}
	if cfg.APIToken != apptest.Token || !strings.HasPrefix(cfg.GoogleAPIURL, "http://127.0.0.1:") || cfg.PubSubTopic != demoPubSubTopic {
		t.Errorf("demo settings: token %q, api %q, topic %q", cfg.APIToken, cfg.GoogleAPIURL, cfg.PubSubTopic)
	}
}

// startApp starts the app in process with the demo built in.
func startApp(t *testing.T, mutate func(*app.Config)) *apptest.App {
	t.Helper()
	return apptest.Start(t, mutate, Prepare)
}
