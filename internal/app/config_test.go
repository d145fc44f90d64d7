package app

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// MAILROOM_TRUSTED_PROXIES reaches the web layer: behind a trusted proxy
// the login limit counts each client (X-Forwarded-For) apart.
func TestTrustedProxies(t *testing.T) {
	t.Parallel()
	cfg, err := ParseConfig("serve", nil, func(k string) string {
		return map[string]string{"MAILROOM_TRUSTED_PROXIES": " 127.0.0.1, 10.0.0.0/8,,::1 "}[k]
	}, nopWriter{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"127.0.0.1", "10.0.0.0/8", "::1"}; !slices.Equal(cfg.TrustedProxies, want) {
		t.Fatalf("trusted proxies %q, want %q", cfg.TrustedProxies, want)
	}

	ta := startApp(t, func(c *Config) { c.TrustedProxies = listValue{"127.0.0.1"} })
	login := func(client string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, ta.URL+"/admin/login", strings.NewReader(url.Values{"password": {"guess"}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", client)
		resp, err := http.DefaultClient.Do(req)
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

func TestRedirectURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{HTTPAddr: "127.0.0.1:8080"}, "http://127.0.0.1:8080/oauth/google/callback"},
		{Config{PublicURL: "https://mail.example.com/"}, "https://mail.example.com/oauth/google/callback"},
		{Config{PublicURL: "https://mail.example.com", GoogleRedirectURL: "https://auth.example.com/cb"}, "https://auth.example.com/cb"},
	} {
		if got := c.cfg.redirectURL(); got != c.want {
			t.Errorf("%+v: redirect URL %q, want %q", c.cfg, got, c.want)
		}
	}
}
