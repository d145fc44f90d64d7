package app_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker"
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

// TestFleetDownSheetsTakeTheirShare: two mailrooms share a fleet's Redis,
// which then stops. Form rows are still written: the Sheets quotas fall
// back to this mailroom's broker with the project's reads and writes
// divided by the two mailrooms it last saw, as the Gmail budget does; the
// form's quota shows that share, the Overview page says so and
// mailroom_fleet_up is 0.
func TestFleetDownSheetsTakeTheirShare(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two mailrooms and a redis-server it stops")
	}
	t.Parallel()
	fleetRedis := brokertest.StartRedisProcess(t)
	fake := googlefake.StartForTest(t, googlefake.Options{})
	fleet := func(name string) func(*app.Config) {
		return func(cfg *app.Config) {
			cfg.Instance, cfg.FleetRedisURL = name, fleetRedis.URL()
			cfg.SheetsQuotaWindow = time.Minute
			cfg.SheetsProjectWritesPerMinute, cfg.SheetsProjectReadsPerMinute = 200, 250
		}
	}
	ta, userID, accountID, book := sheetsApp(t, fake, fleet("mail-a"))
	apptest.Start(t, withGoogle(fake, fleet("mail-b")))
	testkit.Eventually(t, 3*broker.FleetBeat, "mail-a to see mail-b", func() bool {
		return scrapeMetrics(ta)["mailroom_fleet_mailrooms"] == 2
	})
	var f sheetsForm
	ta.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": userID, "accountId": accountID, "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name"},
	}, http.StatusCreated, &f)

	fleetRedis.Stop()
	for i := range 3 {
		ta.JSON(http.MethodPost, "/api/v1/forms/"+f.ID+"/submissions", map[string]any{"answers": map[string]string{"name": fmt.Sprint("n", i)}}, http.StatusAccepted, nil)
	}
	testkit.Eventually(t, 15*time.Second, "3 rows written with the fleet's Redis down", func() bool { return getForm(ta, f.ID).RowsWritten == 3 })
	var got struct {
		Quota sheetsQuota `json:"quota"`
	}
	ta.JSON(http.MethodGet, "/api/v1/forms/"+f.ID, nil, http.StatusOK, &got)
	if q := got.Quota; q.ProjectWrites.Limit != 100 || q.ProjectReads.Limit != 125 || q.ProjectWrites.LastMinute < 1 {
		t.Errorf("the form's quota with the fleet's Redis down: %+v; want half the project's 200 writes and 250 reads, the writes counted", q)
	}
	if m := scrapeMetrics(ta); m["mailroom_fleet_up"] != 0 {
		t.Errorf("mailroom_fleet_up %v with the fleet's Redis down, want 0", m["mailroom_fleet_up"])
	}
	if page := adminGet(t, ta, "/admin"); !strings.Contains(page, "1/2 of the project&#39;s Gmail units and of its Sheets reads and writes") {
		t.Errorf("the Overview page does not say the Sheets share:\n%s", page)
	}
}
