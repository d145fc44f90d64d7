package app_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/googlefake"
)

// TestGmailOAuthStateBoundToSession: a consent started in one admin
// session and finished in another (a login CSRF or a stolen link) is
// refused and connects nothing, and leaves the consent to the session that
// started it; the consent URL carries an S256 PKCE challenge.
func TestGmailOAuthStateBoundToSession(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{ClientID: "client-id", ClientSecret: "client-secret", ConsentAccount: gmailAddr})
	fake.AddAccount(gmailAddr)
	addr := freeAddr(t) // the redirect URL names the address
	ta := apptest.Start(t, withGoogle(fake, func(cfg *app.Config) {
		cfg.HTTPAddr = addr
		cfg.GoogleClientID, cfg.GoogleClientSecret = "client-id", "client-secret"
	}))
	userID := createUser(ta, "owner@example.com")
	a := adminClient(ta)
	resp := adminStartConnect(t, noFollow(a), ta, userID)
	resp.Body.Close()
	consent, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil {
		t.Fatalf("start: %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	if q := consent.Query(); q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "" {
		t.Fatalf("consent URL without an S256 challenge: %s", consent)
	}
	callback := redirectOf(t, a, consent.String())
	// Another session (a second sign-in) brings the callback.
	b := adminClient(ta)
	status, body := getPage(t, b, callback.String())
	if status != http.StatusOK || !strings.Contains(body, "The sign-in state is not valid") {
		t.Fatalf("callback in another session: %d\n%s", status, body)
	}
	var list struct{ Accounts []gmailTestAccount }
	ta.JSON(http.MethodGet, "/api/v1/accounts", nil, http.StatusOK, &list)
	if len(list.Accounts) != 0 {
		t.Fatalf("connected through another session: %+v", list)
	}
	// The starting session's own callback still connects.
	if resp := redirectOf(t, noFollow(a), callback.String()); !strings.HasPrefix(resp.Path, "/admin/accounts/") {
		t.Fatalf("the starting session's callback after another's try went to %s", resp)
	}
}

// TestGmailAdminDeleteRevokesGrant: deleting an account from the admin page
// revokes its grant at Google and says so; when Google refuses, the page
// says that and the account is deleted anyway.
func TestGmailAdminDeleteRevokesGrant(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{PushAudience: pushAudience})
	ta := apptest.Start(t, withGoogle(fake, nil))
	userID := createUser(ta, "owner@example.com")
	c := adminClient(ta)
	del := func(id string) string {
		t.Helper()
		_, page := getPage(t, c, ta.URL+"/admin/accounts/"+id)
		m := csrfRE.FindStringSubmatch(page)
		if m == nil {
			t.Fatal("no CSRF token on the account page")
		}
		resp, err := c.PostForm(ta.URL+"/admin/accounts/"+id+"/delete", url.Values{"csrf": {m[1]}})
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("delete: %s\n%s", resp.Status, raw)
		}
		ta.JSON(http.MethodGet, "/api/v1/accounts/"+id, nil, http.StatusNotFound, nil)
		return string(raw)
	}

	acc := connectAccount(ta, fake, userID, gmailAddr)
	waitMirror(ta, fake, acc.ID, gmailAddr, 20*time.Second)
	if body := del(acc.ID); !strings.Contains(body, "Google grant revoked") {
		t.Fatalf("the page does not say the grant was revoked:\n%s", body)
	}
	if n := fake.Calls(googlefake.MethodRevoke); n != 1 {
		t.Fatalf("revoke calls %d, want 1", n)
	}

	if _, err := fake.InjectFault(googlefake.Fault{Method: googlefake.MethodRevoke, Code: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	acc = connectAccount(ta, fake, userID, "bob@example.com")
	waitMirror(ta, fake, acc.ID, "bob@example.com", 20*time.Second)
	if body := del(acc.ID); !strings.Contains(body, "Google did not revoke") || !strings.Contains(body, "503") {
		t.Fatalf("the page does not say Google refused the revoke:\n%s", body)
	}
}
