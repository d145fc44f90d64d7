package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	t.Parallel()
	webhook := "https://discord.example/api/webhooks/123/AbCdEfWebhookSecret"
	r := New(webhook, "redis://:RedisPassw0rd@redis.internal:6379/0", "0123456789abcdef0123456789abcdef", "", "abc")
	cases := []struct{ in, gone string }{
		{`Post "` + webhook + `": dial tcp: connection refused`, "AbCdEfWebhookSecret"},
		{"auth failed with RedisPassw0rd", "RedisPassw0rd"},
		{"dial redis://:RedisPassw0rd@redis.internal:6379/0", "RedisPassw0rd"},
		{"Bearer 0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdef"},
		// Generic: any URL's password, OAuth parameters and JSON fields.
		{`Post "https://client:TokenPass@oauth.example/token": EOF`, "TokenPass"},
		{"body client_secret=sh-secret&refresh_token=1//rt-secret&grant_type=refresh_token", "sh-secret"},
		{"body client_secret=sh-secret&refresh_token=1//rt-secret&grant_type=refresh_token", "rt-secret"},
		{`Response: {"access_token":"ya29.secret","refresh_token":"1//rt"}`, "ya29.secret"},
		{"GET /push/gmail?token=push-secret-value", "push-secret-value"},
	}
	for _, tc := range cases {
		got := r.String(tc.in)
		if strings.Contains(got, tc.gone) {
			t.Errorf("String(%q) = %q: still holds %q", tc.in, got, tc.gone)
		}
		if !strings.Contains(got, Mask) {
			t.Errorf("String(%q) = %q: no mask", tc.in, got)
		}
	}
	// Ordinary text, and secrets too short to hide by value, are left alone.
	for _, s := range []string{"abc def", "synced 12 messages for ann@example.com", "https://discord.example/ is up"} {
		if got := r.String(s); got != s {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
	// The host of a secret URL stays, to say where the failure was.
	if got := r.String(webhook); !strings.Contains(got, "discord.example") {
		t.Errorf("String(webhook) = %q lost the host", got)
	}
}

func TestError(t *testing.T) {
	t.Parallel()
	r := New("super-secret-value")
	base := fmt.Errorf("open: %w", fs.ErrNotExist)
	err := r.Error(fmt.Errorf("post with super-secret-value: %w", base))
	if strings.Contains(err.Error(), "super-secret-value") {
		t.Errorf("Error() = %q", err)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Error("the chain is lost")
	}
	if r.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
	if r.Error(base) != base {
		t.Error("an error with nothing to hide was wrapped")
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-but-longer"
	for _, json := range []bool{false, true} {
		var buf bytes.Buffer
		var h slog.Handler = slog.NewTextHandler(&buf, nil)
		if json {
			h = slog.NewJSONHandler(&buf, nil)
		}
		log := slog.New(New(secret).Handler(h)).With("preset", "with "+secret)
		log.Info("message "+secret,
			"s", secret,
			"err", errors.New("failed: "+secret),
			"any", []string{secret},
			slog.Group("g", "inner", secret, "n", 3),
		)
		log.WithGroup("grp").Warn("x", "url", "https://u:pw-in-url@h.example/")
		out := buf.String()
		if strings.Contains(out, secret) || strings.Contains(out, "pw-in-url") {
			t.Errorf("json=%v: log holds a secret:\n%s", json, out)
		}
		if !strings.Contains(out, "n=3") && !strings.Contains(out, `"n":3`) {
			t.Errorf("json=%v: other attributes lost:\n%s", json, out)
		}
	}
}
