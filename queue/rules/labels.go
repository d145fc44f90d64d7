package rules

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	"mailroom/queue/google"
	"mailroom/store"
)

// labelIDs resolves label names (by lower-case key) to the account's label
// ids, from the mirror's label map, creating in Gmail those in create that
// the account lacks. It returns the Gmail calls it made.
//
// A label is created once per account however many message-added tasks
// and reclassify batches ask for it at once: creators of one account's
// label take turns (createLabel), and each looks in the mirror again once
// its turn comes, where the first one recorded it. Creation runs at live
// priority (google.PriorityLive), as the budget's table says: a new
// message waiting for its label never waits behind reclassify work.
func (p *Pipeline) labelIDs(ctx context.Context, gm Gmail, accountID string, names map[string]string, create map[string]bool) (ids map[string]string, calls int, err error) {
	known, err := p.mirrorLabels(accountID)
	if err != nil {
		return nil, 0, err
	}
	ids = make(map[string]string, len(names))
	findLabels(ids, names, known)
	for key, name := range names {
		if ids[key] != "" || !create[key] {
			continue
		}
		id, n, err := p.createLabel(ctx, gm, accountID, key, name)
		calls += n
		if err != nil {
			return nil, calls, err
		}
		ids[key] = id
	}
	return ids, calls, nil
}

// findLabels sets ids[key] for each wanted name (names, by lower-case key)
// found among labels (id → name) and not set yet.
func findLabels(ids, names, labels map[string]string) {
	for id, name := range labels {
		if key := strings.ToLower(name); names[key] != "" && ids[key] == "" {
			ids[key] = id
		}
	}
}

// mirrorLabels returns the account's label map (id → name).
func (p *Pipeline) mirrorLabels(accountID string) (map[string]string, error) {
	var known map[string]string
	err := p.db.View(func(tx *store.Tx) (err error) {
		known, err = tx.Labels(accountID)
		return err
	})
	return known, err
}

// createLabel returns the id of the account's label key (name), creating
// it in Gmail unless it appeared in the mirror while this caller waited
// for its turn, and records it in the mirror before the next caller's
// turn. It returns the Gmail calls it made.
func (p *Pipeline) createLabel(ctx context.Context, gm Gmail, accountID, key, name string) (id string, calls int, err error) {
	unlock, err := p.labelLocks.lock(ctx, accountID+"\x00"+key)
	if err != nil {
		return "", 0, err
	}
	defer unlock()
	want := map[string]string{key: name}
	ids := map[string]string{}
	known, err := p.mirrorLabels(accountID)
	if err != nil {
		return "", 0, err
	}
	if findLabels(ids, want, known); ids[key] != "" {
		return ids[key], 0, nil // a caller before this one made it
	}
	ctx = google.WithPriority(ctx, google.PriorityLive)
	calls++
	p.metrics.gmailCalls.WithLabelValues("labels.create").Inc()
	added := map[string]string{}
	l, cerr := gm.CreateLabel(ctx, name)
	if cerr == nil {
		ids[key], added[l.ID] = l.ID, l.Name
	} else {
		// The name may exist in Gmail (made by hand, or by another
		// process) but not in the mirror: read the labels again.
		calls++
		fresh, lerr := p.gmailLabels(ctx, gm)
		if lerr != nil {
			return "", calls, lerr
		}
		maps.Copy(added, fresh)
		if findLabels(ids, want, fresh); ids[key] == "" {
			// Not there after all: a retry may do better.
			return "", calls, fmt.Errorf("rules: create label %q: %s", name, cerr.Error())
		}
	}
	err = p.db.Update(func(tx *store.Tx) error {
		cur, err := tx.Labels(accountID)
		if err != nil {
			return err
		}
		maps.Copy(cur, added)
		return tx.LabelsReplace(accountID, cur)
	})
	if err != nil {
		return "", calls, err
	}
	return ids[key], calls, nil
}

// keyedLocks are mutexes by key, made on demand and dropped when no one
// holds or waits for them; lock honours the caller's context.
type keyedLocks struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	ch    chan struct{} // holds a token while locked
	users int           // holders and waiters
}

func (k *keyedLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{ch: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
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
