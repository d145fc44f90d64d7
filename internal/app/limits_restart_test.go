package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mailroom/internal/app"
	"mailroom/internal/app/apptest"
	"mailroom/internal/testkit"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestRuleSaveLimitAcrossRestart: the rule save window lives in the
// broker, which the embedded store forgets at a restart. The next run
// resumes as if the last window were fully spent (429 with Retry-After
// until one window after the last run was seen alive), then accepts again.
func TestRuleSaveLimitAcrossRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const window = 3 * time.Second
	cfg := func(cfg *app.Config) {
		cfg.DataDir = dir
		cfg.RuleSaveLimit = 2
		cfg.RuleSaveWindow = window
	}
	rule := func(label string) map[string]any {
		return map[string]any{"label": label, "conditions": []map[string]string{{"field": "from", "op": "contains", "value": "@example.com"}}}
	}
	ta := apptest.Start(t, cfg)
	userID := createUser(ta, "limits@example.com")
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", rule("A"), http.StatusCreated, nil)
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", rule("B"), http.StatusCreated, nil)
	if status, raw := ta.Do(http.MethodPost, "/api/v1/users/"+userID+"/rules", rule("C")); status != http.StatusTooManyRequests {
		t.Fatalf("third save in the window: %d %s, want 429", status, raw)
	}
	if err := ta.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	ta = apptest.Start(t, cfg)
	// The loss is dated at most this start (the last heartbeat of the
	// first run plus one heartbeat, but not later than now).
	restarted := time.Now()
	req, _ := http.NewRequest(http.MethodPost, ta.URL+"/api/v1/users/"+userID+"/rules", jsonBody(t, rule("C")))
	req.Header.Set("Authorization", "Bearer "+ta.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || after < 1 || after > int(window/time.Second)+1 {
		t.Fatalf("save right after the restart: %d, Retry-After %q; want 429 with at most the window", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	testkit.Eventually(t, 2*window, "the window to pass", func() bool { return time.Since(restarted) > window+100*time.Millisecond })
	ta.JSON(http.MethodPost, "/api/v1/users/"+userID+"/rules", rule("C"), http.StatusCreated, nil)
}

func jsonBody(t *testing.T, v any) io.Reader {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(raw)
}
