package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

const (
	gmailAddr     = "ann@example.com"
	pushAudience  = "https://mailroom.test/push/gmail"
	pushTopic     = "projects/mailroom-test/topics/gmail"
	pushSharedKey = "push-s3cret"
)

// withGoogle points the app at the emulator, with OIDC push auth (the
// emulator signs the tokens) and the shared token both configured.
func withGoogle(fake *googlefake.Server, more func(*app.Config)) func(*app.Config) {
	return func(cfg *app.Config) {
		cfg.GoogleAPIURL, cfg.GoogleTokenURL, cfg.GoogleCertsURL = fake.URL(), fake.TokenURL(), fake.CertsURL()
		cfg.PushAudience, cfg.PushServiceAccount = pushAudience, googlefake.DefaultPushServiceAccount
		cfg.PushToken = pushSharedKey
		cfg.PubSubTopic = pushTopic
		cfg.GmailPollInterval = time.Hour // pushes, not polls, must do the work
		if more != nil {
			more(cfg)
		}
	}
}

func createUser(ta *apptest.App, email string) string {
	ta.T().Helper()
	var u struct{ ID string }
	ta.JSON(http.MethodPost, "/api/v1/users", map[string]string{"email": email, "name": "Owner"}, http.StatusCreated, &u)
	return u.ID
}

type gmailTestAccount struct {
	ID, UserID, Email, Status, HistoryID, WatchExpiration, StatusReason string
	Pushes, LastPushAt                                                  string
	Messages                                                            int
	MessageCounts                                                       struct{ Total, Unread, Trashed int }
}

func account(ta *apptest.App, id string) gmailTestAccount {
	ta.T().Helper()
	var a gmailTestAccount
	ta.JSON(http.MethodGet, "/api/v1/accounts/"+id, nil, http.StatusOK, &a)
	return a
}

// connectAccount connects the emulator's mailbox through the API.
func connectAccount(ta *apptest.App, fake *googlefake.Server, userID, email string) gmailTestAccount {
	ta.T().Helper()
	var a gmailTestAccount
	ta.JSON(http.MethodPost, "/api/v1/accounts", map[string]string{"userId": userID, "email": email, "refreshToken": fake.AddAccount(email)}, http.StatusCreated, &a)
	if a.ID == "" || a.Status != "syncing" || a.Email != email || a.UserID != userID {
		ta.T().Fatalf("connect answered %+v", a)
	}
	return a
}

type gmailTestMessage struct {
	ID        string   `json:"id"`
	ThreadID  string   `json:"threadId"`
	From      string   `json:"from"`
	To        string   `json:"to"`
	Subject   string   `json:"subject"`
	Snippet   string   `json:"snippet"`
	Labels    []string `json:"labels"`
	Unread    bool     `json:"unread"`
	Trashed   bool     `json:"trashed"`
	HistoryID string   `json:"historyId"`
}

// mirror reads every message of the account through the API, page by page.
func mirror(ta *apptest.App, accountID, query string) map[string]gmailTestMessage {
	ta.T().Helper()
	out := map[string]gmailTestMessage{}
	cursor := ""
	for {
		var page struct {
			Messages []gmailTestMessage `json:"messages"`
			Next     string             `json:"next"`
		}
		ta.JSON(http.MethodGet, "/api/v1/accounts/"+accountID+"/messages?limit=200&cursor="+url.QueryEscape(cursor)+query, nil, http.StatusOK, &page)
		for _, m := range page.Messages {
			out[m.ID] = m
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

// mailbox is the emulator's mailbox as the API must show it.
func mailbox(fake *googlefake.Server, email string) map[string]gmailTestMessage {
	names := fake.Gmail.LabelNames(email)
	out := map[string]gmailTestMessage{}
	for _, m := range fake.Gmail.Messages(email) {
		labels := make([]string, 0, len(m.LabelIDs))
		for _, id := range m.LabelIDs {
			labels = append(labels, names[id])
		}
		sort.Strings(labels)
		out[m.ID] = gmailTestMessage{
			ID: m.ID, ThreadID: m.ThreadID, From: m.From, To: m.To, Subject: m.Subject, Snippet: m.Snippet,
			Labels: labels, Unread: m.Unread(), Trashed: m.Trashed(), HistoryID: strconv.FormatUint(m.HistoryID, 10),
		}
	}
	return out
}

// waitMirror waits until the mirror equals the mailbox field by field and
// the watermark is the mailbox's history id.
func waitMirror(ta *apptest.App, fake *googlefake.Server, accountID, email string, d time.Duration) {
	ta.T().Helper()
	testkit.EventuallyNil(ta.T(), d, "the mirror to converge", func() error {
		want, got := mailbox(fake, email), mirror(ta, accountID, "")
		a := account(ta, accountID)
		hid := strconv.FormatUint(fake.Gmail.HistoryID(email), 10)
		diff := cmp.Diff(want, got)
		if diff == "" && a.HistoryID == hid && a.Status == "ready" {
			return nil
		}
		if len(diff) > 3000 {
			diff = diff[:3000] + "…"
		}
		return fmt.Errorf("account %+v (mailbox at %s); diff (-mailbox +mirror):\n%s", a, hid, diff)
	})
}

// push posts a Pub/Sub envelope for the mailbox at hid with a valid OIDC
// token and returns the status.
func push(ta *apptest.App, fake *googlefake.Server, email string, hid uint64) int {
	ta.T().Helper()
	req, _ := http.NewRequest(http.MethodPost, ta.URL+"/push/gmail", bytes.NewReader(fake.PushEnvelope(email, hid)))
	req.Header.Set("Authorization", "Bearer "+fake.SignPushToken(googlefake.IDTokenClaims{}))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		ta.T().Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// changes counts the changes mutateMailbox makes.
type changes struct{ adds, reads, unreads, trashes, restores, deletes, labels int }

// contractChanges are the contract test's: 50 adds, 30 reads, 10 unreads,
// 10 trashes, 5 restores, 5 deletes and label changes.
var contractChanges = changes{adds: 50, reads: 30, unreads: 10, trashes: 10, restores: 5, deletes: 5, labels: 20}

// mutateMailbox changes the mailbox as c says, on messages picked by seed.
func mutateMailbox(t *testing.T, fake *googlefake.Server, email string, seed uint64, c changes) {
	t.Helper()
	g := fake.Gmail
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	before := g.Messages(email)
	rng.Shuffle(len(before), func(i, j int) { before[i], before[j] = before[j], before[i] })
	_, err := googlefake.NewGenerator(seed, time.Time{}).Add(g, email, c.adds)
	must(err)
	var read, unread []googlefake.Message
	for _, m := range before {
		switch {
		case m.Trashed():
		case m.Unread():
			unread = append(unread, m)
		default:
			read = append(read, m)
		}
	}
	if len(unread) < c.reads || len(read) < c.unreads+c.trashes+c.deletes+c.labels {
		t.Fatalf("the mailbox has %d unread and %d read messages: too few for %+v", len(unread), len(read), c)
	}
	for _, m := range unread[:c.reads] {
		must(g.MarkRead(email, m.ID))
	}
	for _, m := range read[:c.unreads] {
		must(g.MarkUnread(email, m.ID))
	}
	rest := read[c.unreads:]
	for _, m := range rest[:c.trashes] {
		must(g.Trash(email, m.ID))
	}
	for _, m := range rest[:c.restores] {
		must(g.Untrash(email, m.ID))
	}
	rest = rest[c.trashes:]
	for _, m := range rest[:c.deletes] {
		must(g.Delete(email, m.ID))
	}
	rest = rest[c.deletes:]
	label, err := g.CreateLabel(email, fmt.Sprintf("Project %d", seed))
	must(err)
	for _, m := range rest[:c.labels] {
		must(g.AddLabels(email, m.ID, label, googlefake.LabelStarred))
	}
	for _, m := range rest[:c.labels/4] {
		must(g.RemoveLabels(email, m.ID, label, googlefake.LabelInbox))
	}
}

func TestGmailEndToEnd(t *testing.T) {
	t.Parallel()
	// The 2025 price list on both sides: 300 messages' reads fit in one
	// minute of quota (at 2026's they take a whole minute).
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, GmailQuotaPrices: googlefake.GmailPrices2025})
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) { cfg.GmailQuotaPrices = "2025" }))
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 300, 42); err != nil {
		t.Fatal(err)
	}
	userID := createUser(ta, "owner@example.com")
	acc := connectAccount(ta, fake, userID, gmailAddr)

	// The full sync mirrors the 300 messages, field by field; the watch is made.
	waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)
	got := account(ta, acc.ID)
	if got.Messages != 300 || got.MessageCounts.Total != 300 || got.WatchExpiration == "" {
		t.Fatalf("after the full sync: %+v", got)
	}
	if w, ok := fake.Gmail.WatchState(gmailAddr); !ok || w.Topic != pushTopic {
		t.Fatalf("watch: %+v %v", w, ok)
	}

	// Changes, one push: converged exactly.
	mutateMailbox(t, fake, gmailAddr, 1, contractChanges)
	if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)); st != http.StatusNoContent {
		t.Fatalf("push: %d", st)
	}
	waitMirror(ta, fake, acc.ID, gmailAddr, 30*time.Second)

	// Changes in 20 steps, their 20 pushes sent at once, each twice, in
	// any order: converged exactly.
	var hids []uint64
	for i := range 20 {
		mutateMailbox(t, fake, gmailAddr, uint64(100+i), changes{adds: 5, reads: 3, unreads: 2, trashes: 2, restores: 1, deletes: 1, labels: 4})
		hids = append(hids, fake.Gmail.HistoryID(gmailAddr))
	}
	pushes := append(slices.Clone(hids), hids...)
	rand.Shuffle(len(pushes), func(i, j int) { pushes[i], pushes[j] = pushes[j], pushes[i] })
	var wg sync.WaitGroup
	statuses := make([]int, len(pushes))
	for i, h := range pushes {
		wg.Add(1)
		go func() { defer wg.Done(); statuses[i] = push(ta, fake, gmailAddr, h) }()
	}
	wg.Wait()
	for i, st := range statuses {
		if st != http.StatusNoContent {
			t.Fatalf("push %d: status %d", i, st)
		}
	}
	waitMirror(ta, fake, acc.ID, gmailAddr, 60*time.Second)

	// Filters.
	unread := mirror(ta, acc.ID, "&unread=true")
	trashed := mirror(ta, acc.ID, "&trashed=true")
	project := mirror(ta, acc.ID, "&label="+url.QueryEscape("Project 1"))
	for _, m := range mailbox(fake, gmailAddr) {
		_, u := unread[m.ID]
		_, tr := trashed[m.ID]
		_, p := project[m.ID]
		if u != m.Unread || tr != m.Trashed || p != slices.Contains(m.Labels, "Project 1") {
			t.Fatalf("filters disagree on %s: unread %v/%v trashed %v/%v label %v", m.ID, u, m.Unread, tr, m.Trashed, p)
		}
	}
	var one gmailTestMessage
	for id := range project {
		ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID+"/messages/"+id, nil, http.StatusOK, &one)
		if one.ID != id {
			t.Fatalf("get message %s: %+v", id, one)
		}
		break
	}

	// Delete stops the watch and removes the data.
	ta.JSON(http.MethodDelete, "/api/v1/accounts/"+acc.ID, nil, http.StatusNoContent, nil)
	if _, ok := fake.Gmail.WatchState(gmailAddr); ok {
		t.Fatal("the watch survived the account")
	}
	ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusNotFound, nil)
	ta.JSON(http.MethodGet, "/api/v1/accounts/"+acc.ID+"/messages", nil, http.StatusNotFound, nil)
	// A push for the address is now counted and dropped.
	if st := push(ta, fake, gmailAddr, fake.Gmail.HistoryID(gmailAddr)+1); st != http.StatusNoContent {
		t.Fatalf("push for an unknown address: %d", st)
	}
}

func TestGmailAccountsAPIErrors(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, nil))
	userID := createUser(ta, "owner@example.com")
	cases := []struct {
		method, path string
		body         any
		status       int
		field        string
	}{
		{"POST", "/api/v1/accounts", map[string]string{"email": "a@b.c", "refreshToken": "x"}, 400, "userId"},
		{"POST", "/api/v1/accounts", map[string]string{"userId": "nope", "email": "a@b.c", "refreshToken": "x"}, 400, "userId"},
		{"POST", "/api/v1/accounts", map[string]string{"userId": userID, "email": "not an address", "refreshToken": "x"}, 400, "email"},
		{"POST", "/api/v1/accounts", map[string]string{"userId": userID, "email": "a@b.c"}, 400, "refreshToken"},
		{"POST", "/api/v1/accounts", map[string]any{"userId": 5}, 400, "userId"},
		{"POST", "/api/v1/accounts", []byte(`{`), 400, ""},
		{"GET", "/api/v1/accounts/nope", nil, 404, ""},
		{"POST", "/api/v1/accounts/nope/resync", nil, 404, ""},
		{"DELETE", "/api/v1/accounts/nope", nil, 404, ""},
		{"GET", "/api/v1/accounts/nope/messages", nil, 404, ""},
		{"GET", "/api/v1/accounts/nope/messages/m1", nil, 404, ""},
	}
	acc := connectAccount(ta, fake, userID, "bob@example.com")
	cases = append(cases, []struct {
		method, path string
		body         any
		status       int
		field        string
	}{
		{"GET", "/api/v1/accounts/" + acc.ID + "/messages?unread=maybe", nil, 400, "unread"},
		{"GET", "/api/v1/accounts/" + acc.ID + "/messages?trashed=1", nil, 400, "trashed"},
		{"GET", "/api/v1/accounts/" + acc.ID + "/messages?limit=0", nil, 400, "limit"},
		{"GET", "/api/v1/accounts/" + acc.ID + "/messages?limit=501", nil, 400, "limit"},
		{"GET", "/api/v1/accounts/" + acc.ID + "/messages?limit=x", nil, 400, "limit"},
		{"GET", "/api/v1/accounts/" + acc.ID + "/messages/nope", nil, 404, ""},
		{"POST", "/api/v1/accounts/" + acc.ID + "/resync", nil, 202, ""},
	}...)
	for _, tc := range cases {
		status, raw := ta.Do(tc.method, tc.path, tc.body)
		if status != tc.status {
			t.Errorf("%s %s: %d %s, want %d", tc.method, tc.path, status, raw, tc.status)
			continue
		}
		if status >= 400 {
			var e struct {
				Error struct{ Code, Message, Field string }
			}
			if err := json.Unmarshal(raw, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || e.Error.Field != tc.field {
				t.Errorf("%s %s: error body %s, want field %q", tc.method, tc.path, raw, tc.field)
			}
		}
	}
	var list struct{ Accounts []gmailTestAccount }
	ta.JSON(http.MethodGet, "/api/v1/accounts", nil, http.StatusOK, &list)
	if len(list.Accounts) != 1 || list.Accounts[0].ID != acc.ID {
		t.Fatalf("list: %+v", list)
	}
}
