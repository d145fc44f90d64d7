package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/googlefake"
	"mailroom/internal/lifecycle"
)

// The demo's world: one user with a work and a personal Gmail account, a
// third account that the "connect a Gmail account" consent flow signs in
// as, two spreadsheets (one per account, so two write quotas) fed by two
// forms, and three label rules.
const (
	demoUserEmail   = "alex@acme.example"
	demoUserName    = "Alex Rivera"
	demoClientID    = "mailroom-demo.apps.googleusercontent.com"
	demoPubSubTopic = "projects/mailroom-demo/topics/gmail"
	demoStateFile   = "demo-state.json"
)

// demoAccount is one emulated Gmail account.
type demoAccount struct {
	Email string
	Note  string
	Size  int    // messages generated at scale 1
	Seed  uint64 // the same seed makes the same mailbox on every start
	// Connect: the demo connects it to the demo user (the consent account
	// is left for a person to connect through the OAuth flow).
	Connect bool
}

var demoAccounts = []demoAccount{
	{Email: "alex@acme.example", Note: "Alex's work mailbox, connected by the demo", Size: 3000, Seed: 1, Connect: true},
	{Email: "alex.rivera@gmail.example", Note: "Alex's personal mailbox, connected by the demo", Size: 500, Seed: 2, Connect: true},
	{Email: "sam.lee@acme.example", Note: "signs in when you use “Connect a Gmail account”", Size: 200, Seed: 3},
}

// demoSheet is one emulated spreadsheet and the form that writes it.
type demoSheet struct {
	Title   string
	Sheet   string
	Owner   int // index into demoAccounts
	Columns []string
}

var demoSheets = []demoSheet{
	{Title: "Event sign-ups", Sheet: "Responses", Owner: 0, Columns: []string{"name", "email", "session", "dietary"}},
	{Title: "Customer feedback", Sheet: "Sheet1", Owner: 1, Columns: []string{"name", "email", "rating", "comment"}},
}

// demoRule is a label rule with two variants the traffic generator
// alternates between when it edits the rule.
type demoRule struct {
	Label    string
	Variants [2]demoRuleBody
}

type demoCondition struct {
	Field string `json:"field"`
	Op    string `json:"op"`
	Value string `json:"value"`
}

type demoActions struct {
	MarkRead bool `json:"markRead"`
	Archive  bool `json:"archive"`
}

// demoRuleBody is the contract's rule request.
type demoRuleBody struct {
	Label      string          `json:"label"`
	Match      string          `json:"match"`
	Conditions []demoCondition `json:"conditions"`
	Actions    demoActions     `json:"actions"`
}

func demoRules() []demoRule {
	rule := func(label, match string, conds ...demoCondition) demoRuleBody {
		return demoRuleBody{Label: label, Match: match, Conditions: conds}
	}
	return []demoRule{
		{Label: "GitHub", Variants: [2]demoRuleBody{
			rule("GitHub", "any", demoCondition{"from", "contains", "@github.example"}),
			rule("GitHub", "any", demoCondition{"from", "contains", "@github.example"}, demoCondition{"subject", "contains", "[mailroom]"}),
		}},
		{Label: "Receipts", Variants: [2]demoRuleBody{
			rule("Receipts", "any", demoCondition{"subject", "matches", `(?i)receipt|invoice`}),
			rule("Receipts", "any", demoCondition{"subject", "matches", `(?i)receipt|invoice|order #\d+`}),
		}},
		{Label: "Newsletters", Variants: [2]demoRuleBody{
			rule("Newsletters", "any", demoCondition{"any", "contains", "unsubscribe"}),
			rule("Newsletters", "any", demoCondition{"any", "contains", "unsubscribe"}, demoCondition{"from", "contains", "digest@"}),
		}},
	}
}

// demo is `serve --demo`: the emulated Google, the seed and the traffic
// generator (a loop of the app), and the source of the demo pages.
type demo struct {
	log     *slog.Logger
	fake    *googlefake.Server
	api     *demoAPI
	webhook *demoWebhook // nil when a real webhook is configured
	// receiver is the built-in endpoint of the events webhook the seed
	// registers.
	receiver *demoReceiver
	dataDir  string
	scale    float64
	now      func() time.Time

	refresh  []string // refresh tokens, by demoAccounts index
	seeded   [][]string
	sheetIDs []string // spreadsheet ids, by demoSheets index

	lifecycle.Base // Start and Stop

	mu     sync.Mutex
	recent [][]string // recent live message ids, by demoAccounts index
}

// newDemo builds the emulated Google and its fixed data; nothing is sent
// to mailroom until Start.
func newDemo(log *slog.Logger, cfg *app.Config, pushURL string, api *demoAPI, push http.RoundTripper) (*demo, error) {
	now := time.Now()
	d := &demo{
		log: log, api: api, dataDir: cfg.DataDir, scale: cfg.DemoScale, now: time.Now,
		recent: make([][]string, len(demoAccounts)),
	}
	if d.scale <= 0 || d.scale > 1 {
		d.scale = 1
	}
	d.fake = googlefake.New(googlefake.Options{
		Seed:         mrand.Uint64() | 1,
		ClientID:     cfg.GoogleClientID,
		ClientSecret: cfg.GoogleClientSecret,
		// The consent page signs in as this account.
		ConsentAccount: demoAccounts[len(demoAccounts)-1].Email,
		// Clients keep watermarks and per-message history ids across a
		// restart on the same data dir, but the emulator starts empty: its
		// history ids must start above the ones of any earlier run.
		HistoryStart:     uint64(now.UnixMicro()),
		SheetsWriteLimit: cfg.SheetsWritesPerMinute,
		// Gmail's quota and price list as mailroom budgets them (the
		// 2025 list and 15,000 for the demo's project unless set), per
		// minute of Google's.
		GmailQuotaPrices:           cfg.GmailPrices().Name,
		GmailUserUnitsPerMinute:    cfg.GmailUserUnitsInForce(),
		GmailProjectUnitsPerMinute: cfg.GmailProjectUnits,
		GmailQuotaWindow:           cfg.GmailQuotaWindow,
		SheetsWindow:               cfg.SheetsQuotaWindow,
		// Google's read and project quotas as mailroom is told them; the
		// grid and the cell cap are Google's (the emulator's defaults).
		SheetsReadLimit:         cfg.SheetsReadsPerMinute,
		SheetsProjectWriteLimit: cfg.SheetsProjectWritesPerMinute,
		SheetsProjectReadLimit:  cfg.SheetsProjectReadsPerMinute,
		PushURL:                 pushURL,
		PushAudience:            cfg.PushAudience,
		PushServiceAccount:      cfg.PushServiceAccount,
		PushClient:              &http.Client{Transport: push, Timeout: 30 * time.Second},
	})
	if _, err := d.fake.Start(); err != nil {
		return nil, fmt.Errorf("demo: start the emulated Google: %w", err)
	}
	// The spreadsheets come first, so that their ids are the same on every
	// start and the forms of an earlier run keep writing to them.
	for _, s := range demoSheets {
		id, err := d.fake.Sheets.CreateSpreadsheet(demoAccounts[s.Owner].Email, s.Title, s.Sheet)
		if err != nil {
			d.fake.Close()
			return nil, fmt.Errorf("demo: create spreadsheet %q: %w", s.Title, err)
		}
		d.sheetIDs = append(d.sheetIDs, id)
	}
	for _, acc := range demoAccounts {
		d.refresh = append(d.refresh, d.fake.AddAccount(acc.Email))
		if acc.Connect {
			// The rules' labels exist from the start, with the same ids on
			// every start: mailroom's mirror keeps label ids across a
			// restart, and the emulator forgets the labels it made.
			for _, r := range demoRules() {
				if _, err := d.fake.Gmail.CreateLabel(acc.Email, r.Label); err != nil {
					d.fake.Close()
					return nil, fmt.Errorf("demo: create label %q of %s: %w", r.Label, acc.Email, err)
				}
			}
		}
		ids, err := d.fake.Gmail.Generate(acc.Email, d.scaled(acc.Size, 5), acc.Seed)
		if err != nil {
			d.fake.Close()
			return nil, fmt.Errorf("demo: fill the mailbox of %s: %w", acc.Email, err)
		}
		d.seeded = append(d.seeded, ids)
	}
	// Live mail gets ids above any an earlier run handed out: a message
	// id that mailroom saw deleted is never reused.
	d.fake.SkipIDs(uint64(now.UnixMicro()))
	return d, nil
}

// scaled is n times the demo scale, at least least.
func (d *demo) scaled(n, least int) int {
	return max(least, int(math.Round(float64(n)*d.scale)))
}

// close stops the emulator.
func (d *demo) close() error { return d.fake.Close() }

var _ lifecycle.Service = (*demo)(nil)

// Start runs the seed and then the traffic generator in the background
// until Stop (which waits for it); the API is called in process, so the
// HTTP listener need not be up yet.
func (d *demo) Start(ctx context.Context) error {
	return d.StartLoop(ctx, d.run)
}

// demoSecret returns n random bytes as hex.
func demoSecret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return hex.EncodeToString(b)
}

// ---- the seed, through the API ----

// demoIDs is what the seed found or made in mailroom.
type demoIDs struct {
	userID   string
	accounts []string // mailroom account ids, by demoAccounts index ("" if not connected)
	forms    []string // form ids, by demoSheets index
	rules    map[string]string
}

// seed makes the demo user, connects its accounts, and makes the forms and
// rules, looking each up first so that a restart on the same data dir
// reuses them. Each step is retried until it works or ctx ends.
func (d *demo) seed(ctx context.Context) (demoIDs, error) {
	ids := demoIDs{accounts: make([]string, len(demoAccounts)), forms: make([]string, len(demoSheets)), rules: map[string]string{}}
	steps := []struct {
		what string
		fn   func(context.Context, *demoIDs) error
	}{
		{"wait for mailroom to be ready", d.waitReady},
		{"create the demo user", d.seedUser},
		{"register the demo webhook receiver", d.seedWebhook},
		{"connect the demo Gmail accounts", d.seedAccounts},
		{"create the demo label rules", d.seedRules},
		{"create the demo forms", d.seedForms},
	}
	for _, s := range steps {
		if err := d.retry(ctx, s.what, func() error { return s.fn(ctx, &ids) }); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// retry runs fn until it succeeds or ctx ends, warning now and then.
func (d *demo) retry(ctx context.Context, what string, fn func() error) error {
	var warned time.Time
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(warned) > 30*time.Second {
			d.log.Warn("demo: cannot "+what+" yet; trying again", "err", err)
			warned = time.Now()
		}
		if err := demoSleep(ctx, 2*time.Second); err != nil {
			return err
		}
	}
}

// demoSleep waits for d or until ctx ends.
func demoSleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (d *demo) waitReady(ctx context.Context, _ *demoIDs) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://mailroom.demo/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := d.api.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %s", resp.Status)
	}
	return nil
}

type demoAPIUser struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	Name  string `json:"name"`
}

func (d *demo) seedUser(ctx context.Context, ids *demoIDs) error {
	var u demoAPIUser
	err := d.api.do(ctx, http.MethodPost, "/api/v1/users", map[string]string{"email": demoUserEmail, "name": demoUserName}, &u)
	if demoStatusOf(err) == http.StatusConflict {
		var list struct {
			Users []demoAPIUser `json:"users"`
		}
		if err := d.api.do(ctx, http.MethodGet, "/api/v1/users", nil, &list); err != nil {
			return err
		}
		for _, x := range list.Users {
			if strings.EqualFold(x.Email, demoUserEmail) {
				ids.userID = x.ID
				return nil
			}
		}
		return fmt.Errorf("demo: the user %s exists but is not listed", demoUserEmail)
	}
	if err != nil {
		return err
	}
	ids.userID = u.ID
	d.log.Info("demo: user created", "user_id", u.ID, "email", demoUserEmail)
	return nil
}

type demoAPIAccount struct {
	ID        string `json:"id"`
	Email     string `json:"email"`
	Status    string `json:"status"`
	HistoryID string `json:"historyId"`
}

// seedAccounts connects the demo accounts with the emulator's refresh
// tokens. The emulator is new on every start, so an account of an earlier
// run is connected again (a reconnect, which also re-syncs it in full).
func (d *demo) seedAccounts(ctx context.Context, ids *demoIDs) error {
	for i, acc := range demoAccounts {
		if !acc.Connect || ids.accounts[i] != "" {
			continue
		}
		var a demoAPIAccount
		body := map[string]string{"userId": ids.userID, "email": acc.Email, "refreshToken": d.refresh[i]}
		if err := d.api.do(ctx, http.MethodPost, "/api/v1/accounts", body, &a); err != nil {
			return err
		}
		ids.accounts[i] = a.ID
		d.log.Info("demo: Gmail account connected", "account_id", a.ID, "email", acc.Email, "messages", len(d.seeded[i]))
	}
	return nil
}

type demoAPIRule struct {
	ID      string `json:"id"`
	Label   string `json:"label"`
	Version int    `json:"version"`
}

func (d *demo) seedRules(ctx context.Context, ids *demoIDs) error {
	var list struct {
		Rules []demoAPIRule `json:"rules"`
	}
	if err := d.api.do(ctx, http.MethodGet, "/api/v1/users/"+ids.userID+"/rules", nil, &list); err != nil {
		return err
	}
	for _, r := range list.Rules {
		ids.rules[r.Label] = r.ID
	}
	for _, r := range demoRules() {
		if ids.rules[r.Label] != "" {
			continue
		}
		var out struct {
			Rule demoAPIRule `json:"rule"`
		}
		err := d.api.do(ctx, http.MethodPost, "/api/v1/users/"+ids.userID+"/rules", r.Variants[0], &out)
		if demoStatusOf(err) == http.StatusConflict {
			return fmt.Errorf("demo: rule %q exists but is not listed", r.Label)
		}
		if err != nil {
			return err
		}
		ids.rules[r.Label] = out.Rule.ID
		d.log.Info("demo: rule created", "rule_id", out.Rule.ID, "label", r.Label)
	}
	return nil
}

// demoState is what the demo keeps in the data dir between starts: the
// contract has no way to list forms, so their ids are remembered here.
type demoState struct {
	// Forms maps "spreadsheetId/sheet" to the form writing it.
	Forms map[string]string `json:"forms"`
}

func (d *demo) statePath() string { return filepath.Join(d.dataDir, demoStateFile) }

func (d *demo) loadState() demoState {
	st := demoState{Forms: map[string]string{}}
	raw, err := os.ReadFile(d.statePath())
	if err == nil {
		_ = json.Unmarshal(raw, &st)
	}
	if st.Forms == nil {
		st.Forms = map[string]string{}
	}
	return st
}

func (d *demo) saveState(st demoState) error {
	raw, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := d.statePath() + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return fmt.Errorf("demo: save state: %w", err)
	}
	if err := os.Rename(tmp, d.statePath()); err != nil {
		return fmt.Errorf("demo: save state: %w", err)
	}
	return nil
}

type demoAPIForm struct {
	ID            string `json:"id"`
	UserID        string `json:"userId"`
	SpreadsheetID string `json:"spreadsheetId"`
	Sheet         string `json:"sheet"`
	RowsWritten   int    `json:"rowsWritten"`
	Buffered      int    `json:"buffered"`
}

func (d *demo) seedForms(ctx context.Context, ids *demoIDs) error {
	st := d.loadState()
	for i, s := range demoSheets {
		if ids.forms[i] != "" {
			continue
		}
		key := d.sheetIDs[i] + "/" + s.Sheet
		if id := st.Forms[key]; id != "" {
			err := d.api.do(ctx, http.MethodGet, "/api/v1/forms/"+id, nil, nil)
			if err == nil {
				ids.forms[i] = id
				continue
			}
			if demoStatusOf(err) != http.StatusNotFound {
				return err
			}
		}
		var f demoAPIForm
		body := map[string]any{
			"userId": ids.userID, "accountId": ids.accounts[s.Owner], "spreadsheetId": d.sheetIDs[i],
			"sheet": s.Sheet, "columns": s.Columns,
		}
		err := d.api.do(ctx, http.MethodPost, "/api/v1/forms", body, &f)
		if demoStatusOf(err) == http.StatusConflict {
			// Made by an earlier run whose state file is gone: find it, if
			// this server lists forms.
			id, lerr := d.findForm(ctx, ids.userID, d.sheetIDs[i], s.Sheet)
			if lerr != nil {
				return fmt.Errorf("%w (and the form could not be found: %w)", err, lerr)
			}
			f.ID = id
		} else if err != nil {
			return err
		} else {
			d.log.Info("demo: form created", "form_id", f.ID, "spreadsheet", s.Title)
		}
		ids.forms[i] = f.ID
		st.Forms[key] = f.ID
		if err := d.saveState(st); err != nil {
			return err
		}
	}
	return nil
}

// findForm looks a form up in GET /api/v1/forms?userId=, an addition to
// the contract that this server may not have.
func (d *demo) findForm(ctx context.Context, userID, spreadsheetID, sheet string) (string, error) {
	var list struct {
		Forms []demoAPIForm `json:"forms"`
	}
	if err := d.api.do(ctx, http.MethodGet, "/api/v1/forms?userId="+userID, nil, &list); err != nil {
		return "", err
	}
	for _, f := range list.Forms {
		if f.SpreadsheetID == spreadsheetID && strings.EqualFold(f.Sheet, sheet) {
			return f.ID, nil
		}
	}
	return "", errors.New("no listed form writes that sheet")
}
