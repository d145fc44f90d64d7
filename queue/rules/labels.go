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
		p.metrics.gmailCalls.WithLabelValues("labels.list").Inc()
		labels, lerr := gm.Labels(ctx)
		if lerr != nil {
			return nil, calls, lerr
		}
		fresh := map[string]string{}
		for _, l := range labels {
			if l.Type != "system" {
				fresh[l.ID] = l.Name
			}
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
