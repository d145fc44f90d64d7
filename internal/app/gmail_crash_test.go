package app_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

// call sends an API request to the child and decodes the answer.
func (p *proc) call(method, path string, body any, want int, out any) {
	p.t.Helper()
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, p.url+path, r)
	req.Header.Set("Authorization", "Bearer "+apptest.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		p.t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

func (p *proc) mirror(accountID string) map[string]gmailTestMessage {
	p.t.Helper()
	out := map[string]gmailTestMessage{}
	cursor := ""
	for {
		var page struct {
			Messages []gmailTestMessage
			Next     string
		}
		p.call(http.MethodGet, "/api/v1/accounts/"+accountID+"/messages?limit=500&cursor="+url.QueryEscape(cursor), nil, http.StatusOK, &page)
		for _, m := range page.Messages {
			out[m.ID] = m
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

// makeHistory changes the mailbox until it has n more history records: a
// few adds and deletes, and many reads, unreads, stars and trash moves.
func makeHistory(t *testing.T, fake *googlefake.Server, email string, n int) {
	t.Helper()
	g := fake.Gmail
	start := g.HistoryID(email)
	if _, err := googlefake.NewGenerator(5, time.Time{}).Add(g, email, 300); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	msgs := g.Messages(email)
	for g.HistoryID(email)-start < uint64(n) {
		i := rng.IntN(len(msgs))
		m, ok := g.Message(email, msgs[i].ID)
		if !ok {
			continue
		}
		var err error
		switch op := rng.IntN(100); {
		case op < 1 && len(msgs) > 100:
			err = g.Delete(email, m.ID)
			msgs = append(msgs[:i], msgs[i+1:]...)
		case op < 45 && m.Unread():
			err = g.MarkRead(email, m.ID)
		case op < 45:
			err = g.MarkUnread(email, m.ID)
		case op < 75 && m.Trashed():
			err = g.Untrash(email, m.ID)
		case op < 75:
			err = g.Trash(email, m.ID)
		case slices.Contains(m.LabelIDs, googlefake.LabelStarred):
			err = g.RemoveLabels(email, m.ID, googlefake.LabelStarred)
		default:
			err = g.AddLabels(email, m.ID, googlefake.LabelStarred)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// midSyncKill is a binary killed with SIGKILL during a sync: the crash
// tests' set-up.
type midSyncKill struct {
	fake     *googlefake.Server
	env      []string
	dir      string
	userID   string
	acc      gmailTestAccount
	from, to uint64 // the watermark before the burst, and the mailbox's history id after it
	mark     uint64 // the watermark at the kill
}

// killMidSync starts the binary (with the crash tests' settings and
// extraEnv) on a fresh data dir, connects the emulator's 200-message
// mailbox, calls ready once it is synced, makes records more history
// records, pushes them with history pages slowed down (the emulator runs in
// the test process), and kills the binary once the watermark has moved
// killAfter records but not all of them.
func killMidSync(t *testing.T, extraEnv []string, records, killAfter uint64, ready func(p *proc, userID string)) *midSyncKill {
	t.Helper()
	k := &midSyncKill{dir: t.TempDir()}
	k.fake = googlefake.StartForTest(t, googlefake.Options{GmailQuotaWindow: 2 * time.Second})
	fake := k.fake
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 200, 3); err != nil {
		t.Fatal(err)
	}
	k.env = append([]string{
		"MAILROOM_GOOGLE_API_URL=" + fake.URL(),
		"MAILROOM_GOOGLE_TOKEN_URL=" + fake.TokenURL(),
		"MAILROOM_PUSH_TOKEN=" + pushSharedKey,
		"MAILROOM_GMAIL_POLL_INTERVAL=1h",
		"MAILROOM_GMAIL_QUOTA_WINDOW=2s",
		"MAILROOM_RETRY_INITIAL=100ms",
		"MAILROOM_RETRY_MAX=500ms",
		"MAILROOM_DELAYED_CHECK_INTERVAL=100ms",
	}, extraEnv...)
	p := startProc(t, k.dir, k.env...)
	var user struct{ ID string }
	p.call(http.MethodPost, "/api/v1/users", map[string]string{"email": "owner@example.com", "name": "Owner"}, http.StatusCreated, &user)
	k.userID = user.ID
	if ready != nil {
		ready(p, user.ID)
	}
	p.call(http.MethodPost, "/api/v1/accounts", map[string]string{"userId": user.ID, "email": gmailAddr, "refreshToken": fake.AddAccount(gmailAddr)}, http.StatusCreated, &k.acc)
	testkit.Eventually(t, 30*time.Second, "the first full sync", func() bool {
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+k.acc.ID, nil, http.StatusOK, &a)
		return a.Status == "ready"
	})
	var a gmailTestAccount
	p.call(http.MethodGet, "/api/v1/accounts/"+k.acc.ID, nil, http.StatusOK, &a)
	k.from, _ = strconv.ParseUint(a.HistoryID, 10, 64)

	makeHistory(t, fake, gmailAddr, int(records))
	k.to = fake.Gmail.HistoryID(gmailAddr)
	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodHistoryList, Latency: 150 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(p.url+"/push/gmail?token="+pushSharedKey, "application/json", bytes.NewReader(fake.PushEnvelope(gmailAddr, k.to)))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("push: %v %v", resp, err)
	}
	resp.Body.Close()

	// Kill once the sync has recorded some pages but not all.
	testkit.Eventually(t, 30*time.Second, "the sync to be under way", func() bool {
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+k.acc.ID, nil, http.StatusOK, &a)
		k.mark, _ = strconv.ParseUint(a.HistoryID, 10, 64)
		return k.mark > k.from+killAfter
	})
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if k.mark >= k.to {
		t.Fatalf("the sync finished (watermark %d of %d) before the kill; the test proves nothing", k.mark, k.to)
	}
	t.Logf("killed with the watermark at %d of %d..%d", k.mark, k.from, k.to)
	return k
}

// TestGmailCrashDuringSync kills the binary with SIGKILL while it syncs
// 5,000 history records (history pages are slowed down by the emulator,
// which runs in the test process), restarts it on the same data dir, and
// checks, with no further push, that the mirror converges exactly. The
// restart counts the Gmail minute before the kill as fully spent (the
// embedded broker lost the budget): Gmail's minute is compressed to 2 s,
// emulator and budget alike, so the test does not wait a real minute.
func TestGmailCrashDuringSync(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	t.Parallel()
	k := killMidSync(t, nil, 5000, 1000, nil)
	fake, acc, to := k.fake, k.acc, k.to

	// Restart with no push: the recorded sync and events finish the work.
	fake.ClearFaults()
	p := startProc(t, k.dir, k.env...)
	testkit.EventuallyNil(t, 60*time.Second, "convergence after the restart", func() error {
		want, got := mailbox(fake, gmailAddr), p.mirror(acc.ID)
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &a)
		diff := cmp.Diff(want, got)
		if diff == "" && a.HistoryID == strconv.FormatUint(to, 10) {
			return nil
		}
		if len(diff) > 3000 {
			diff = diff[:3000] + "…"
		}
		return fmt.Errorf("watermark %s of %d; diff (-mailbox +mirror):\n%s\n%s", a.HistoryID, to, diff, p.out)
	})
}

// TestGmailCrashDuringFullSyncWithLiveChanges kills the binary with SIGKILL
// while a full sync of 1,000 messages runs (downloads slowed down by the
// emulator) and the history sync beside it has applied live changes made
// during it (reads, trashes, labels, deletes across the mailbox, a new
// message), restarts it on the same data dir, and checks, with no further
// push, that the mirror converges exactly. Gmail's minute is compressed to
// 2 s (emulator and budget alike).
func TestGmailCrashDuringFullSyncWithLiveChanges(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{GmailQuotaWindow: 2 * time.Second})
	fake.AddAccount(gmailAddr)
	g := fake.Gmail
	if _, err := g.Generate(gmailAddr, 1000, 5); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"MAILROOM_GOOGLE_API_URL=" + fake.URL(),
		"MAILROOM_GOOGLE_TOKEN_URL=" + fake.TokenURL(),
		"MAILROOM_PUSH_TOKEN=" + pushSharedKey,
		"MAILROOM_GMAIL_POLL_INTERVAL=1h",
		"MAILROOM_GMAIL_QUOTA_WINDOW=2s",
		"MAILROOM_RETRY_INITIAL=100ms",
		"MAILROOM_RETRY_MAX=500ms",
		"MAILROOM_DELAYED_CHECK_INTERVAL=100ms",
	}
	for _, m := range []string{googlefake.MethodMessagesGet, googlefake.MethodThreadsGet} {
		if _, err := fake.InjectFault(googlefake.Fault{Method: m, Latency: 40 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	p := startProc(t, dir, env...)
	var user struct{ ID string }
	p.call(http.MethodPost, "/api/v1/users", map[string]string{"email": "owner@example.com", "name": "Owner"}, http.StatusCreated, &user)
	var acc gmailTestAccount
	p.call(http.MethodPost, "/api/v1/accounts", map[string]string{"userId": user.ID, "email": gmailAddr, "refreshToken": fake.AddAccount(gmailAddr)}, http.StatusCreated, &acc)
	testkit.Eventually(t, 30*time.Second, "the full sync's first page to be stored", func() bool {
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &a)
		return a.Messages >= 500
	})

	// Changes on the stored page (the newest 500) and on the page to come.
	msgs := g.Messages(gmailAddr) // oldest first
	stored, later := msgs[len(msgs)-1], msgs[0]
	label, err := g.CreateLabel(gmailAddr, "Crash")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []googlefake.Message{stored, later, msgs[len(msgs)-2], msgs[1], msgs[len(msgs)-3], msgs[2]} {
		switch {
		case m.ID == stored.ID || m.ID == later.ID:
			err = g.AddLabels(gmailAddr, m.ID, label, googlefake.LabelStarred)
		case m.ID == msgs[1].ID || m.ID == msgs[len(msgs)-2].ID:
			err = g.Trash(gmailAddr, m.ID)
		default:
			err = g.Delete(gmailAddr, m.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := g.AddMessage(gmailAddr, googlefake.Message{From: "bob@example.com", To: gmailAddr, Subject: "during"}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(p.url+"/push/gmail?token="+pushSharedKey, "application/json", bytes.NewReader(fake.PushEnvelope(gmailAddr, g.HistoryID(gmailAddr))))
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("push: %v %v", resp, err)
	}
	resp.Body.Close()
	// Kill once the live change to the stored message is in the mirror and
	// the full sync still runs.
	testkit.Eventually(t, 20*time.Second, "the live change during the full sync", func() bool {
		return slices.Contains(p.mirror(acc.ID)[stored.ID].Labels, "Crash")
	})
	var a gmailTestAccount
	p.call(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &a)
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.exited
	if a.Status != "syncing" || a.Messages >= 1000 {
		t.Fatalf("the full sync ended (%+v) before the kill; the test proves nothing", a)
	}
	t.Logf("killed with %d of 1,000 messages mirrored", a.Messages)

	fake.ClearFaults()
	p = startProc(t, dir, env...)
	testkit.EventuallyNil(t, 60*time.Second, "the mirror to converge after the restart", func() error {
		want, got := mailbox(fake, gmailAddr), p.mirror(acc.ID)
		var a gmailTestAccount
		p.call(http.MethodGet, "/api/v1/accounts/"+acc.ID, nil, http.StatusOK, &a)
		diff := cmp.Diff(want, got)
		if diff == "" && a.HistoryID == strconv.FormatUint(g.HistoryID(gmailAddr), 10) && a.Status == "ready" {
			return nil
		}
		if len(diff) > 3000 {
			diff = diff[:3000] + "…"
		}
		return fmt.Errorf("account %+v; diff (-mailbox +mirror):\n%s", a, diff)
	})
}
