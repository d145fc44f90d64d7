package app_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/queue/broker"
	"mailroom/queue/broker/brokertest"
)

// fleetProc is one mailroom process of TestFleetOfThreeProcesses with what
// it was given: its accounts' addresses and ids, and its form.
type fleetProc struct {
	name    string
	p       *proc
	refresh map[string]string // by address
	user    string
	emails  []string
	ids     []string
	form    string
	book    string
	endedAt time.Duration // when its last account and its form were done
	synced  time.Duration // when its last account was done
	written time.Duration // when its form's rows were done
}

// fleetCase is the project's limits in TestFleetOfThreeProcesses, each far
// below what one mailroom would spend alone, in a compressed window.
const (
	fleetWindow        = 3 * time.Second
	fleetGmailUnits    = 1500 // the project's Gmail units a window
	fleetSheetsWrites  = 6    // the project's Sheets writes a window
	fleetRowsPerForm   = 40
	fleetRowsPerWrite  = 5
	fleetMessagesFirst = 60  // per account, the fairness phase
	fleetMessagesKill  = 250 // per account, the SIGKILL phase
)

// TestFleetOfThreeProcesses runs three mailroom processes (the built
// binary, their own data dirs and embedded brokers) on one Google project,
// with one redis-server as the fleet's Redis and the emulator holding the
// project's Gmail units and Sheets writes far below what the three would
// spend alone (a window of 3 s stands for Google's minute, in the emulator
// and in the mailrooms alike). Google never refuses a call for the
// project, every account's full sync and every form's rows complete, and
// the slowest mailroom ends within 1.3 times the fastest. Then each
// mailroom syncs a large mailbox and one is killed with SIGKILL: within
// one window the other two spend the project's whole limit between them.
func TestFleetOfThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three mailroom processes and a redis-server")
	}
	t.Parallel()
	fleetURL := brokertest.RedisServer(t)
	fake := googlefake.StartForTest(t, googlefake.Options{
		GmailQuotaWindow: fleetWindow, GmailProjectUnitsPerMinute: fleetGmailUnits, GmailUserUnitsPerMinute: -1,
		SheetsWindow: fleetWindow, SheetsWriteLimit: 60, SheetsReadLimit: 300,
		SheetsProjectWriteLimit: fleetSheetsWrites, SheetsProjectReadLimit: 300,
	})
	fleet := make([]*fleetProc, 3)
	for i, name := range []string{"mail-a", "mail-b", "mail-c"} {
		fleet[i] = startFleetProc(t, fake, fleetURL, name)
	}
	testkit.EventuallyNil(t, 3*broker.FleetBeat, "each mailroom to see the other two", func() error {
		for _, m := range fleet {
			if got := procMetric(t, m.p, "mailroom_fleet_mailrooms"); got != 3 {
				return fmt.Errorf("%s sees %v mailrooms", m.name, got)
			}
		}
		return nil
	})

	// The fairness phase: two mailboxes and a form's rows each, all given
	// at once.
	for i, m := range fleet {
		for j := range 2 {
			m.mailbox(t, fake, fmt.Sprintf("%s-%d@example.com", m.name, j), fleetMessagesFirst, uint64(10*i+j+1))
		}
	}
	began := time.Now()
	each(t, fleet, func(m *fleetProc) error {
		for _, email := range m.emails {
			if err := m.connect(email); err != nil {
				return err
			}
		}
		if err := m.makeForm(fake); err != nil {
			return err
		}
		return m.submit(fleetRowsPerForm)
	})
	testkit.EventuallyNil(t, 90*time.Second, "every full sync and every form's rows", func() error {
		left := 0
		for _, m := range fleet {
			if m.endedAt == 0 && m.done(t, fake, time.Since(began)) {
				m.endedAt = max(m.synced, m.written)
			}
			if m.endedAt == 0 {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("%d mailrooms not done", left)
		}
		return nil
	})
	fast, slow := fleet[0].endedAt, fleet[0].endedAt
	for _, m := range fleet {
		fast, slow = min(fast, m.endedAt), max(slow, m.endedAt)
	}
	for _, m := range fleet {
		t.Logf("%s: full syncs done at %s, rows at %s", m.name, m.synced, m.written)
	}
	t.Logf("done: %s %s, %s %s, %s %s; the project's busiest Gmail window %d of %d units, Sheets %d of %d writes",
		fleet[0].name, fleet[0].endedAt, fleet[1].name, fleet[1].endedAt, fleet[2].name, fleet[2].endedAt,
		fake.Gmail.PeakProjectUnits(), fleetGmailUnits, fake.Sheets.Stats().ProjectMaxWritesInWindow, fleetSheetsWrites)
	if slow > fast*13/10 {
		t.Errorf("the slowest mailroom ended at %s, the fastest at %s: want within 1.3 times", slow, fast)
	}
	if fast < 3*fleetWindow {
		t.Errorf("the fastest mailroom ended at %s: the project's limits never bound, so the test shows nothing", fast)
	}
	assertNoProjectRefusal(t, fake)

	// The SIGKILL phase: each syncs a large mailbox; one is killed.
	survivors, victim := fleet[:2], fleet[2]
	units := func(ms []*fleetProc) int {
		n := 0
		for _, m := range ms {
			for _, e := range m.emails {
				n += fake.Gmail.QuotaUnits(e)
			}
		}
		return n
	}
	for i, m := range fleet {
		m.mailbox(t, fake, m.name+"-big@example.com", fleetMessagesKill, uint64(100+i))
	}
	each(t, fleet, func(m *fleetProc) error { return m.connect(m.emails[len(m.emails)-1]) })
	// All three spend, then one window of the three sharing.
	testkit.EventuallyNil(t, 20*time.Second, "each mailroom to spend on its large mailbox", func() error {
		for _, m := range fleet {
			if fake.Gmail.QuotaUnits(m.emails[len(m.emails)-1]) < fleetGmailUnits/10 {
				return fmt.Errorf("%s has not spent yet", m.name)
			}
		}
		return nil
	})
	time.Sleep(fleetWindow) // a window of the steady three-way share (the measurement itself)
	s0, v0 := units(survivors), units(fleet[2:])
	time.Sleep(fleetWindow)
	shared, victimShare := units(survivors)-s0, units(fleet[2:])-v0
	victim.p.Kill9()
	time.Sleep(fleetWindow) // the share the victim held leaves the project's window
	s1 := units(survivors)
	time.Sleep(fleetWindow)
	alone := units(survivors) - s1
	t.Logf("a window's Gmail units: the two survivors %d and the victim %d while three shared; the two %d in the window after the next (of %d)",
		shared, victimShare, alone, fleetGmailUnits)
	if victimShare < fleetGmailUnits/6 {
		t.Fatalf("the victim spent %d units in the window before its kill: it held no share, so the test shows nothing", victimShare)
	}
	if alone < fleetGmailUnits*8/10 || alone < shared*5/4 {
		t.Errorf("after the kill the survivors spent %d units a window (%d before it): want the project's %d, the victim's share freed",
			alone, shared, fleetGmailUnits)
	}
	assertNoProjectRefusal(t, fake)
	for _, m := range survivors {
		if got := procMetric(t, m.p, "mailroom_gmail_quota_units_mine_last_minute"); got <= 0 {
			t.Errorf("%s: mailroom_gmail_quota_units_mine_last_minute %v, want its share", m.name, got)
		}
	}
}

func assertNoProjectRefusal(t *testing.T, fake *googlefake.Server) {
	t.Helper()
	if r := fake.Gmail.TotalQuotaRefusals(); r != 0 {
		t.Errorf("Google refused %d Gmail calls: the fleet spent over the project's limit", r)
	}
	if peak := fake.Gmail.PeakProjectUnits(); peak > fleetGmailUnits {
		t.Errorf("the project's busiest Gmail window had %d units, over its %d", peak, fleetGmailUnits)
	}
	if s := fake.Sheets.Stats(); s.RejectedWrites+s.RejectedReads != 0 || s.ProjectMaxWritesInWindow > fleetSheetsWrites {
		t.Errorf("Sheets: %d writes and %d reads refused, the busiest window %d writes of %d", s.RejectedWrites, s.RejectedReads, s.ProjectMaxWritesInWindow, fleetSheetsWrites)
	}
}

// startFleetProc starts one mailroom of the fleet against the emulator,
// full syncs only (no watch), with a user.
func startFleetProc(t *testing.T, fake *googlefake.Server, fleetURL, name string) *fleetProc {
	t.Helper()
	w := fleetWindow.String()
	p := startProc(t, t.TempDir(),
		"MAILROOM_INSTANCE="+name, "MAILROOM_FLEET_REDIS_URL="+fleetURL,
		"MAILROOM_GOOGLE_API_URL="+fake.URL(), "MAILROOM_GOOGLE_TOKEN_URL="+fake.TokenURL(), "MAILROOM_GOOGLE_CERTS_URL="+fake.CertsURL(),
		"MAILROOM_PUBSUB_TOPIC=", "MAILROOM_GMAIL_POLL_INTERVAL=1h",
		"MAILROOM_GMAIL_QUOTA_WINDOW="+w, "MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE="+strconv.Itoa(fleetGmailUnits),
		"MAILROOM_GMAIL_USER_UNITS_PER_MINUTE=1000000",
		"MAILROOM_SHEETS_QUOTA_WINDOW="+w, "MAILROOM_SHEETS_PROJECT_WRITES_PER_MINUTE="+strconv.Itoa(fleetSheetsWrites),
		"MAILROOM_SHEETS_FLUSH_DELAY=200ms", "MAILROOM_SHEETS_FLUSH_THRESHOLD="+strconv.Itoa(fleetRowsPerWrite),
		"MAILROOM_SUBMISSIONS_PER_FORM=100000", "MAILROOM_SUBMISSIONS_PER_USER=100000",
		"MAILROOM_RETRY_INITIAL=50ms", "MAILROOM_RETRY_MAX=500ms", "MAILROOM_DELAYED_CHECK_INTERVAL=100ms",
	)
	m := &fleetProc{name: name, p: p, refresh: map[string]string{}}
	var u struct{ ID string }
	p.Must(http.MethodPost, "/api/v1/users", map[string]string{"email": "owner@" + name + ".example.com", "name": "Owner"}, http.StatusCreated, &u)
	m.user = u.ID
	return m
}

// each runs fn for every mailroom at once and fails the test on an error.
func each(t *testing.T, fleet []*fleetProc, fn func(*fleetProc) error) {
	t.Helper()
	errs := make(chan error, len(fleet))
	for _, m := range fleet {
		go func() { errs <- fn(m) }()
	}
	for range fleet {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// mailbox gives the emulator a mailbox of n messages for the mailroom.
func (m *fleetProc) mailbox(t *testing.T, fake *googlefake.Server, email string, n int, seed uint64) {
	t.Helper()
	m.refresh[email] = fake.AddAccount(email)
	if _, err := fake.Gmail.Generate(email, n, seed); err != nil {
		t.Fatal(err)
	}
	m.emails = append(m.emails, email)
}

// connect connects the emulator's mailbox through the API.
func (m *fleetProc) connect(email string) error {
	var a gmailTestAccount
	body := map[string]string{"userId": m.user, "email": email, "refreshToken": m.refresh[email]}
	if err := m.p.JSON(http.MethodPost, "/api/v1/accounts", body, http.StatusCreated, &a); err != nil {
		return err
	}
	m.ids = append(m.ids, a.ID)
	return nil
}

// makeForm makes a form on the first account's spreadsheet.
func (m *fleetProc) makeForm(fake *googlefake.Server) error {
	book, err := fake.Sheets.CreateSpreadsheet(m.emails[0], "Survey", "Responses")
	if err != nil {
		return err
	}
	var f sheetsForm
	m.form, m.book = "", book
	err = m.p.JSON(http.MethodPost, "/api/v1/forms", map[string]any{
		"userId": m.user, "accountId": m.ids[0], "spreadsheetId": book, "sheet": "Responses", "columns": []string{"name"},
	}, http.StatusCreated, &f)
	m.form = f.ID
	return err
}

func (m *fleetProc) submit(n int) error {
	for i := range n {
		body := map[string]any{"answers": map[string]any{"name": fmt.Sprint(m.name, "-", i)}}
		if err := m.p.JSON(http.MethodPost, "/api/v1/forms/"+m.form+"/submissions", body, http.StatusAccepted, nil); err != nil {
			return err
		}
	}
	return nil
}

// done reports whether every account is ready with its whole mailbox and
// every row is in the form's sheet, noting when each became so.
func (m *fleetProc) done(t *testing.T, fake *googlefake.Server, since time.Duration) bool {
	t.Helper()
	if m.synced == 0 && m.syncedAll(t, fake) {
		m.synced = since
	}
	if m.written == 0 && m.wroteAll(t, fake) {
		m.written = since
	}
	return m.synced > 0 && m.written > 0
}

func (m *fleetProc) syncedAll(t *testing.T, fake *googlefake.Server) bool {
	t.Helper()
	for i, id := range m.ids {
		var a gmailTestAccount
		m.p.Must(http.MethodGet, "/api/v1/accounts/"+id, nil, http.StatusOK, &a)
		if a.Status != "ready" || a.MessageCounts.Total != fake.Gmail.MessageCount(m.emails[i]) {
			return false
		}
	}
	return true
}

func (m *fleetProc) wroteAll(t *testing.T, fake *googlefake.Server) bool {
	t.Helper()
	var f sheetsForm
	m.p.Must(http.MethodGet, "/api/v1/forms/"+m.form, nil, http.StatusOK, &f)
	rows, err := fake.Sheets.Rows(m.book, "Responses")
	if err != nil {
		t.Fatal(err)
	}
	return f.RowsWritten == fleetRowsPerForm && len(rows) == fleetRowsPerForm
}

// procMetric reads one series of a process's /metrics (0 when absent).
func procMetric(t *testing.T, p *proc, series string) float64 {
	t.Helper()
	status, raw, err := p.Do(http.MethodGet, "/metrics", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", status, err)
	}
	return parseMetrics(string(raw))[series]
}
