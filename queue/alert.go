package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"mailroom/internal/lifecycle"
	"mailroom/store"
)

// AlertConfig configures dead-letter alerts.
type AlertConfig struct {
	// WebhookURL is a Discord- or Slack-compatible incoming webhook. Empty:
	// alerts are only counted.
	WebhookURL string
	// Interval is the least time between two messages. Default 10s.
	Interval time.Duration
	// Retries is how many times a failed post is tried again. Default 5.
	Retries int
	// PublicURL links the message to the admin page.
	PublicURL string
	Client    *http.Client
	Logger    *slog.Logger
	// DB, when set with a WebhookURL, keeps the alerts pending delivery in
	// bbolt: the queue counts a dead letter there in the transaction that
	// makes it, and they are taken off only once a message announcing them
	// was delivered, so a crash or a webhook outage loses none (they are
	// sent after the restart). Nil: pending alerts live in memory.
	DB *store.DB
}

// Alerter groups dead-letter notices and posts at most one message per
// interval, summarising counts per task type and the newest error. Notify
// never blocks and never fails.
type Alerter struct {
	cfg AlertConfig
	log *slog.Logger

	mu      sync.Mutex
	counts  map[string]int
	newest  alertItem
	notices map[string]int // by subject: things that wait for a person, not dead letters
	notice  alertItem
	pending bool
	kick    chan struct{}
	sent    int
	failed  int
	raised  []string // one-off operational alerts (Raise)

	// The loop's lifecycle (Start; Stop is Base's).
	lifecycle.Base
}

var _ lifecycle.Service = (*Alerter)(nil)

type alertItem struct{ typ, id, err string }

// NewAlerter builds an alerter; it sends while it runs (Start to Stop).
func NewAlerter(cfg AlertConfig) *Alerter {
	if cfg.Interval <= 0 {
		cfg.Interval = 10 * time.Second
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 5
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Alerter{cfg: cfg, log: cfg.Logger.With("component", "alerts"), counts: map[string]int{}, notices: map[string]int{}, kick: make(chan struct{}, 1)}
}

// Raise sends an operational alert (the store cannot write, ...) as its
// own message at the next send. It is kept in memory only: it is about a
// state the appliance reports again while it lasts.
func (a *Alerter) Raise(text string) {
	a.mu.Lock()
	if len(a.raised) < 20 {
		a.raised = append(a.raised, text)
	}
	a.mu.Unlock()
	a.wake()
}

// flushNotices posts the raised alerts, one message each.
func (a *Alerter) flushNotices(ctx context.Context) {
	a.mu.Lock()
	raised := a.raised
	a.raised = nil
	a.mu.Unlock()
	if a.cfg.WebhookURL == "" {
		return
	}
	for _, text := range raised {
		text = "mailroom: " + text
		err := a.post(ctx, chatBody(text))
		a.mu.Lock()
		if err != nil {
			a.failed++
		} else {
			a.sent++
		}
		a.mu.Unlock()
		if err != nil {
			a.log.Error("alert not delivered", "alert", text, "err", err)
		}
	}
}

// durable reports whether pending alerts are kept in bbolt.
func (a *Alerter) durable() bool { return a.cfg.DB != nil && a.cfg.WebhookURL != "" }

// Notify records one dead letter for the next message. With a DB the dead
// letter was counted in bbolt with the dead letter itself (see record), and
// Notify only wakes the sender.
func (a *Alerter) Notify(typ, id, errText string) {
	if a.durable() {
		a.wake()
		return
	}
	a.mu.Lock()
	a.counts[typ]++
	a.newest = alertItem{typ: typ, id: id, err: errText}
	a.pending = true
	a.mu.Unlock()
	a.wake()
}

func (a *Alerter) wake() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// Notice records something that waits for a person (a form whose sheet is
// gone) for the next message, grouped like dead letters. Never blocks.
func (a *Alerter) Notice(subject, id, text string) {
	a.mu.Lock()
	a.notices[subject]++
	a.notice = alertItem{typ: subject, id: id, err: text}
	a.pending = true
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// record counts a dead letter in the caller's transaction (the one that
// makes the dead letter) when alerts are durable.
func (a *Alerter) record(tx *store.Tx, typ, id, errText string, at time.Time) error {
	if !a.durable() {
		return nil
	}
	return tx.AlertAdd(typ, id, Truncate(errText, 1000), at)
}

// Sent returns how many messages were posted and how many gave up.
func (a *Alerter) Sent() (sent, failed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sent, a.failed
}

// Start runs the alerter's loop until Stop. Start it before the
// task servers and stop it after them, so the dead letters of a shutdown
// are announced too. Stop ends the loop and waits until what was pending
// is posted (bounded by the final flush's 5 s, and a post under way by the
// client's timeout).
func (a *Alerter) Start(ctx context.Context) error {
	return a.StartLoop(ctx, a.run)
}

// run posts grouped alerts until ctx ends, then posts what is left.
func (a *Alerter) run(ctx context.Context) {
	var last time.Time
	if a.durable() {
		a.wake() // what an earlier run left undelivered
	}
	for {
		select {
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			a.flush(flushCtx)
			cancel()
			return
		case <-a.kick:
		}
		if wait := a.cfg.Interval - time.Since(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				continue
			case <-time.After(wait):
			}
		}
		last = time.Now()
		a.flush(ctx)
	}
}

func (a *Alerter) flush(ctx context.Context) {
	a.flushNotices(ctx)
	if a.durable() {
		a.flushStored(ctx) // dead letters; the notices below stay in memory
	}
	a.mu.Lock()
	if !a.pending {
		a.mu.Unlock()
		return
	}
	counts, newest, notices, notice := a.counts, a.newest, a.notices, a.notice
	a.counts, a.notices, a.pending = map[string]int{}, map[string]int{}, false
	a.mu.Unlock()
	if a.cfg.WebhookURL == "" {
		return
	}
	var text string
	if len(counts) > 0 {
		text = a.message(counts, newest)
	}
	if len(notices) > 0 {
		text = a.noticeMessage(text, notices, notice)
	}
	err := a.post(ctx, chatBody(text))
	a.mu.Lock()
	if err != nil {
		a.failed++
	} else {
		a.sent++
	}
	a.mu.Unlock()
	if err != nil {
		a.log.Error("dead-letter alert not delivered", "err", err)
	}
}

// flushStored posts the alerts pending in bbolt and takes them off once
// delivered; on failure they stay, and another try follows an interval
// later.
func (a *Alerter) flushStored(ctx context.Context) {
	var pending []store.PendingAlert
	if err := a.cfg.DB.View(func(tx *store.Tx) error {
		var err error
		pending, err = tx.PendingAlerts()
		return err
	}); err != nil {
		a.log.Error("read pending dead-letter alerts", "err", err)
		a.retryLater(ctx)
		return
	}
	if len(pending) == 0 {
		return
	}
	counts := map[string]int{}
	var newest store.PendingAlert
	for _, p := range pending {
		counts[p.Type] += p.Count
		if p.NewestAt.After(newest.NewestAt) || newest.Type == "" {
			newest = p
		}
	}
	err := a.post(ctx, chatBody(a.message(counts, alertItem{typ: newest.Type, id: newest.NewestID, err: newest.NewestError})))
	if err == nil {
		err = a.cfg.DB.Update(func(tx *store.Tx) error { return tx.AlertsDelivered(pending) })
		if err != nil {
			// Delivered but still pending: it will be sent again.
			a.log.Error("mark dead-letter alerts delivered", "err", err)
		}
		a.mu.Lock()
		a.sent++
		a.mu.Unlock()
		return
	}
	a.mu.Lock()
	a.failed++
	a.mu.Unlock()
	a.log.Error("dead-letter alert not delivered; it is kept and tried again", "err", err)
	a.retryLater(ctx)
}

// retryLater wakes the sender again after an interval (unless ctx ends).
func (a *Alerter) retryLater(ctx context.Context) {
	t := time.AfterFunc(a.cfg.Interval, a.wake)
	context.AfterFunc(ctx, func() { t.Stop() })
}

// message says how many tasks of each type were dead-lettered, and quotes
// the newest one's error.
func (a *Alerter) message(counts map[string]int, newest alertItem) string {
	types := make([]string, 0, len(counts))
	total := 0
	for t, n := range counts {
		types = append(types, t)
		total += n
	}
	sort.Strings(types)
	var b strings.Builder
	fmt.Fprintf(&b, "mailroom: %d task(s) moved to the dead-letter archive\n", total)
	for _, t := range types {
		fmt.Fprintf(&b, "• %s: %d\n", t, counts[t])
	}
	fmt.Fprintf(&b, "Newest: %s %s: %s", newest.typ, newest.id, Quote(newest.err))
	if a.cfg.PublicURL != "" {
		fmt.Fprintf(&b, "\n%s/admin/deadletters", strings.TrimRight(a.cfg.PublicURL, "/"))
	}
	return b.String()
}

// noticeMessage adds the grouped notices to a message's text (or makes
// one), quoting the newest notice.
func (a *Alerter) noticeMessage(prev string, notices map[string]int, newest alertItem) string {
	var b strings.Builder
	if prev != "" {
		b.WriteString(prev + "\n")
	}
	subjects := make([]string, 0, len(notices))
	for s := range notices {
		subjects = append(subjects, s)
	}
	sort.Strings(subjects)
	for _, s := range subjects {
		fmt.Fprintf(&b, "mailroom: %d %s(s) need attention\n", notices[s], s)
	}
	fmt.Fprintf(&b, "Newest: %s %s: %s", newest.typ, newest.id, Quote(newest.err))
	if a.cfg.PublicURL != "" && strings.HasPrefix(newest.typ, "sheets") {
		fmt.Fprintf(&b, "\n%s/admin/forms", strings.TrimRight(a.cfg.PublicURL, "/"))
	}
	return b.String()
}

// Test posts a test message now (the setup page's button).
func (a *Alerter) Test(ctx context.Context) error {
	if a.cfg.WebhookURL == "" {
		return fmt.Errorf("alerts: MAILROOM_ALERT_WEBHOOK_URL is not set")
	}
	return a.post(ctx, chatBody("mailroom: test alert — dead-letter alerts will arrive here."))
}

// post sends body to the webhook. Its error never holds the webhook's URL,
// whose path is the webhook's secret (Go's client errors quote the URL).
func (a *Alerter) post(ctx context.Context, body []byte) error {
	return hideWebhookPath(a.deliver(ctx, body))
}

// hideWebhookPath returns err with the URL that Go's client (or its URL
// parser) quotes cut to its scheme and host, which say where a post failed.
func hideWebhookPath(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	shown := "[redacted]"
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
		shown = u.Scheme + "://" + u.Host + "/[redacted]"
	}
	return &url.Error{Op: ue.Op, URL: shown, Err: ue.Err}
}

func (a *Alerter) deliver(ctx context.Context, body []byte) error {
	var err error
	delay := 500 * time.Millisecond
	for attempt := 0; attempt <= a.cfg.Retries; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(delay):
			}
			delay *= 2
		}
		var req *http.Request
		// A request under way is not cut when the loop stops (the client's
		// timeout bounds it): the webhook may have taken the alert already,
		// and cut, it would count as failed and a notice would be lost.
		req, err = http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, a.cfg.WebhookURL, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		resp, err = a.cfg.Client.Do(req)
		if err != nil {
			continue
		}
		resp.Body.Close()
		if resp.StatusCode/100 == 2 {
			return nil
		}
		err = fmt.Errorf("webhook answered %s", resp.Status)
		if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests {
			return err
		}
	}
	return err
}
