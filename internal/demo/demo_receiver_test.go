package demo

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// TestDemoReceiverVerifies: the receiver counts the events of a delivery
// signed with its webhook's secret, and refuses (401) one signed with
// another, or any before its webhook is registered.
func TestDemoReceiverVerifies(t *testing.T) {
	t.Parallel()
	r, ln, err := newDemoReceiver(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	const secret, other = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdA=="
	body := []byte(`{"events":[{"id":"evt_1"},{"id":"evt_2"}]}`)
	post := func(signWith string) int {
		t.Helper()
		wh, err := standardwebhooks.NewWebhook(signWith)
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		sig, err := wh.Sign("msg_1", now, body)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, demoReceiverPath, bytes.NewReader(body))
		req.Header.Set("webhook-id", "msg_1")
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		w := httptest.NewRecorder()
		r.srv.Handler.ServeHTTP(w, req)
		return w.Code
	}
	if code := post(secret); code != http.StatusUnauthorized {
		t.Errorf("before registration: %d, want 401", code)
	}
	r.mu.Lock()
	r.secret = secret
	r.mu.Unlock()
	if code := post(other); code != http.StatusUnauthorized {
		t.Errorf("signed with another secret: %d, want 401", code)
	}
	if code := post(secret); code != http.StatusNoContent {
		t.Errorf("signed with its secret: %d, want 204", code)
	}
	if st := r.Stats(); st.Deliveries != 3 || st.Refused != 2 || st.Verified != 2 {
		t.Errorf("stats %+v, want 3 deliveries, 2 refused, 2 events verified", st)
	}
}
