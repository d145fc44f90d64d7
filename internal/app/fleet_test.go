package app_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker/brokertest"
)

// TestFleetSharesTheProject runs two mailrooms (their own data dirs and
// embedded brokers) on one Google project whose Gmail limit is lower than
// what the two would spend alone, with one redis-server as their fleet's
// Redis: the project's units are spent there, so the emulator never
// refuses a call, every account's full sync completes, and the two finish
// close together. The overview shows the other mailroom.
func TestFleetSharesTheProject(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two mailrooms and a redis-server")
	}
	t.Parallel()
	const (
		window  = 3 * time.Second
		project = 1500 // units a window for the whole project
	)
	fleetURL := brokertest.RedisServer(t)
	fake := googlefake.StartForTest(t, googlefake.Options{GmailQuotaWindow: window, GmailProjectUnitsPerMinute: project, GmailUserUnitsPerMinute: -1})
	start := func(name string) *apptest.App {
		return apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
			cfg.Instance, cfg.FleetRedisURL = name, fleetURL
			cfg.GmailQuotaWindow, cfg.GmailProjectUnits, cfg.GmailUserUnits = window, project, 100_000
			cfg.PubSubTopic = "" // full syncs only
		}))
	}
	apps := map[string]*apptest.App{"mail-a": start("mail-a"), "mail-b": start("mail-b")}
	type acct struct{ app, id, email string }
	var accts []acct
	for name, ta := range apps {
		user := createUser(ta, "owner-"+name+"@example.com")
		for i := range 2 {
			email := fmt.Sprintf("%s-%d@example.com", name, i)
			fake.AddAccount(email)
			if _, err := fake.Gmail.Generate(email, 120, uint64(len(accts)+1)); err != nil {
				t.Fatal(err)
			}
			accts = append(accts, acct{name, connectAccount(ta, fake, user, email).ID, email})
		}
	}
	began := time.Now()
	done := map[string]time.Duration{}
	testkit.Eventually(t, 3*time.Minute, "every account's full sync", func() bool {
		for _, a := range accts {
			if _, ok := done[a.app+a.id]; ok {
				continue
			}
			if account(apps[a.app], a.id).Status == "ready" {
				done[a.app+a.id] = time.Since(began)
			}
		}
		return len(done) == len(accts)
	})
	for _, a := range accts {
		waitMirror(apps[a.app], fake, a.id, a.email, 10*time.Second)
	}
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d calls: the two mailrooms together spent over the project's limit", r)
	}
	if peak := fake.Gmail.PeakProjectUnits(); peak > project {
		t.Errorf("the project's busiest window had %d units, over its %d", peak, project)
	}
	last := map[string]time.Duration{}
	for _, a := range accts {
		last[a.app] = max(last[a.app], done[a.app+a.id])
	}
	fast, slow := min(last["mail-a"], last["mail-b"]), max(last["mail-a"], last["mail-b"])
	t.Logf("full syncs done: mail-a %s, mail-b %s; the project's busiest window %d of %d units", last["mail-a"], last["mail-b"], fake.Gmail.PeakProjectUnits(), project)
	if slow > fast*13/10+window {
		t.Errorf("the slower mailroom ended at %s, the faster at %s: want within 1.3 times (and a window)", slow, fast)
	}
	if slow < 2*window {
		t.Errorf("the syncs took %s: the project's limit never bound, so the test shows nothing", slow)
	}
	m := scrapeMetrics(apps["mail-a"])
	if m["mailroom_fleet_mailrooms"] != 2 || m["mailroom_fleet_up"] != 1 {
		t.Errorf("fleet metrics: mailrooms %v, up %v; want 2 and 1", m["mailroom_fleet_mailrooms"], m["mailroom_fleet_up"])
	}
	status, _ := apps["mail-b"].Do(http.MethodGet, "/readyz", nil)
	if status != http.StatusOK {
		t.Errorf("mail-b not ready: %d", status)
	}
}
