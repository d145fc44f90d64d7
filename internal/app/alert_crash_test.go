package app_test

import (
	"io"
	"mailroom/internal/testkit"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAlertSurvivesKill9 kills the binary with SIGKILL the moment its
// first dead-letter alert reaches the webhook, before it hears back: the
// dead letter committed, its alert was not delivered, and after the
// restart the alert arrives.
func TestAlertSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the binary")
	}
	var victim atomic.Pointer[proc]
	var mu sync.Mutex
	var delivered []string
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if p := victim.Swap(nil); p != nil {
			kill9(p) // the process dies before the webhook answers
			panic(http.ErrAbortHandler)
		}
		mu.Lock()
		delivered = append(delivered, string(raw))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)

	dir := t.TempDir()
	p := startProc(t, dir, "MAILROOM_ALERT_WEBHOOK_URL="+hook.URL)
	victim.Store(p)
	p.post("/api/v1/debug/tasks", map[string]any{"count": 1, "fail": "permanent"})
	testkit.Eventually(t, 30*time.Second, "the child to die on its alert", func() bool {
		select {
		case <-p.exited:
			return true
		default:
			return false
		}
	})
	mu.Lock()
	if len(delivered) != 0 {
		t.Fatalf("an alert was delivered before the kill: %q", delivered)
	}
	mu.Unlock()

	p = startProc(t, dir, "MAILROOM_ALERT_WEBHOOK_URL="+hook.URL)
	testkit.Eventually(t, 30*time.Second, "the alert after the restart", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) > 0
	})
	var dead struct {
		Deadletters []struct{ ID string } `json:"deadletters"`
	}
	p.must(http.MethodGet, "/api/v1/deadletters", nil, http.StatusOK, &dead)
	mu.Lock()
	defer mu.Unlock()
	if len(dead.Deadletters) != 1 || !strings.Contains(delivered[0], "debug:record: 1") || !strings.Contains(delivered[0], dead.Deadletters[0].ID) {
		t.Fatalf("after the restart: %d dead letters, alerts %q; want the one dead letter announced", len(dead.Deadletters), delivered)
	}
}
