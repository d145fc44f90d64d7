package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"mailroom/queue"
	"mailroom/store"
)

// deliverPayload is a webhooks:deliver task: one batch of one webhook. It
// carries the batch itself, so a redriven task delivers the batch it was.
type deliverPayload struct {
	WebhookID string             `json:"webhookId"`
	Batch     store.WebhookBatch `json:"batch"`
}

// run schedules deliveries until ctx ends: a pass plans the next batch of
// every webhook without one in flight, on every commit of events, on Kick,
// when a webhook held back by Pace is due, and every few seconds (a
// webhook whose batch finished).
func (p *Pipeline) run(ctx context.Context) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		changed := p.db.EventsChanged()
		next, err := p.pass(ctx)
		if err != nil && ctx.Err() == nil {
			p.log.Error("plan webhook batches", "err", err)
		}
		due.Stop()
		var dueC <-chan time.Time
		if !next.IsZero() {
			due.Reset(time.Until(next))
			dueC = due.C
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-p.kick:
		case <-dueC:
		case <-tick.C:
		}
		// Let a burst of commits gather into batches.
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.cfg.Settle):
		}
	}
}

// paced reports when webhook id may have its next batch planned (Pace
// after its last), and whether that is still ahead of now.
func (p *Pipeline) paced(id string, now time.Time) (time.Time, bool) {
	p.mu.Lock()
	at := p.planned[id].Add(p.cfg.Pace)
	p.mu.Unlock()
	return at, now.Before(at)
}

// notePlanned records, once tx commits, that w's batch was planned now.
func (p *Pipeline) notePlanned(tx *store.Tx, id string) {
	tx.OnCommit(func() {
		p.mu.Lock()
		p.planned[id] = time.Now()
		p.mu.Unlock()
	})
}

// pass plans a batch for each webhook that has none in flight and events
// waiting, and measures the oldest undelivered event. It reads every
// webhook in one read, and writes the plans, if any, in one transaction:
// a pass costs one commit however many webhooks there are. A webhook
// whose last batch was planned less than Pace ago waits: pass returns
// when the first of those is due (zero: none waits).
func (p *Pipeline) pass(ctx context.Context) (next time.Time, err error) {
	now, wall := p.cfg.Now(), time.Now()
	var oldest time.Duration
	var todo []store.Webhook // webhooks with a plan to write
	var hooks []store.Webhook
	err = p.db.View(func(tx *store.Tx) error {
		var err error
		if hooks, err = tx.Webhooks(); err != nil {
			return err
		}
		for _, w := range hooks {
			age, write, err := look(tx, w, now)
			if err != nil {
				return fmt.Errorf("webhook %s: %w", w.ID, err)
			}
			oldest = max(oldest, age)
			if !write {
				continue
			}
			if at, wait := p.paced(w.ID, wall); wait {
				if next.IsZero() || at.Before(next) {
					next = at
				}
				continue
			}
			todo = append(todo, w)
		}
		return nil
	})
	if err != nil {
		return time.Time{}, err
	}
	p.mu.Lock()
	p.oldest = oldest
	if len(p.planned) > len(hooks) { // some were deleted (with a user, say)
		keep := make(map[string]time.Time, len(hooks))
		for _, w := range hooks {
			if at, ok := p.planned[w.ID]; ok {
				keep[w.ID] = at
			}
		}
		p.planned = keep
	}
	p.mu.Unlock()
	if len(todo) == 0 || ctx.Err() != nil {
		return next, nil
	}
	return next, p.db.Update(func(tx *store.Tx) error {
		for _, w := range todo {
			cur, err := tx.WebhookGet(w.ID)
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted meanwhile
			}
			if err != nil {
				return err
			}
			if cur.Batch != nil || cur.Cursor != w.Cursor || cur.Generation != w.Generation {
				continue // changed meanwhile: the next pass sees it
			}
			if _, err := p.planTx(tx, &cur, now, false); err != nil {
				return fmt.Errorf("webhook %s: %w", w.ID, err)
			}
		}
		return nil
	})
}

// look reads what w has yet to receive: the age of its oldest undelivered
// event, and whether a pass has something to write for it (a batch to
// plan, a cursor to move past events it does not take, or one to clamp).
func look(tx *store.Tx, w store.Webhook, now time.Time) (age time.Duration, write bool, err error) {
	after := w.Cursor
	if w.Batch != nil {
		after = w.Batch.After
	}
	after = max(after, tx.EventsPruned()) // older than the retention: gone for every reader
	if after > tx.EventsHead() {
		return 0, w.Batch == nil, nil // a cursor from nowhere: clamped
	}
	q := w.Query(after, 1)
	q.Scan = 10 * MaxBatch
	events, next, err := tx.Events(q)
	if err != nil {
		return 0, false, err
	}
	if len(events) > 0 {
		age = now.Sub(events[0].OccurredAt)
	}
	// One batch at a time, in order; and a webhook of rare types moves
	// its cursor only once it lags skipAhead behind.
	write = w.Batch == nil && (len(events) > 0 || next >= w.Cursor+skipAhead)
	return age, write, nil
}

// planTx records, in tx, w's next batch and its webhooks:deliver task; w
// must have none in flight. With no event waiting for w it moves w's
// cursor past those it does not take once they reach skipAhead, and a
// cursor past the newest event back to the newest (clampCursor). With
// onlyFull it plans only a full batch (MaxBatch events), and leaves the
// rest alone. It reports whether it planned a batch.
func (p *Pipeline) planTx(tx *store.Tx, w *store.Webhook, now time.Time, onlyFull bool) (bool, error) {
	after := max(w.Cursor, tx.EventsPruned())
	if head := tx.EventsHead(); after > head {
		return false, p.clampCursor(tx, w, head)
	}
	q := w.Query(after, MaxBatch)
	q.Scan = 10 * MaxBatch
	events, next, err := tx.Events(q)
	if err != nil {
		return false, err
	}
	if onlyFull && len(events) < MaxBatch {
		return false, nil
	}
	if len(events) == 0 {
		if next < w.Cursor+skipAhead {
			return false, nil
		}
		w.Cursor = next // nothing for this webhook up to there
		return false, tx.WebhookPut(*w)
	}
	last := events[len(events)-1].Seq
	w.Batch = &store.WebhookBatch{
		ID: fmt.Sprintf("msg_%s_%d_%d", w.ID, w.Generation, last), After: after, Through: last,
		Count: len(events), CreatedAt: now.UTC(),
	}
	if _, _, err := p.q.Enqueue(tx, TypeDeliver, deliverPayload{WebhookID: w.ID, Batch: *w.Batch}); err != nil {
		return false, err
	}
	p.notePlanned(tx, w.ID)
	return true, tx.WebhookPut(*w)
}

// clampCursor moves a webhook's cursor that is past the newest event (a
// replay from a made-up cursor by an older version, or a data file
// restored from before its events) back to the newest event: the webhook
// takes what happens next, and is never left reading after nowhere. With a
// batch in flight it waits: that batch's task finds nothing to post.
func (p *Pipeline) clampCursor(tx *store.Tx, w *store.Webhook, head uint64) error {
	p.log.Warn("webhook cursor is past the newest event; moved to the newest", "webhook_id", w.ID, "cursor", w.Cursor, "newest", head)
	w.Cursor = head
	return tx.WebhookPut(*w)
}

// skipAhead is how far past a webhook's cursor the events it does not
// take must reach before the cursor is moved past them (a write), so that
// a webhook of rare types costs a bounded scan, not a write per pass.
const skipAhead = 500

// handleDeliver posts one batch. 2xx: the webhook's cursor moves past it
// in the transaction that acks the task. Otherwise the failure is noted
// and the task retried: after Retry-After when a 429 or 503 names one,
// else with the queue's backoff, until MaxAge, then it is permanent.
func (p *Pipeline) handleDeliver(ctx context.Context, t *queue.Task) error {
	var pl deliverPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil || pl.WebhookID == "" || pl.Batch.ID == "" {
		return queue.Permanent(fmt.Errorf("webhooks: bad payload %q", t.Payload))
	}
	var w store.Webhook
	var secret string
	var events []store.Event
	err := p.db.View(func(tx *store.Tx) (err error) {
		if w, err = tx.WebhookGet(pl.WebhookID); err != nil {
			return err
		}
		if secret, err = tx.WebhookSecret(w); err != nil {
			return err
		}
		events, err = batchEvents(tx, w, pl.Batch)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Stale("the webhook was deleted")
	}
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return p.nothingToPost(t, pl)
	}
	now := p.cfg.Now()
	ans, err := p.post(ctx, w.URL, secret, pl.Batch.ID, events)
	attempt := store.Delivery{
		WebhookID: pl.WebhookID, BatchID: pl.Batch.ID, Attempt: t.Attempt, At: now.UTC(),
		Status: ans.status, Latency: ans.latency, Events: len(events), Response: ans.body,
	}
	if err == nil {
		return p.delivered(t, pl, events, attempt)
	}
	attempt.Error = queue.Truncate(err.Error(), 500)
	if nerr := p.noteFailure(pl.WebhookID, attempt, now); nerr != nil {
		p.log.Warn("note a webhook failure", "webhook_id", pl.WebhookID, "err", nerr)
	}
	if now.Sub(pl.Batch.CreatedAt) >= p.cfg.MaxAge {
		return queue.Permanent(fmt.Errorf("webhooks: %s: batch %s undelivered for %s (MAILROOM_WEBHOOK_MAX_AGE): %w", w.URL, pl.Batch.ID, spoken(p.cfg.MaxAge), err))
	}
	p.metrics.deliveries.WithLabelValues("retried").Inc()
	if ans.retryAfter > 0 && (ans.status == http.StatusTooManyRequests || ans.status == http.StatusServiceUnavailable) {
		// Not past the max age: the last try is at most at its end.
		wait := min(ans.retryAfter, pl.Batch.CreatedAt.Add(p.cfg.MaxAge).Sub(now)+time.Second)
		return queue.RateLimitedNotBefore(err, wait)
	}
	return err
}

// spoken says a max age as people do: "72 hours", "30 minutes", or
// seconds for what is shorter (tests).
func spoken(d time.Duration) string {
	unit := func(n time.Duration, one string) string {
		if n == 1 {
			return "1 " + one
		}
		return fmt.Sprintf("%d %ss", n, one)
	}
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return unit(d/time.Hour, "hour")
	case d >= time.Minute && d%time.Minute == 0:
		return unit(d/time.Minute, "minute")
	}
	return fmt.Sprintf("%.1f seconds", d.Seconds())
}

// batchEvents returns the events of batch b that w takes.
func batchEvents(tx *store.Tx, w store.Webhook, b store.WebhookBatch) ([]store.Event, error) {
	after, through := max(b.After, tx.EventsPruned()), min(b.Through, tx.EventsHead())
	var out []store.Event
	for after < through && len(out) < MaxBatch {
		q := w.Query(after, MaxBatch-len(out))
		events, next, err := tx.Events(q)
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			if e.Seq <= b.Through {
				out = append(out, e)
			}
		}
		if next <= after || len(events) == 0 {
			break
		}
		after = next
	}
	if out == nil {
		out = []store.Event{}
	}
	return out, nil
}

// nothingToPost acks a batch none of whose events is left (pruned since
// it was planned, or planned by an older version after a cursor past the
// newest event): nothing is sent, for a receiver takes 1-100 events, and
// the webhook moves past the batch.
func (p *Pipeline) nothingToPost(t *queue.Task, pl deliverPayload) error {
	p.log.Warn("webhook batch has no event left; nothing posted", "webhook_id", pl.WebhookID, "batch", pl.Batch.ID)
	var planned bool
	err := p.db.Update(func(tx *store.Tx) error {
		w, err := tx.WebhookGet(pl.WebhookID)
		if errors.Is(err, store.ErrNotFound) {
			return t.Ack(tx)
		}
		if err != nil {
			return err
		}
		if w.Batch != nil && w.Batch.ID == pl.Batch.ID {
			w.Cursor, w.Batch = max(w.Cursor, pl.Batch.Through), nil
			if err := tx.WebhookPut(w); err != nil {
				return err
			}
			if planned, err = p.planNext(tx, &w, true, false, p.cfg.Now()); err != nil {
				return err
			}
		}
		return t.Ack(tx)
	})
	if err == nil && !planned {
		p.Kick()
	}
	return err
}

// delivered records a batch's 2xx, in the delivery log too, and acks its
// task.
func (p *Pipeline) delivered(t *queue.Task, pl deliverPayload, events []store.Event, attempt store.Delivery) error {
	now := p.cfg.Now()
	var planned bool
	// Shared with the other batches finishing now (one commit for the
	// deliveries of many webhooks); fn may run twice, and sets all it
	// reports each time.
	err := p.acks.Do(func(tx *store.Tx) error {
		planned = false
		w, err := tx.WebhookGet(pl.WebhookID)
		if errors.Is(err, store.ErrNotFound) {
			return t.Ack(tx)
		}
		if err != nil {
			return err
		}
		if _, err := tx.DeliveryAppend(attempt); err != nil {
			return err
		}
		moved := w.Batch != nil && w.Batch.ID == pl.Batch.ID
		if moved {
			w.Cursor, w.Batch = max(w.Cursor, pl.Batch.Through), nil
		}
		w.LastDeliveryAt, w.LastError, w.LastErrorAt = now.UTC(), "", time.Time{}
		w.FailingSince, w.AlertedAt = time.Time{}, time.Time{}
		w.Delivered += len(events)
		if err := tx.WebhookPut(w); err != nil {
			return err
		}
		if planned, err = p.planNext(tx, &w, moved, pl.Batch.Count >= MaxBatch, now); err != nil {
			return err
		}
		return t.Ack(tx)
	})
	if err != nil {
		return err
	}
	p.metrics.deliveries.WithLabelValues("delivered").Inc()
	for _, e := range events {
		p.metrics.latency.Observe(now.Sub(e.OccurredAt).Seconds())
	}
	if !planned {
		p.Kick()
	}
	return nil
}

// planNext plans w's next batch in the transaction that finished its
// batch (moved: the batch was w's, and w's cursor moved past it), so that
// the next batch's task is recorded at once rather than at the
// scheduler's next pass. A webhook behind (the batch that finished was
// full) drains at full speed; otherwise, before Pace has passed since
// w's last batch, only a full batch is planned, and the rest waits for
// the scheduler to plan it when due. It reports whether it planned one.
func (p *Pipeline) planNext(tx *store.Tx, w *store.Webhook, moved, behind bool, now time.Time) (bool, error) {
	if !moved || w.Batch != nil {
		return false, nil
	}
	_, wait := p.paced(w.ID, time.Now())
	return p.planTx(tx, w, now, wait && !behind)
}

// noteFailure records a failed attempt on its webhook and in the delivery
// log, and raises the alert once the webhook has failed for an hour.
func (p *Pipeline) noteFailure(id string, attempt store.Delivery, now time.Time) error {
	var alert string
	err := p.db.Update(func(tx *store.Tx) error {
		alert = ""
		w, err := tx.WebhookGet(id)
		if err != nil {
			return err
		}
		// What the receiver answered is in the attempt's error: kept
		// short and plain.
		attempt.Error = queue.Snippet(attempt.Error, maxLastError)
		if _, err := tx.DeliveryAppend(attempt); err != nil {
			return err
		}
		w.LastError, w.LastErrorAt = attempt.Error, now.UTC()
		if w.FailingSince.IsZero() {
			w.FailingSince = now.UTC()
		}
		if w.AlertedAt.IsZero() && now.Sub(w.FailingSince) >= failingAlertAfter {
			w.AlertedAt = now.UTC()
			alert = fmt.Sprintf("webhook %s %s has failed for an hour: %s", w.ID, queue.Quote(w.URL), queue.Quote(w.LastError))
		}
		return tx.WebhookPut(w)
	})
	if alert != "" && p.cfg.Alert != nil {
		p.cfg.Alert(alert)
	}
	return err
}

// deliverDead runs in the transaction that moves a batch to the dead
// letters: the webhook's later batches go on.
func (p *Pipeline) deliverDead(tx *store.Tx, t *queue.Task) error {
	var pl deliverPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return nil // a bad payload has nothing to move on
	}
	w, err := tx.WebhookGet(pl.WebhookID)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if w.Batch != nil && w.Batch.ID == pl.Batch.ID {
		w.Cursor, w.Batch = max(w.Cursor, pl.Batch.Through), nil
		if err := tx.WebhookPut(w); err != nil {
			return err
		}
	}
	tx.OnCommit(func() {
		p.metrics.deliveries.WithLabelValues("deadlettered").Inc()
		p.Kick()
	})
	return nil
}

// answer is what a receiver answered a delivery: its status (0: none),
// Retry-After, the start of its body, and how long it took.
type answer struct {
	status     int
	retryAfter time.Duration
	body       string
	latency    time.Duration
}

// post sends one signed batch. It returns the answer, and an error unless
// the answer was a 2xx.
func (p *Pipeline) post(ctx context.Context, url, secret, msgID string, events []store.Event) (answer, error) {
	var ans answer
	body, err := json.Marshal(map[string]any{"events": events})
	if err != nil {
		return ans, err
	}
	signer, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return ans, queue.Permanent(fmt.Errorf("webhooks: the stored secret is unusable: %w", err))
	}
	// The signature's timestamp is the wall clock's, whatever clock the
	// pipeline runs on: receivers check it against theirs.
	sent := time.Now()
	sig, err := signer.Sign(msgID, sent, body)
	if err != nil {
		return ans, err
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return ans, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mailroom-webhooks")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(sent.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := p.client.Do(req)
	if errors.Is(err, ErrPrivateAddress) {
		err = ErrPrivateAddress // the dial error would name the address (see checkURL)
	}
	if err != nil {
		ans.latency = time.Since(sent)
		return ans, fmt.Errorf("webhooks: post to %s: %w", req.URL.Redacted(), err)
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, store.DeliveryResponseMax))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	ans.status, ans.body, ans.latency = resp.StatusCode, string(head), time.Since(sent)
	if resp.StatusCode/100 == 2 {
		return ans, nil
	}
	ans.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), sent)
	// The status line's text is the receiver's to write: quoted, short.
	return ans, fmt.Errorf("webhooks: %s answered %q", req.URL.Redacted(), queue.Snippet(resp.Status, maxStatusText))
}

// parseRetryAfter reads a Retry-After of seconds or an HTTP date; zero
// when absent or unreadable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// SendTest records one webhook.test event for the webhook alone, which
// its next batch delivers as any other (signed, retried, logged); no feed
// and no other webhook sees it. It returns the event.
func (p *Pipeline) SendTest(id string) (store.Event, error) {
	var e store.Event
	err := p.db.Update(func(tx *store.Tx) error {
		w, err := tx.WebhookGet(id)
		if err != nil {
			return err
		}
		e, err = tx.EventAppend(store.Event{Type: store.EventWebhookTest, UserID: w.UserID, ForWebhook: w.ID})
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return e, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err == nil {
		p.Kick()
	}
	return e, err
}
