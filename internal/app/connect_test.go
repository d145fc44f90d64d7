package app_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
	"mailroom/internal/testkit"
)

const connectBack = "http://app.example/gmail-connected"

// noFollow is c without following redirects.
func noFollow(c *http.Client) *http.Client {
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cc
}

// redirectOf GETs u and returns its redirect's Location.
func redirectOf(t *testing.T, c *http.Client, u string) *url.URL {
	t.Helper()
	resp, err := noFollow(c).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if (resp.StatusCode != http.StatusFound && resp.StatusCode != http.StatusSeeOther) || err != nil {
		t.Fatalf("GET %s: %s, Location %q", u, resp.Status, resp.Header.Get("Location"))
	}
	return loc
}

// continueLink opens a connect link's page in c (which keeps cookies) and
// presses its continue button; it returns where that sends the browser
// (Google's consent).
func continueLink(t *testing.T, c *http.Client, link string) *url.URL {
	t.Helper()
	status, page := getPage(t, c, link)
	m := csrfRE.FindStringSubmatch(page)
	if status != http.StatusOK || m == nil {
		t.Fatalf("GET %s: %d, want the link's page with its continue form", link, status)
	}
	resp, err := noFollow(c).PostForm(link, url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil {
		t.Fatalf("continue at %s: %s, Location %q", link, resp.Status, resp.Header.Get("Location"))
	}
	return loc
}

// adminStartConnect posts the Accounts page's "Connect with Google" form
// (with its CSRF token) in c's session and returns the answer (c follows
// redirects as it is set to).
func adminStartConnect(t *testing.T, c *http.Client, ta *apptest.App, userID string) *http.Response {
	t.Helper()
	_, page := getPage(t, c, ta.URL+"/admin/accounts")
	m := csrfRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no CSRF token on the Accounts page")
	}
	resp, err := c.PostForm(ta.URL+"/oauth/google/start", url.Values{"csrf": {m[1]}, "userId": {userID}})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// revokeAndPush revokes the account's grant at Google, lets a new message
// arrive and pushes it: the sync meets invalid_grant and the account goes
// to error.
func revokeAndPush(t *testing.T, ta *apptest.App, fake *googlefake.Server, accountID, email string) {
	t.Helper()
	fake.RevokeRefreshToken(email)
	fake.ExpireAccessTokens(email)
	if _, err := fake.Gmail.AddMessage(email, googlefake.Message{Subject: "after the revocation"}); err != nil {
		t.Fatal(err)
	}
	if st := push(ta, fake, email, fake.Gmail.HistoryID(email)); st != http.StatusNoContent {
		t.Fatalf("push: %d", st)
	}
	testkit.Eventually(t, 20*time.Second, "the account in error", func() bool { return account(ta, accountID).Status == "error" })
}

// TestConnectLinkRepairsRevokedAccount: Google refuses the account's grant
// (invalid_grant): the account goes to error with statusReason
// reauth_required and the Accounts page offers a connect link; the
// owner's consent through a link for that address brings the same account
// back to ready, resuming history from its watermark: no messages.list
// call, every mirrored message kept and the mail that came meanwhile
// added.
func TestConnectLinkRepairsRevokedAccount(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience, ClientID: "client-id", ClientSecret: "client-secret"})
	fake.AddAccount(gmailAddr)
	if _, err := fake.Gmail.Generate(gmailAddr, 12, 1); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.HTTPAddr = addr
		cfg.GoogleClientID, cfg.GoogleClientSecret = "client-id", "client-secret"
		cfg.ConnectRedirectURIs = []string{connectBack}
	}))
	userID := createUser(ta, "owner@example.com")
	acc := connectAccount(ta, fake, userID, gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 20*time.Second)
	before := account(ta, acc.ID)
	lists := fake.Calls(googlefake.MethodMessagesList)

	// Google refuses the grant.
	revokeAndPush(t, ta, fake, acc.ID, gmailAddr)
	if a := account(ta, acc.ID); a.StatusReason != "reauth_required" || a.Messages != before.Messages {
		t.Fatalf("after invalid_grant: %+v", a)
	}

	// The Accounts page offers a link, and shows it to copy.
	c := adminClient(ta)
	_, page := getPage(t, c, ta.URL+"/admin/accounts")
	if !strings.Contains(page, "Send a connect link") || !strings.Contains(page, "/admin/accounts/"+acc.ID+"/connect-link") {
		t.Fatal("the Accounts page offers no connect link for the account in error")
	}
	m := csrfRE.FindStringSubmatch(page)
	resp, err := c.PostForm(ta.URL+"/admin/accounts/"+acc.ID+"/connect-link", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(raw), ta.URL+"/connect/cl_") || !strings.Contains(string(raw), "Send this link to the owner of "+gmailAddr) {
		t.Fatalf("the page after \"Send a connect link\" (%s) shows no link", resp.Request.URL)
	}

	// The service's own link for the same address.
	var link struct{ URL string }
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/connect", map[string]string{"redirectUri": connectBack, "state": "s-42", "email": gmailAddr}, http.StatusCreated, &link)
	if _, err := fake.Gmail.AddMessage(gmailAddr, googlefake.Message{Subject: "while the owner reads the link"}); err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Timeout: 10 * time.Second, Jar: jar}
	consent := continueLink(t, browser, link.URL)
	callback := redirectOf(t, browser, consent.String())
	back := redirectOf(t, browser, callback.String())
	q := back.Query()
	if !strings.HasPrefix(back.String(), connectBack+"?") || q.Get("status") != "connected" || q.Get("accountId") != acc.ID || q.Get("state") != "s-42" {
		t.Fatalf("back at %s, want %s?status=connected&accountId=%s&state=s-42", back, connectBack, acc.ID)
	}
	testkit.Eventually(t, 20*time.Second, "the account ready with the new mail", func() bool {
		a := account(ta, acc.ID)
		return a.Status == "ready" && a.Messages == before.Messages+2
	})
	if a := account(ta, acc.ID); a.StatusReason != "" {
		t.Errorf("statusReason after the repair: %q", a.StatusReason)
	}
	if n := fake.Calls(googlefake.MethodMessagesList); n != lists {
		t.Errorf("messages.list calls %d after the repair, %d before: a full sync ran", n, lists)
	}
	var list struct{ Accounts []gmailTestAccount }
	ta.JSON(http.MethodGet, "/api/v1/accounts?userId="+userID, nil, http.StatusOK, &list)
	if len(list.Accounts) != 1 {
		t.Fatalf("accounts after the repair: %+v", list.Accounts)
	}
}
