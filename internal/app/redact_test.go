package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/testkit"
	"mailroom/queue/broker"
	"mailroom/queue/google"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// secretEnv sets every secret setting (TestSecretsCoverEverySecretSetting
// checks the redactor knows each) to a value that fails where it is used,
// and returns the values that must never be logged.
func secretEnv(t *testing.T) (env map[string]string, secrets []string) {
	closed := closedAddr(t)
	key := base64.StdEncoding.EncodeToString([]byte("SecretKeyBytes-0004-0123456789ab"))
	env = map[string]string{
		"MAILROOM_REDIS_URL":            "redis://:RedisSecret-0001@" + closed + "/0",
		"MAILROOM_ADMIN_PASSWORD":       "AdminSecret-0002 battery staple",
		"MAILROOM_API_TOKEN":            "ApiTokenSecret-0003-0123456789abcdef",
		"MAILROOM_SECRET_KEY":           key,
		"MAILROOM_GOOGLE_CLIENT_ID":     "client-id.apps.example",
		"MAILROOM_GOOGLE_CLIENT_SECRET": "ClientSecret-0005",
		"MAILROOM_PUSH_TOKEN":           "PushTokenSecret-0006",
		"MAILROOM_ALERT_WEBHOOK_URL":    "http://" + closed + "/api/webhooks/1/WebhookSecret-0007",
		"MAILROOM_BROKER_PASSWORD":      "BrokerSecret-0008",
		"MAILROOM_METRICS_TOKEN":        "MetricsTokenSecret-0011",
		// Not a secret setting, but its user info is a credential.
		"MAILROOM_GOOGLE_TOKEN_URL": "http://tokenuser:TokenUrlSecret-0009@" + closed + "/token",
		"MAILROOM_LOG_LEVEL":        "debug",
	}
	secrets = []string{"RedisSecret-0001", "AdminSecret-0002", "ApiTokenSecret-0003", key, "ClientSecret-0005",
		"PushTokenSecret-0006", "WebhookSecret-0007", "BrokerSecret-0008", "TokenUrlSecret-0009", "RefreshSecret-0010", "MetricsTokenSecret-0011"}
	return env, secrets
}

// leaks reports each secret text holds.
func leaks(t *testing.T, secrets []string, where, text string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(text, s) {
			t.Errorf("%s holds secret %q:\n%s", where, s, text)
		}
	}
}

// TestServeExitReasonHidesSecrets: serve cannot reach its Redis and exits;
// its log and its exit reason name no secret (the Redis URL's password
// included).
func TestServeExitReasonHidesSecrets(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	env, secrets := secretEnv(t)
	cmd := exec.Command(apptest.Binary(t), "serve")
	cmd.Env = append(os.Environ(), "MAILROOM_DATA_DIR="+t.TempDir(), "MAILROOM_HTTP_ADDR=127.0.0.1:0")
	for k, v := range env {
		if k != "MAILROOM_BROKER_PASSWORD" {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("serve started with an unreachable Redis:\n%s", out)
	}
	if len(bytes.TrimSpace(out)) == 0 {
		t.Fatal("serve exited without a reason")
	}
	leaks(t, secrets, "serve's log and exit reason", string(out))
}

// TestNoSecretInLogs feeds every other secret setting through a failing
// path of a running app logging at debug level and greps the log for it.
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	env, secrets := secretEnv(t)
	appEnv := map[string]string{"MAILROOM_BROKER_ADDR": closedAddr(t)}
	for k, v := range env {
		if k != "MAILROOM_REDIS_URL" {
			appEnv[k] = v
		}
	}
	cfg, err := app.ParseConfig("serve", nil, func(k string) string { return appEnv[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir, cfg.HTTPAddr = t.TempDir(), "127.0.0.1:0"
	cfg.RedisURL = env["MAILROOM_REDIS_URL"] // for the redactor; the broker is embedded below
	var logs testkit.Buffer
	logger := app.NewLogger(cfg, &logs)
	cfg.RedisURL = ""
	ctx := context.Background()
	a, err := app.New(ctx, cfg, app.Deps{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx); err != nil {
		a.Close()
		t.Fatal(err)
	}
	defer func() {
		if err := a.Stop(context.Background()); err != nil {
			t.Errorf("stop: %v", err)
		}
	}()
	base := "http://" + a.Addr()
	send := func(method, path, auth string) {
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// The API token, the push token and the admin password in requests.
	send(http.MethodGet, "/api/v1/users", "Bearer "+env["MAILROOM_API_TOKEN"])
	send(http.MethodGet, "/api/v1/users", "Bearer "+env["MAILROOM_API_TOKEN"]+"x")
	send(http.MethodPost, "/push/gmail?token="+url.QueryEscape(env["MAILROOM_PUSH_TOKEN"]), "")
	send(http.MethodPost, "/push/gmail/"+env["MAILROOM_PUSH_TOKEN"]+"?token="+env["MAILROOM_PUSH_TOKEN"], "")
	send(http.MethodPost, "/admin/login?password="+url.QueryEscape(env["MAILROOM_ADMIN_PASSWORD"]), "")
	send(http.MethodGet, "/metrics", "Bearer "+env["MAILROOM_METRICS_TOKEN"]+"x")
	logger.Debug("metrics scrape", "authorization", "Bearer "+env["MAILROOM_METRICS_TOKEN"])
	// The webhook: Go's client error quotes the whole URL.
	resp, err := http.Post(cfg.AlertWebhookURL, "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("the webhook at a closed port answered")
	}
	logger.Error("dead-letter alert not delivered", "err", err)
	// The token endpoint, with the client secret and a refresh token.
	gc := google.New(google.Config{TokenURL: cfg.GoogleTokenURL, ClientID: cfg.GoogleClientID, ClientSecret: cfg.GoogleClientSecret, HTTPClient: &http.Client{Timeout: 5 * time.Second}})
	if _, err := gc.TokenSource(google.Token{RefreshToken: "1//RefreshSecret-0010"}, nil).Token(); err == nil {
		t.Fatal("a token came from a closed port")
	} else {
		logger.Warn("token refresh failed", "err", err, "body", "grant_type=refresh_token&refresh_token=1//RefreshSecret-0010&client_secret="+cfg.GoogleClientSecret)
	}
	// The Redis URL, through the broker's own failure.
	if _, err := broker.Open(ctx, broker.Config{RedisURL: env["MAILROOM_REDIS_URL"], Logger: logger}); err == nil {
		t.Fatal("a Redis at a closed port answered")
	} else {
		logger.Error("broker", "err", err, "url", env["MAILROOM_REDIS_URL"])
	}
	// A careless log of the whole configuration.
	logger.Info("configuration", "config", fmt.Sprintf("%+v", *cfg), "webhook", cfg.AlertWebhookURL, "broker_password", cfg.BrokerPassword, "secret_key", cfg.SecretKey)

	out := logs.String()
	for _, want := range []string{"dead-letter alert not delivered", "token refresh failed", "configuration", "http request"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q: the failing path was not taken\n%s", want, out)
		}
	}
	leaks(t, secrets, "the app's log", out)
}
