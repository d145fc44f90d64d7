package gmail_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/gmail"
	"mailroom/queue/google"
	"mailroom/store"
)

const (
	testClientID    = "client-id"
	testRedirectURL = "https://mailroom.example/oauth/google/callback"
	sessionA        = "csrf-secret-of-session-a"
	sessionB        = "csrf-secret-of-session-b"
)

// consent starts the consent flow in session and lets the emulator approve
// it; it returns the consent URL and the callback's code and state.
func consent(t *testing.T, e *env, session string) (consentURL *url.URL, code, state string) {
	t.Helper()
	u, err := e.p.OAuthStart(e.user.ID, "", session)
	if err != nil {
		t.Fatal(err)
	}
	consentURL, err = url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("consent answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	return consentURL, loc.Query().Get("code"), loc.Query().Get("state")
}

func badState(err error) bool {
	var inv *gmail.InvalidError
	return errors.As(err, &inv) && inv.Field == "state"
}

// TestOAuthConnectWithPKCE: the consent URL carries an S256 PKCE challenge
// and a random state (no user id in it); the callback in the same session
// exchanges the code with the verifier (the emulator refuses it without)
// and connects the account; the state then cannot be used again.
func TestOAuthConnectWithPKCE(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{oauth: true, fake: googlefake.Options{ConsentAccount: ann}})
	e.fake.AddAccount(ann)
	cu, code, state := consent(t, e, sessionA)
	q := cu.Query()
	if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 {
		t.Fatalf("consent URL has no S256 challenge: %s", cu)
	}
	if strings.Contains(state, e.user.ID) || len(state) < 22 {
		t.Fatalf("state %q: want a random value naming nothing", state)
	}
	acc, err := e.p.OAuthCallback(context.Background(), code, state, sessionA)
	if err != nil {
		t.Fatalf("callback: %v", err)
	}
	if acc.Email != ann || acc.UserID != e.user.ID {
		t.Fatalf("connected %+v", acc)
	}
	// Single use: the same callback again is refused.
	if _, err := e.p.OAuthCallback(context.Background(), code, state, sessionA); !badState(err) {
		t.Fatalf("replayed callback: %v, want an invalid state", err)
	}
}

// TestOAuthStateBoundToSession: a callback carrying another admin session
// is refused, and the state is spent (single use), so the right session
// cannot use it afterwards either; an unknown state is refused.
func TestOAuthStateBoundToSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{oauth: true, fake: googlefake.Options{ConsentAccount: ann}})
	e.fake.AddAccount(ann)
	_, code, state := consent(t, e, sessionA)
	for _, s := range []string{sessionB, ""} {
		if _, err := e.p.OAuthCallback(context.Background(), code, state, s); !badState(err) {
			t.Fatalf("callback in session %q: %v, want an invalid state", s, err)
		}
	}
	if _, err := e.p.OAuthCallback(context.Background(), code, state, sessionA); !badState(err) {
		t.Fatalf("callback after a refused one: %v, want an invalid state (spent)", err)
	}
	if _, err := e.p.OAuthCallback(context.Background(), code, "forged", sessionA); !badState(err) {
		t.Fatalf("forged state: %v", err)
	}
	if _, err := e.p.OAuthStart(e.user.ID, "", ""); !badState(err) {
		t.Fatalf("start without a session: %v", err)
	}
	var n int
	_ = e.db.View(func(tx *store.Tx) error { accs, err := tx.Accounts(); n = len(accs); return err })
	if n != 0 {
		t.Fatalf("%d accounts connected through refused callbacks", n)
	}
}

// TestOAuthStateExpiresAfterTenMinutes: a callback 10 minutes after the
// start is refused; one just before is accepted.
func TestOAuthStateExpiresAfterTenMinutes(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	e := newEnv(t, envOptions{oauth: true, fake: googlefake.Options{ConsentAccount: ann}, cfg: gmail.Config{Now: clock}})
	e.fake.AddAccount(ann)
	_, code, state := consent(t, e, sessionA)
	advance(10 * time.Minute)
	_, err := e.p.OAuthCallback(context.Background(), code, state, sessionA)
	var inv *gmail.InvalidError
	if !errors.As(err, &inv) || !strings.Contains(inv.Message, "too long") {
		t.Fatalf("callback after 10 minutes: %v, want too long", err)
	}
	_, code, state = consent(t, e, sessionA)
	advance(10*time.Minute - time.Second)
	if _, err := e.p.OAuthCallback(context.Background(), code, state, sessionA); err != nil {
		t.Fatalf("callback within 10 minutes: %v", err)
	}
}

// refreshWorks reports whether the emulator still honours refresh.
func refreshWorks(e *env, refresh string) bool {
	gc := google.New(google.Config{TokenURL: e.fake.TokenURL(), HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	_, err := gc.TokenSource(google.Token{RefreshToken: refresh}, nil).Token()
	return err == nil
}

// TestDeleteRevokesGrant: deleting an account revokes its refresh token at
// Google's revocation endpoint.
func TestDeleteRevokesGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	refresh := e.fake.AddAccount(ann)
	acc, _, err := e.p.Connect(context.Background(), gmail.ConnectRequest{UserID: e.user.ID, Email: ann, Token: google.Token{RefreshToken: refresh}})
	if err != nil {
		t.Fatal(err)
	}
	if !refreshWorks(e, refresh) {
		t.Fatal("the refresh token does not work before the delete")
	}
	d, err := e.p.Delete(context.Background(), acc.ID)
	if err != nil || d.RevokeErr != nil {
		t.Fatalf("delete: %v, revoke: %v", err, d.RevokeErr)
	}
	if e.fake.Calls(googlefake.MethodRevoke) != 1 {
		t.Fatalf("revoke calls %d, want 1", e.fake.Calls(googlefake.MethodRevoke))
	}
	if refreshWorks(e, refresh) {
		t.Fatal("the refresh token still works at Google after the delete")
	}
}

// TestDeleteCompletesWhenRevokeRefused: Google refusing the revocation is
// returned (for the page to show) and the account is deleted anyway.
func TestDeleteCompletesWhenRevokeRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{noStart: true})
	acc := e.connect(ann, 0)
	if _, err := e.fake.InjectFault(googlefake.Fault{Method: googlefake.MethodRevoke, Code: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	d, err := e.p.Delete(context.Background(), acc.ID)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	var re *google.RevokeError
	if !errors.As(d.RevokeErr, &re) || re.Status != http.StatusServiceUnavailable {
		t.Fatalf("revoke error %v, want Google's 503", d.RevokeErr)
	}
	if _, err := e.p.Account(acc.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("account after delete: %v, want not found", err)
	}
}
