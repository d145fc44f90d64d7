package app

import (
	"testing"
)

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
