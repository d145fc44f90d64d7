package gmail_test

import (
	"context"
	"errors"
	"net/http"
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
)

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
