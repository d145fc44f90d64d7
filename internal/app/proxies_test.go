package app_test

import (
	"io"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/web/webtest"
)

// MAILROOM_TRUSTED_PROXIES reaches the web layer: behind a trusted proxy
// the login limit counts each client (X-Forwarded-For) apart.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	cfg, err := app.ParseConfig("serve", nil, func(k string) string {
		return map[string]string{"MAILROOM_TRUSTED_PROXIES": " 127.0.0.1, 10.0.0.0/8,,::1 "}[k]
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1", "10.0.0.0/8", "::1"}; !slices.Equal(cfg.TrustedProxies, want) {
		t.Fatalf("trusted proxies %q, want %q", cfg.TrustedProxies, want)
	}

	ta := apptest.Start(t, func(c *app.Config) { c.TrustedProxies = []string{"127.0.0.1"} })
	login := func(client string) int {
		t.Helper()
		resp, err := webtest.SignIn(http.DefaultClient, ta.URL, url.Values{"password": {"guess"}}, http.Header{"X-Forwarded-For": {client}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 5 {
		login("203.0.113.1")
	}
	if st := login("203.0.113.1"); st != http.StatusTooManyRequests {
		t.Errorf("the client over the limit: %d, want 429", st)
	}
	if st := login("203.0.113.2"); st != http.StatusUnauthorized {
		t.Errorf("another client behind the same proxy: %d, want 401 (its own limit)", st)
	}
}
