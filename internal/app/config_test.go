package app

import (
	"errors"
	"flag"
	"slices"
	"strings"
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

// TestBadValueIsOneLine: a value a setting cannot take, from its variable
// or its flag, is refused with one line naming both, and nothing else is
// printed (not the flag list).
func TestBadValueIsOneLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env     map[string]string
		args    []string
		flag    string
		envName string
	}{
		{map[string]string{"MAILROOM_RECLASSIFY_DEBOUNCE": "abc"}, nil, "--reclassify-debounce", "MAILROOM_RECLASSIFY_DEBOUNCE"},
		{map[string]string{"MAILROOM_RETRY_MULTIPLIER": "x"}, nil, "--retry-multiplier", "MAILROOM_RETRY_MULTIPLIER"},
		{map[string]string{"MAILROOM_SHEETS_PROJECT_READS_PER_MINUTE": "abc"}, nil, "--sheets-project-reads-per-minute", "MAILROOM_SHEETS_PROJECT_READS_PER_MINUTE"},
		{nil, []string{"--reclassify-debounce", "abc"}, "--reclassify-debounce", "MAILROOM_RECLASSIFY_DEBOUNCE"},
		{nil, []string{"--max-retries=many"}, "--max-retries", "MAILROOM_MAX_RETRIES"},
	} {
		var out strings.Builder
		_, err := ParseConfig("serve", c.args, func(k string) string { return c.env[k] }, &out)
		if err == nil {
			t.Fatalf("%v %v: accepted", c.env, c.args)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.flag+" ") || !strings.Contains(msg, c.envName) || strings.Contains(msg, "\n") || out.Len() != 0 {
			t.Errorf("%v %v: %q (and %d bytes printed); want one line naming %s and %s", c.env, c.args, msg, out.Len(), c.flag, c.envName)
		}
	}
	// An unknown flag is one line too; -h prints the flags.
	var out strings.Builder
	if _, err := ParseConfig("serve", []string{"--nope"}, func(string) string { return "" }, &out); err == nil || strings.Contains(err.Error(), "\n") || out.Len() != 0 {
		t.Errorf("unknown flag: %v (and %q printed)", err, out.String())
	}
	out.Reset()
	if _, err := ParseConfig("serve", []string{"-h"}, func(string) string { return "" }, &out); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "MAILROOM_RECLASSIFY_DEBOUNCE") {
		t.Errorf("-h: %v, printed %d bytes", err, out.Len())
	}
}
