package app

import (
	"slices"
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

// TestSecretsCoverEverySecretSetting: every setting marked secret is among
// the values the redactor hides (a new secret setting must be added to
// secrets).
func TestSecretsCoverEverySecretSetting(t *testing.T) {
	t.Parallel()
	for _, s := range new(Config).settings() {
		if !s.secret {
			continue
		}
		c := new(Config)
		var target setting
		for _, cs := range c.settings() {
			if cs.env == s.env {
				target = cs
			}
		}
		val := "redis://:value-of-" + s.env + "@127.0.0.1:1/0"
		if err := target.value.Set(val); err != nil {
			t.Fatalf("%s: %v", s.env, err)
		}
		if !slices.Contains(c.secrets(), val) {
			t.Errorf("secret setting %s is not among Config.secrets (the redactor would log it)", s.env)
		}
	}
}
