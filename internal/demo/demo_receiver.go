package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"mailroom/web"
)

// demoReceiverPath ends the URL of the demo's built-in webhook receiver:
// a webhook to it from an earlier run (on another port) is replaced.
const demoReceiverPath = "/mailroom-demo-receiver"

// demoReceiver is the demo's built-in webhook endpoint, what a service
// using mailroom would run: a loopback HTTP server that verifies each
// delivery's Standard Webhooks signature with the webhook's secret, counts
// the events it verified, and refuses a delivery that does not verify.
type demoReceiver struct {
	log *slog.Logger
	srv *http.Server
	url string

	mu        sync.Mutex
	secret    string // the webhook's, once registered
	webhookID string
	stats     web.DemoReceiver
}

// newDemoReceiver listens on a loopback port; it serves once started.
func newDemoReceiver(log *slog.Logger) (*demoReceiver, net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, fmt.Errorf("demo: listen for the webhook receiver: %w", err)
	}
	r := &demoReceiver{log: log, url: "http://" + ln.Addr().String() + demoReceiverPath}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+demoReceiverPath, r.serve)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second}
	r.stats.URL = r.url
	return r, ln, nil
}

func (r *demoReceiver) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return r.srv.Shutdown(ctx)
}

// serve takes one delivery: 204 when its signature verifies, else 401.
func (r *demoReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 8<<20))
	if err != nil {
		http.Error(w, "unreadable body", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	secret := r.secret
	r.mu.Unlock()
	events, err := verifyDelivery(secret, body, req.Header)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Deliveries++
	r.stats.Last = time.Now()
	if err != nil {
		r.stats.Refused++
		r.log.Warn("demo: the webhook receiver refused a delivery", "webhook_msg_id", req.Header.Get("webhook-id"), "err", err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if r.stats.Verified == 0 {
		r.log.Info("demo: the built-in webhook receiver verified its first delivery's signature", "events", events, "url", r.url)
	}
	r.stats.Verified += events
	r.log.Debug("demo: webhook delivery verified", "events", events, "verified_total", r.stats.Verified)
	w.WriteHeader(http.StatusNoContent)
}

// verifyDelivery checks a delivery's signature with secret, as the
// Standard Webhooks library does for any receiver, and returns how many
// events it carries.
func verifyDelivery(secret string, body []byte, h http.Header) (int, error) {
	if secret == "" {
		return 0, errors.New("no webhook is registered for this receiver yet")
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return 0, err
	}
	if err := wh.Verify(body, h); err != nil {
		return 0, fmt.Errorf("the signature does not verify: %w", err)
	}
	var b struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return 0, fmt.Errorf("the body is not a batch of events: %w", err)
	}
	return len(b.Events), nil
}

// Stats is what the receiver took so far.
func (r *demoReceiver) Stats() web.DemoReceiver {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.WebhookID = r.webhookID
	return s
}

type demoAPIWebhook struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// seedWebhook registers the receiver as a webhook of every event (once
// the user exists, so its events come from the start), replacing the
// webhook an earlier run made for its own port: the secret is shown only
// when a webhook is made.
func (d *demo) seedWebhook(ctx context.Context, _ *demoIDs) error {
	r := d.receiver
	var list struct {
		Webhooks []demoAPIWebhook `json:"webhooks"`
	}
	if err := d.api.do(ctx, http.MethodGet, "/api/v1/webhooks", nil, &list); err != nil {
		return err
	}
	for _, w := range list.Webhooks {
		if strings.HasSuffix(w.URL, demoReceiverPath) && strings.HasPrefix(w.URL, "http://127.0.0.1:") {
			if err := d.api.do(ctx, http.MethodDelete, "/api/v1/webhooks/"+w.ID, nil, nil); err != nil && demoStatusOf(err) != http.StatusNotFound {
				return err
			}
		}
	}
	var made demoAPIWebhook
	if err := d.api.do(ctx, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": r.url}, &made); err != nil {
		return err
	}
	r.mu.Lock()
	r.secret, r.webhookID = made.Secret, made.ID
	r.mu.Unlock()
	d.log.Info("demo: webhook registered to the built-in receiver, which verifies each signature", "webhook_id", made.ID, "url", r.url)
	return nil
}
