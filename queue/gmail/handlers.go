package gmail

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/googleerr"
	"mailroom/queue/rules"
	"mailroom/store"
)

// labelRefreshEvery bounds how often an unknown label id makes the
// pipeline read the account's labels again.
const labelRefreshEvery = time.Minute

func decodeEvent(t *queue.Task) (Event, error) {
	var ev Event
	if err := json.Unmarshal(t.Payload, &ev); err != nil || ev.AccountID == "" || ev.MessageID == "" {
		return ev, queue.Permanent(fmt.Errorf("gmail: %s: bad payload %q", t.Type, t.Payload))
	}
	return ev, nil
}

// decodeEvents reads a state event task's changes: one Event, or an
// eventGroup of one account's.
func decodeEvents(t *queue.Task) ([]Event, error) {
	var pl struct {
		Event
		Events []Event `json:"events"`
	}
	if err := json.Unmarshal(t.Payload, &pl); err != nil || pl.AccountID == "" {
		return nil, queue.Permanent(fmt.Errorf("gmail: %s: bad payload %q", t.Type, t.Payload))
	}
	if len(pl.Events) == 0 {
		ev, err := decodeEvent(t)
		return []Event{ev}, err
	}
	for _, ev := range pl.Events {
		if ev.AccountID != pl.AccountID || ev.MessageID == "" {
			return nil, queue.Permanent(fmt.Errorf("gmail: %s: bad payload %q", t.Type, t.Payload))
		}
	}
	return pl.Events, nil
}

// apply changes a message for one event type; it reports whether the
// message took the change (false: it already held a newer state).
func apply(typ string, m *store.Message, ev Event) bool {
	switch typ {
	case TypeMessageRead:
		return m.ApplyLabel(store.LabelUnread, false, ev.HistoryID)
	case TypeMessageUnread:
		return m.ApplyLabel(store.LabelUnread, true, ev.HistoryID)
	case TypeMessageTrashed:
		return m.ApplyLabel(store.LabelTrash, true, ev.HistoryID)
	case TypeMessageRestored:
		return m.ApplyLabel(store.LabelTrash, false, ev.HistoryID)
	case TypeMessageDeleted:
		return m.ApplyDelete(ev.HistoryID)
	case TypeMessageLabeled:
		changed := false
		for _, lc := range ev.Labels {
			if m.ApplyLabel(lc.ID, lc.Added, lc.HistoryID) {
				changed = true
			}
		}
		return changed
	}
	return false
}

// stateHandler handles the six state events (read, unread, trashed,
// restored, deleted, labeled): a local change, applied in the transaction
// that acks the task, so it happens exactly once. A task may carry several
// changes of one account (an eventGroup): they are applied in one
// transaction. A message not stored yet (its message-added has not run)
// gets a placeholder that remembers the change; the fetch merges into it.
func (p *Pipeline) stateHandler(typ string) queue.Handler {
	return func(ctx context.Context, t *queue.Task) error {
		ctx = google.WithPriority(ctx, google.PriorityLive)
		evs, err := decodeEvents(t)
		if err != nil {
			return err
		}
		accountID := evs[0].AccountID
		if typ == TypeMessageLabeled {
			var ids []string
			for _, ev := range evs {
				ids = append(ids, labelIDs(ev.Labels)...)
			}
			p.learnLabels(ctx, accountID, ids)
		}
		changed := make([]bool, len(evs))
		err = p.writes.Do(func(tx *store.Tx) error {
			if !tx.AccountExists(accountID) {
				return store.ErrNotFound
			}
			for i, ev := range evs {
				var err error
				if changed[i], err = applyTx(tx, typ, ev); err != nil {
					return err
				}
			}
			return t.Ack(tx)
		})
		if errors.Is(err, store.ErrNotFound) {
			return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
		}
		if err != nil {
			return fmt.Errorf("gmail: %s %s: %w", typ, evs[0].MessageID, err)
		}
		for i, ev := range evs {
			p.applied(typ, ev, changed[i])
		}
		return nil
	}
}

// applyTx applies one state event to its message in tx, and reports
// whether the message took it.
func applyTx(tx *store.Tx, typ string, ev Event) (bool, error) {
	m, err := tx.MessageGet(ev.AccountID, ev.MessageID)
	if errors.Is(err, store.ErrNotFound) {
		m = store.Message{ID: ev.MessageID, ThreadID: ev.ThreadID}
	} else if err != nil {
		return false, err
	}
	if !apply(typ, &m, ev) {
		return false, nil
	}
	return true, tx.MessagePut(ev.AccountID, m)
}

func labelIDs(lcs []LabelChange) []string {
	ids := make([]string, len(lcs))
	for i, lc := range lcs {
		ids[i] = lc.ID
	}
	return ids
}

// applied counts an event's outcome.
func (p *Pipeline) applied(typ string, ev Event, changed bool) {
	outcome := "applied"
	if !changed {
		outcome = "older"
	}
	p.metrics.events.WithLabelValues(typ, outcome).Inc()
	now := p.cfg.Now()
	if ev.RecordedAt > 0 {
		p.metrics.delay.WithLabelValues(typ).Observe(now.Sub(time.UnixMilli(ev.RecordedAt)).Seconds())
	}
}

// handleAdded is gmail:message-added: fetch the message (metadata and
// snippet; the body too when a rule reads bodies), merge it into the stored
// message, then hand it to the rules. The task is acked after the rules
// ran, so a crash in between runs both again (both are idempotent).
//
// A content read is the dearest Gmail call (20 units under the 2026 price
// list), so none is made that the mirror can spare: a message the mirror
// already holds (the full sync beside the history sync stored it, or an
// earlier delivery of this event did) is not read again unless a rule
// needs its body, which the mirror does not keep. Its state since that
// snapshot comes from the history records, as state events (classify
// keeps them for added messages). A message read here while the
// account's full sync runs is noted as that full sync's, so the full sync
// does not read it again.
func (p *Pipeline) handleAdded(ctx context.Context, t *queue.Task) error {
	ctx = google.WithPriority(ctx, google.PriorityLive)
	ev, err := decodeEvent(t)
	if err != nil {
		return err
	}
	acc, err := p.account(ev.AccountID)
	if err != nil {
		return err
	}
	existing, err := p.message(acc.ID, ev.MessageID)
	if err != nil {
		return err
	}
	if existing.Deleted {
		p.applied(t.Type, ev, false)
		return nil
	}
	body, err := p.rules.BodyRules(ctx, acc.ID)
	if err != nil {
		return fmt.Errorf("gmail: ask rules whether bodies are needed: %w", err)
	}
	if existing.Fetched && (body == nil || body.Judged(&existing)) {
		// In the mirror, with the verdicts of the rules that read bodies
		// if any (a full sync read it with its body): no read.
		return p.applyRules(ctx, t, ev, existing, "", false)
	}
	gm, err := p.client(ctx, acc)
	if err != nil {
		return err
	}
	f, err := p.fetch(ctx, gm, acc.ID, ev.MessageID, body != nil)
	if errors.Is(err, google.ErrNotFound) {
		// Deleted before we got to it: its message-deleted says so.
		p.applied(t.Type, ev, false)
		return nil
	}
	if err != nil {
		return err
	}
	p.learnLabels(ctx, acc.ID, f.LabelIDs)
	m, changed, err := p.storeAdded(acc.ID, f, body)
	if err != nil {
		return err
	}
	return p.applyRules(ctx, t, ev, m, f.Body, changed)
}

// storeAdded merges a message read by message-added into the mirror, with
// the verdicts of the rules that read bodies when body is set, and, while
// the account's full sync runs, notes it as read for that full sync (which
// then skips it), in one transaction.
func (p *Pipeline) storeAdded(accountID string, f google.Message, body *rules.BodyRules) (m store.Message, changed bool, err error) {
	err = p.writes.Do(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		m, err = tx.MessageGet(accountID, f.ID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if changed = m.MergeFetched(snapshots([]google.Message{f}, body)[0]); changed {
			if err := tx.MessagePut(accountID, m); err != nil {
				return err
			}
		}
		if acc.FullSyncStart != nil {
			return tx.FullSyncNoteFetched(accountID, []string{f.ID})
		}
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		return m, false, queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	if err != nil {
		return m, false, fmt.Errorf("gmail: store message %s: %w", f.ID, err)
	}
	return m, changed, nil
}

// applyRules hands a new message, as stored, to the user's rules.
func (p *Pipeline) applyRules(ctx context.Context, t *queue.Task, ev Event, m store.Message, body string, changed bool) error {
	if m.Visible() {
		if err := p.rules.ApplyNew(ctx, ev.AccountID, m, body); err != nil {
			return fmt.Errorf("gmail: apply rules to message %s: %w", m.ID, err)
		}
	}
	p.applied(t.Type, ev, changed)
	return nil
}

// message returns a stored message, or a zero one when there is none.
func (p *Pipeline) message(accountID, id string) (store.Message, error) {
	var m store.Message
	err := p.db.View(func(tx *store.Tx) (err error) {
		m, err = tx.MessageGet(accountID, id)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.Message{}, nil
	}
	return m, err
}

// refreshLabels reads the account's labels from Gmail into its label map.
func (p *Pipeline) refreshLabels(ctx context.Context, gm *google.Gmail, accountID string) error {
	labels, err := gm.Labels(ctx)
	if err != nil {
		return googleerr.ToQueue(err)
	}
	names := make(map[string]string, len(labels))
	for _, l := range labels {
		names[l.ID] = l.Name
	}
	err = p.db.Update(func(tx *store.Tx) error {
		if _, err := tx.AccountGet(accountID); err != nil {
			return err
		}
		return tx.LabelsReplace(accountID, names)
	})
	if err == nil {
		p.mu.Lock()
		p.known[accountID] = labelSet(names)
		p.mu.Unlock()
	}
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, accountID))
	}
	return err
}

// knownLabels returns the ids of the account's label map, kept in memory
// (replaced, never changed, on each refresh).
func (p *Pipeline) knownLabels(accountID string) (map[string]bool, error) {
	p.mu.Lock()
	k := p.known[accountID]
	p.mu.Unlock()
	if k != nil {
		return k, nil
	}
	var names map[string]string
	if err := p.db.View(func(tx *store.Tx) (err error) { names, err = tx.Labels(accountID); return err }); err != nil {
		return nil, err
	}
	k = labelSet(names)
	p.mu.Lock()
	p.known[accountID] = k
	p.mu.Unlock()
	return k, nil
}

func labelSet(names map[string]string) map[string]bool {
	k := make(map[string]bool, len(names))
	for id := range names {
		k[id] = true
	}
	return k
}

// learnLabels refreshes the label map when ids holds a label it does not
// know (a label created since the last refresh). An id that a refresh did
// not find (a label deleted meanwhile) is looked up again at most once a
// minute. It is best effort: names only matter for display and filters.
func (p *Pipeline) learnLabels(ctx context.Context, accountID string, ids []string) {
	known, err := p.knownLabels(accountID)
	if err != nil {
		return
	}
	now := p.cfg.Now()
	var unknown []string
	p.mu.Lock()
	for _, id := range ids {
		if known[id] {
			continue
		}
		k := accountID + "\x00" + id
		if at, looked := p.labelsAt[k]; looked && now.Sub(at) < labelRefreshEvery {
			continue
		}
		p.labelsAt[k] = now
		unknown = append(unknown, id)
	}
	p.mu.Unlock()
	if len(unknown) == 0 {
		return
	}
	acc, err := p.account(accountID)
	if err != nil {
		return
	}
	gm, err := p.client(ctx, acc)
	if err != nil {
		return
	}
	if err := p.refreshLabels(ctx, gm, accountID); err != nil && !errors.Is(err, context.Canceled) {
		p.log.Info("refresh labels", "account_id", accountID, "err", err)
	}
}

type watchPayload struct {
	AccountID string `json:"accountId"`
}

func watchKey(accountID string) string { return "gmail:watch:" + accountID }

// handleWatchRenew is gmail:watch-renew: users.watch for the account, its
// expiration stored.
func (p *Pipeline) handleWatchRenew(ctx context.Context, t *queue.Task) error {
	ctx = google.WithPriority(ctx, google.PriorityLive)
	var pl watchPayload
	if err := json.Unmarshal(t.Payload, &pl); err != nil {
		return queue.Permanent(fmt.Errorf("gmail: watch-renew: bad payload: %w", err))
	}
	if p.cfg.PubSubTopic == "" {
		return queue.Stale("no Pub/Sub topic is configured")
	}
	acc, err := p.account(pl.AccountID)
	if err != nil {
		return err
	}
	if !active(acc) {
		return queue.Stale("account " + acc.ID + " is " + acc.Status)
	}
	gm, err := p.client(ctx, acc)
	if err != nil {
		return err
	}
	_, exp, err := gm.Watch(ctx, p.cfg.PubSubTopic)
	if err != nil {
		return googleerr.ToQueue(err)
	}
	err = p.db.Update(func(tx *store.Tx) error {
		a, err := tx.AccountGet(acc.ID)
		if err != nil {
			return err
		}
		a.WatchExpiration, a.WatchRenewedAt = exp, p.now()
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		return t.Ack(tx)
	})
	if errors.Is(err, store.ErrNotFound) {
		return queue.Permanent(fmt.Errorf("%w: %s", ErrAccountGone, acc.ID))
	}
	return err
}
