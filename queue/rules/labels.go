package rules

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"mailroom/store"
)

// labelIDs resolves label names (by lower-case key) to the account's label
// ids, from the mirror's label map, creating in Gmail those in create that
// the account lacks. It returns the Gmail calls it made.
func (p *Pipeline) labelIDs(ctx context.Context, gm Gmail, accountID string, names map[string]string, create map[string]bool) (ids map[string]string, calls int, err error) {
	var known map[string]string
	if err := p.db.View(func(tx *store.Tx) (err error) {
		known, err = tx.Labels(accountID)
		return err
	}); err != nil {
		return nil, 0, err
	}
	ids = make(map[string]string, len(names))
	find := func(labels map[string]string) {
		for id, name := range labels {
			if key := strings.ToLower(name); names[key] != "" && ids[key] == "" {
				ids[key] = id
			}
		}
	}
	find(known)
	added := map[string]string{}
	for key, name := range names {
		if ids[key] != "" || !create[key] {
			continue
		}
		calls++
		p.metrics.gmailCalls.WithLabelValues("labels.create").Inc()
		l, err := gm.CreateLabel(ctx, name)
		if err == nil {
			ids[key], added[l.ID] = l.ID, l.Name
			continue
		}
		// The name may exist in Gmail (made by hand, or a moment ago by a
		// concurrent batch) but not in the mirror: read the labels again.
		calls++
		fresh, lerr := p.gmailLabels(ctx, gm)
		if lerr != nil {
			return nil, calls, lerr
		}
		maps.Copy(added, fresh)
		find(fresh)
		if ids[key] == "" {
			// Not there after all: a retry may do better.
			return nil, calls, fmt.Errorf("rules: create label %q: %s", name, err.Error())
		}
	}
	if len(added) > 0 {
		err := p.db.Update(func(tx *store.Tx) error {
			cur, err := tx.Labels(accountID)
			if err != nil {
				return err
			}
			maps.Copy(cur, added)
			return tx.LabelsReplace(accountID, cur)
		})
		if err != nil {
			return nil, calls, err
		}
	}
	return ids, calls, nil
}

// gmailLabels reads the account's labels from Gmail (labels.list), id →
// name, system labels included, as the gmail pipeline keeps the map.
func (p *Pipeline) gmailLabels(ctx context.Context, gm Gmail) (map[string]string, error) {
	p.metrics.gmailCalls.WithLabelValues("labels.list").Inc()
	labels, err := gm.Labels(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(labels))
	for _, l := range labels {
		out[l.ID] = l.Name
	}
	return out, nil
}

// refreshLabels replaces the account's label map with the labels Gmail
// has now, and returns their ids. Call it when Gmail refused a cached label
// id (google.ErrInvalidLabel: the label was deleted there): the ids it
// forgets are looked up by name again, and made anew, by labelIDs.
func (p *Pipeline) refreshLabels(ctx context.Context, gm Gmail, accountID string) (map[string]bool, error) {
	fresh, err := p.gmailLabels(ctx, gm)
	if err != nil {
		return nil, err
	}
	err = p.db.Update(func(tx *store.Tx) error {
		if _, err := tx.AccountGet(accountID); err != nil {
			return err
		}
		return tx.LabelsReplace(accountID, fresh)
	})
	if err != nil {
		return nil, fmt.Errorf("rules: refresh the labels of account %s: %w", accountID, err)
	}
	known := make(map[string]bool, len(fresh))
	for id := range fresh {
		known[id] = true
	}
	return known, nil
}
