package rules

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"mailroom/queue/google"
	"mailroom/store"
)

// Gmail's system labels the actions take off.
const (
	labelUnread = "UNREAD"
	labelInbox  = "INBOX"
)

// userRules returns the compiled live rules of the account's user.
func (p *Pipeline) userRules(tx *store.Tx, accountID string) ([]*compiledRule, error) {
	acc, err := tx.AccountGet(accountID)
	if err != nil {
		return nil, err
	}
	rs, err := tx.Rules(acc.UserID)
	if err != nil {
		return nil, err
	}
	out := make([]*compiledRule, 0, len(rs))
	for _, r := range rs {
		c, err := p.compile(r)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// NeedsBody reports whether a rule of the account's user reads message
// bodies, so that message-added fetches them (the gmail pipeline asks).
func (p *Pipeline) NeedsBody(_ context.Context, accountID string) (bool, error) {
	var need bool
	err := p.db.View(func(tx *store.Tx) error {
		rs, err := p.userRules(tx, accountID)
		for _, r := range rs {
			need = need || r.needBody
		}
		return err
	})
	return need, err
}

// BodyRules are the live rules of a user that read bodies, at their
// versions when they were read, and how they decide a message with its
// body: the gmail pipeline keeps the verdicts with a message whose body it
// read (store.Message.BodyVerdicts).
type BodyRules struct {
	// Versions are the rules' ids and versions (Match unset).
	Versions []store.BodyVerdict
	// Decide returns each rule's verdict on m with its body.
	Decide func(m store.Message, body string) []store.BodyVerdict
}

// Judged reports whether m holds a verdict of each of the rules.
func (r *BodyRules) Judged(m *store.Message) bool {
	for _, v := range r.Versions {
		if _, ok := m.BodyVerdict(v.Rule, v.Version); !ok {
			return false
		}
	}
	return true
}

// BodyRules returns the live rules of the account's user that read bodies,
// at their versions now, and how they decide a message with its body (the
// gmail pipeline asks, when it reads bodies for them); nil when none does.
func (p *Pipeline) BodyRules(_ context.Context, accountID string) (*BodyRules, error) {
	var body []*compiledRule
	err := p.db.View(func(tx *store.Tx) error {
		rs, err := p.userRules(tx, accountID)
		for _, r := range rs {
			if r.needBody && !r.deleted {
				body = append(body, r)
			}
		}
		return err
	})
	if err != nil || len(body) == 0 {
		return nil, err
	}
	out := &BodyRules{Decide: func(m store.Message, text string) []store.BodyVerdict {
		msg := Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: text}
		vs := make([]store.BodyVerdict, 0, len(body))
		for _, r := range body {
			vs = append(vs, store.BodyVerdict{Rule: r.id, Version: r.version, Match: r.match.Match(&msg)})
		}
		return vs
	}}
	for _, r := range body {
		out.Versions = append(out.Versions, store.BodyVerdict{Rule: r.id, Version: r.version})
	}
	return out, nil
}

// ApplyNew applies the user's rules to a message that just arrived and was
// stored (gmail:message-added calls it; body is its text when NeedsBody
// said so, or empty when m holds the verdicts of the rules that read
// bodies: a rule that reads bodies takes its verdict where m has one). The labels of the matching rules are created in Gmail when
// missing, and they and the actions (mark read, archive) go in one
// messages.modify; each label added is recorded with the rule and version
// that added it. Running it again for the same message changes nothing.
// A label id Gmail refuses (deleted there since it was cached) is looked
// up again, and the label made anew, once.
func (p *Pipeline) ApplyNew(ctx context.Context, accountID string, m store.Message, body string) error {
	err := p.applyNew(ctx, accountID, m, body)
	if !errors.Is(err, google.ErrInvalidLabel) {
		return err
	}
	gm, err := p.gmail(ctx, accountID)
	if err != nil {
		return err
	}
	if _, err := p.refreshLabels(ctx, gm, accountID); err != nil {
		return err
	}
	return p.applyNew(ctx, accountID, m, body)
}

func (p *Pipeline) applyNew(ctx context.Context, accountID string, m store.Message, body string) error {
	rules, prov, err := p.newMailState(accountID, m.ID)
	if err != nil {
		return err
	}
	if pending := pendingRules(prov); len(pending) > 0 {
		// An earlier run was cut short with its labels on their way to
		// Gmail, and the rules may have changed since: the labels first,
		// then the actions (mark read, archive) as the rules want them now.
		if err := p.settle(ctx, accountID, m, nil, pending); err != nil {
			return err
		}
		if rules, prov, err = p.newMailState(accountID, m.ID); err != nil {
			return err
		}
	}
	if len(rules) == 0 {
		return nil
	}
	mt := matchNew(rules, &m, Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject, Body: body})
	if len(mt.wants) == 0 {
		return nil
	}
	gm, err := p.gmail(ctx, accountID)
	if err != nil {
		return err
	}
	ids, _, err := p.labelIDs(ctx, gm, accountID, mt.names, mt.create)
	if err != nil {
		return err
	}
	add, remove, records := mt.changes(&m, ids, prov, p.cfg.Now().UTC())
	if len(add)+len(remove) == 0 {
		return nil
	}
	if err := p.modifyNew(ctx, gm, accountID, m.ID, add, remove, records); err != nil {
		return err
	}
	p.metrics.labels.WithLabelValues("new_mail", "added").Add(float64(len(add)))
	return p.settle(ctx, accountID, m, rules, nil)
}

// modifyNew makes new mail's label changes with messages.modify, holding
// the labels (lockLabels) from the pending records to the confirmed ones.
func (p *Pipeline) modifyNew(ctx context.Context, gm Gmail, accountID, messageID string, add, remove []string, records map[string]store.Provenance) error {
	unlock, err := p.lockLabels(ctx, accountID, add, remove)
	if err != nil {
		return err
	}
	defer unlock()
	if err := p.putRecords(accountID, messageID, records, true); err != nil {
		return err
	}
	p.metrics.gmailCalls.WithLabelValues("modify").Inc()
	hid, err := gm.Modify(ctx, messageID, add, remove)
	if err != nil {
		if errors.Is(err, google.ErrNotFound) {
			// Deleted at Google since it was fetched: there is nothing to
			// label, and its message-deleted event updates the mirror.
			return p.dropPending(accountID, messageID, records)
		}
		if errors.Is(err, google.ErrInvalidLabel) {
			// Refused whole: no label went on (ApplyNew makes it anew).
			return errors.Join(err, p.dropPending(accountID, messageID, records))
		}
		return err
	}
	for l, pr := range records {
		// The mirror takes this change later: until a newer one of the
		// label, the record is the better knowledge.
		pr.SeenHID = max(pr.SeenHID, hid)
		records[l] = pr
	}
	return p.putRecords(accountID, messageID, records, false)
}

// putRecords writes the provenance records of message messageID's labels
// (the actions' records of system labels only once Gmail made them: their
// outcome is in the mirror, not a rule's to decide), pending before the
// Gmail call and confirmed after it.
func (p *Pipeline) putRecords(accountID, messageID string, records map[string]store.Provenance, pending bool) error {
	// Puts only, safe to run twice: shared with other writers' commit.
	err := p.db.Batch(func(tx *store.Tx) error {
		for l, pr := range records {
			if pending {
				// This change goes to Gmail now: a reclassify's older plan
				// for the label, held by the writer (maybe in flight), is
				// sent again after it with this change's effect.
				if err := p.redirectTx(tx, accountID, l, messageID, pr.Present, pr); err != nil {
					return err
				}
			}
			var err error
			switch {
			case pending && !pr.Present:
				continue
			case pending:
				pr.Pending = true
				err = tx.LabelProvenancePut(accountID, messageID, l, pr)
			case pr.Present:
				err = confirmTx(tx, accountID, messageID, l, pr)
			default:
				err = tx.LabelProvenancePut(accountID, messageID, l, pr)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("rules: record labels of message %s: %w", messageID, err)
	}
	return nil
}

// dropPending forgets the pending records of labels that never went on.
func (p *Pipeline) dropPending(accountID, messageID string, records map[string]store.Provenance) error {
	return p.db.Update(func(tx *store.Tx) error {
		for l, pr := range records {
			if pr.Present {
				if err := tx.LabelProvenanceDelete(accountID, messageID, l); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// pendingRules returns the rules of the pending records in prov.
func pendingRules(prov map[string]store.Provenance) []string {
	var ids []string
	for _, pr := range prov {
		if pr.Pending && !slices.Contains(ids, pr.RuleID) {
			ids = append(ids, pr.RuleID)
		}
	}
	return ids
}

// maxSettles bounds settle's rounds: rules saved again and again while
// one message is labelled make its task fail and run again later.
const maxSettles = 5

// settle brings the labels of message m's thread in line with the rules
// when they changed since ApplyNew read them (used). A save's reclassify
// that ran before ApplyNew recorded its labels could not see them, and no
// later one looks at this message again: without settle, the label of a
// rule edited or deleted meanwhile stays on, and the label it has now is
// missing. A save after the check below is safe: its reclassify starts
// later and reads the labels recorded here. Settle runs the thread through
// the reclassify's plan with every current rule, and the tombstone of each
// rule deleted since, so labels rules put on and no longer want come off
// and labels a person put on stay.
//
// With pending (the rules of an earlier run's pending labels) settle runs
// the thread once whatever the rules are.
func (p *Pipeline) settle(ctx context.Context, accountID string, m store.Message, used []*compiledRule, pending []string) error {
	seen := map[string]bool{}
	for _, id := range pending {
		seen[id] = true
	}
	for round := 0; ; round++ {
		for _, r := range used {
			seen[r.id] = true
		}
		now, err := p.rulesNow(accountID, seen)
		if err != nil || (round > 0 || len(pending) == 0) && sameRules(used, now) {
			return err
		}
		if round == maxSettles {
			return fmt.Errorf("rules: message %s: the rules changed %d times while it was labelled", m.ID, round)
		}
		p.log.Debug("rules changed while new mail was labelled: settling its thread", "account_id", accountID, "message_id", m.ID)
		b := &batch{p: p, pl: batchPayload{AccountID: accountID, ThreadIDs: []string{m.ThreadID}}, live: now}
		if err := p.db.View(b.loadMessages); err != nil {
			return err
		}
		if err := b.run(ctx); err != nil {
			return err
		}
		used = now
	}
}

// rulesNow returns the live rules of the account's user and the tombstones
// of the rules in seen that were deleted.
func (p *Pipeline) rulesNow(accountID string, seen map[string]bool) ([]*compiledRule, error) {
	var out []*compiledRule
	err := p.db.View(func(tx *store.Tx) error {
		var err error
		if out, err = p.userRules(tx, accountID); err != nil {
			return err
		}
		live := map[string]bool{}
		for _, r := range out {
			live[r.id] = true
		}
		for _, id := range slices.Sorted(maps.Keys(seen)) {
			if live[id] {
				continue
			}
			r, err := tx.RuleGet(id)
			if err != nil {
				return err
			}
			c, err := p.compile(r)
			if err != nil {
				return err
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}

// sameRules reports whether a and b hold the same rule versions.
func sameRules(a, b []*compiledRule) bool {
	if len(a) != len(b) {
		return false
	}
	versions := make(map[string]int, len(a))
	for _, r := range a {
		versions[r.id] = r.version
	}
	for _, r := range b {
		if v, ok := versions[r.id]; !ok || v != r.version {
			return false
		}
	}
	return true
}

// newMailState loads, in one read transaction, the account's user's rules
// and, if there are any, the provenance of message messageID's labels.
func (p *Pipeline) newMailState(accountID, messageID string) ([]*compiledRule, map[string]store.Provenance, error) {
	var (
		rules []*compiledRule
		prov  map[string]store.Provenance
	)
	err := p.db.View(func(tx *store.Tx) error {
		var err error
		if rules, err = p.userRules(tx, accountID); err != nil || len(rules) == 0 {
			return err
		}
		prov, err = tx.LabelProvenance(accountID, messageID)
		return err
	})
	return rules, prov, err
}

// newMatches is what the rules matching a new message want of it.
type newMatches struct {
	wants             map[string]*compiledRule // by label key: the last matching rule
	names             map[string]string        // by label key: the label's name
	create            map[string]bool          // the label keys to create if missing
	markRead, archive *compiledRule            // the first matching rule with the action
}

// matchNew matches message m, msg being its fields as rules read them,
// against rules.
func matchNew(rules []*compiledRule, m *store.Message, msg Message) newMatches {
	mt := newMatches{wants: map[string]*compiledRule{}, names: map[string]string{}, create: map[string]bool{}}
	for _, r := range rules {
		if r.matches(m, &msg) {
			mt.wants[r.labelKey], mt.names[r.labelKey], mt.create[r.labelKey] = r, r.label, true
			if r.spec.Actions.MarkRead && mt.markRead == nil {
				mt.markRead = r
			}
			if r.spec.Actions.Archive && mt.archive == nil {
				mt.archive = r
			}
		}
	}
	return mt
}

// changes returns the labels to add to m and take off it, and the
// provenance records of both, given the label ids of the wanted label keys
// and the provenance already recorded.
func (mt newMatches) changes(m *store.Message, ids map[string]string, prov map[string]store.Provenance, now time.Time) (add, remove []string, records map[string]store.Provenance) {
	records = map[string]store.Provenance{}
	for key, r := range mt.wants {
		l := ids[key]
		pr, hasP := prov[l]
		if effectiveHas(m, l, pr, hasP) {
			continue // there already: ours from an earlier run, or someone else's
		}
		add = append(add, l)
		records[l] = store.Provenance{RuleID: r.id, Version: r.version, Present: true, SeenHID: m.LabelHID(l), At: now}
	}
	// The actions take system labels off; their records (Present false)
	// keep a second run from doing it again before the mirror catches up.
	for _, a := range []struct {
		rule  *compiledRule
		label string
	}{{mt.markRead, labelUnread}, {mt.archive, labelInbox}} {
		pr, hasP := prov[a.label]
		if a.rule != nil && effectiveHas(m, a.label, pr, hasP) {
			remove = append(remove, a.label)
			records[a.label] = store.Provenance{RuleID: a.rule.id, Version: a.rule.version, Present: false, SeenHID: m.LabelHID(a.label), At: now}
		}
	}
	return add, remove, records
}
