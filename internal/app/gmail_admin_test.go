package app_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
	"mailroom/web/webtest"
)

// adminClient logs in to the admin page and returns a client with the
// session cookie.
func adminClient(ta *apptest.App) *http.Client {
	ta.T().Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := webtest.SignIn(c, ta.URL, url.Values{"password": {"correct horse battery staple"}, "next": {"/admin"}}, nil)
	if err != nil {
		ta.T().Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		ta.T().Fatalf("login: %s", resp.Status)
	}
	return c
}

func getPage(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestGmailAdminPages: the Accounts list and an account's page, resync from
// the page, and a revoked account that says what to do.
func TestGmailAdminPages(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, nil))
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 20, 1); err != nil {
		t.Fatal(err)
	}
	acc := connectAccount(ta, fake, createUser(ta, "owner@example.com"), gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 20*time.Second)
	c := adminClient(ta)

	status, body := getPage(t, c, ta.URL+"/admin/accounts")
	if status != http.StatusOK || !strings.Contains(body, gmailAddr) || !strings.Contains(body, "ready") || !strings.Contains(body, "/push/gmail") {
		t.Fatalf("accounts page: %d\n%s", status, body)
	}
	for _, want := range []string{"Gmail units a minute", "of 6,000", "s Gmail units, last minute", "of 1,200,000 (MAILROOM_GMAIL_PROJECT_UNITS_PER_MINUTE)", "daily billing threshold, 80,000,000"} {
		if !strings.Contains(body, want) {
			t.Errorf("the accounts page lacks the Gmail quota %q", want)
		}
	}
	status, body = getPage(t, c, ta.URL+"/admin/accounts/"+acc.ID)
	if status != http.StatusOK || !strings.Contains(body, "Recent sync runs") || !strings.Contains(body, "connect") {
		t.Fatalf("account page: %d\n%s", status, body)
	}
	if !strings.Contains(body, "units in the last minute") {
		t.Error("the account page lacks its Gmail quota")
	}
	if _, body := getPage(t, c, ta.URL+"/admin"); !strings.Contains(body, "Gmail units, last minute") || !strings.Contains(body, "Accounts waiting for Gmail quota") {
		t.Error("the overview lacks the Gmail quota")
	}
	m := csrfRE.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the account page")
	}
	resp, err := c.PostForm(ta.URL+"/admin/accounts/"+acc.ID+"/resync", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "full sync is queued") {
		t.Fatalf("resync from the page: %s\n%s", resp.Status, raw)
	}
	waitMirror(ta, fake, acc.ID, gmailAddr, 20*time.Second)

	// Google revokes the grant: the account goes to error and its page says
	// what to do.
	revokeAndPush(t, ta, fake, acc.ID, gmailAddr)
	var dead struct{ Deadletters []struct{ Type string } }
	testkit.Eventually(t, 20*time.Second, "the sync dead-lettered", func() bool {
		ta.JSON(http.MethodGet, "/api/v1/deadletters?type=gmail:sync", nil, http.StatusOK, &dead)
		return len(dead.Deadletters) == 1
	})
	_, body = getPage(t, c, ta.URL+"/admin/accounts/"+acc.ID)
	for _, want := range []string{"What to do", "Connect the account again", "Dead letters"} {
		if !strings.Contains(body, want) {
			t.Errorf("the account page in error lacks %q", want)
		}
	}
	if a := account(ta, acc.ID); a.StatusReason == "" {
		t.Errorf("the API does not say what to do: %+v", a)
	}
}

// TestGmailOAuthConnect connects an account from the admin page through
// the consent flow: /oauth/google/start sends the browser to Google (the
// emulator approves as the account), Google sends it back to the callback,
// which exchanges the code, reads the address and connects the account.
func TestGmailOAuthConnect(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{ClientID: "client-id", ClientSecret: "client-secret", ConsentAccount: gmailAddr})
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 15, 2); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.HTTPAddr = addr
		cfg.GoogleClientID, cfg.GoogleClientSecret = "client-id", "client-secret"
	}))
	userID := createUser(ta, "owner@example.com")
	c := adminClient(ta)

	// Without a user the Accounts page explains.
	resp := adminStartConnect(t, c, ta, "nope")
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "There is no such user") {
		t.Fatalf("start with an unknown user: %d %s", resp.StatusCode, raw)
	}
	resp = adminStartConnect(t, c, ta, userID)
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if status, body := resp.StatusCode, string(raw); status != http.StatusOK || !strings.Contains(body, gmailAddr+" is connected") {
		t.Fatalf("after the consent round trip: %d\n%s", status, body)
	}
	var list struct{ Accounts []gmailTestAccount }
	ta.JSON(http.MethodGet, "/api/v1/accounts", nil, http.StatusOK, &list)
	if len(list.Accounts) != 1 || list.Accounts[0].Email != gmailAddr || list.Accounts[0].UserID != userID {
		t.Fatalf("accounts after connect: %+v", list)
	}
	waitMirror(ta, fake, list.Accounts[0].ID, gmailAddr, 20*time.Second)

	// A forged state is refused.
	status, body := getPage(t, c, ta.URL+"/oauth/google/callback?code=x&state=forged")
	if status != http.StatusOK || !strings.Contains(body, "The sign-in state is not valid") {
		t.Fatalf("forged state: %d %s", status, body)
	}
	// The start needs the admin session (and is a POST with its CSRF
	// token).
	resp, err := http.PostForm(ta.URL+"/oauth/google/start", url.Values{"userId": {userID}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("start without a session: %s", resp.Status)
	}
}
