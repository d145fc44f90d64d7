package google_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"mailroom/internal/googlefake"
	"mailroom/queue/google"
)

// TestRevokeURL: Google's endpoint by default, the emulator's next to a
// token URL ending in /token, and the configured one when set.
func TestRevokeURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  google.Config
		want string
	}{
		{google.Config{}, "https://oauth2.googleapis.com/revoke"},
		{google.Config{TokenURL: "http://127.0.0.1:9/token"}, "http://127.0.0.1:9/revoke"},
		{google.Config{TokenURL: "http://127.0.0.1:9/oauth/exchange"}, "https://oauth2.googleapis.com/revoke"},
		{google.Config{TokenURL: "http://127.0.0.1:9/token", RevokeURL: "http://127.0.0.1:9/r"}, "http://127.0.0.1:9/r"},
	} {
		if got := google.New(c.cfg).RevokeURL(); got != c.want {
			t.Errorf("%+v: revoke URL %q, want %q", c.cfg, got, c.want)
		}
	}
}

// TestRevoke: a revoked refresh token no longer refreshes; revoking it
// again is Google's invalid_token refusal.
func TestRevoke(t *testing.T) {
	t.Parallel()
	fake := googlefake.StartForTest(t, googlefake.Options{})
	refresh := fake.AddAccount("ann@example.com")
	gc := google.New(google.Config{TokenURL: fake.TokenURL(), HTTPClient: &http.Client{Timeout: 10 * time.Second}})
	tok := google.Token{RefreshToken: refresh}
	if _, err := gc.TokenSource(tok, nil).Token(); err != nil {
		t.Fatalf("refresh before the revoke: %v", err)
	}
	if err := gc.Revoke(context.Background(), tok); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := gc.TokenSource(tok, nil).Token(); err == nil {
		t.Fatal("a revoked refresh token still refreshes")
	}
	var re *google.RevokeError
	if err := gc.Revoke(context.Background(), tok); !errors.As(err, &re) || re.Status != http.StatusBadRequest || re.Code != "invalid_token" {
		t.Fatalf("second revoke: %v, want 400 invalid_token", err)
	}
}
