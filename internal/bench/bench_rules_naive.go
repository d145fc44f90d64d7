package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/googleerr"
	"mailroom/queue/rules"
	"mailroom/store"
)

// typeNaiveBatch is the naive reclassify's batch task type, the bench's
// own (no product type is a prefix of it, nor it of one).
const typeNaiveBatch = "bench:naive-reclassify-batch"

// naiveReclassify is rules-story's baseline, the original design of the
// reclassify, built in the bench from public pieces: every save publishes
// a job at once (no debounce), one batch task per 50 threads, and every
// batch applies the rule version of its own save (no stale skip, nothing
// dropped): it adds the rule's label to the batch's messages that version
// matches and removes it from the others, one messages.batchModify call
// each way. Its batches run as a task type of the bench's own, added to
// the app's task table (app.Deps.Tasks) on a queue of their own with
// the product's reclassify workers; they read the mirror from the store,
// match with rules.Compile and call Gmail through the queue/google
// adapter. The product's own reclassify never fires in that run: its
// debounce is an hour.
type naiveReclassify struct {
	google benchGoogle
	email  string
	db     *store.DB
	q      *queue.Queue

	mu    sync.Mutex
	gmail *google.Gmail
	label string // the label's id, once listed or created

	enqueued, done atomic.Int64
}

type naivePayload struct {
	AccountID string     `json:"accountId"`
	Spec      rules.Spec `json:"spec"`
	ThreadIDs []string   `json:"threadIds"`
}

// configure adds the naive batch type to the app's task table, with the
// workers, retries and timeout of the product's reclassify batches, and
// holds the product's reclassify back for the run.
func (n *naiveReclassify) configure(c *setup) {
	c.ReclassifyDebounce, c.ReclassifyMaxWait = time.Hour, time.Hour
	row := queue.TaskType{Name: typeNaiveBatch, Queue: "bench-naive", Handler: n.handle}
	for _, r := range rules.Tasks(c.MaxRetries) {
		if r.Name == rules.TypeReclassifyBatch {
			row.Concurrency, row.MaxRetries, row.Timeout = r.Concurrency, r.MaxRetries, r.Timeout
		}
	}
	c.deps.Tasks = append(c.deps.Tasks, row)
}

// publish makes the job of a save of spec: one batch task per 50 of the
// account's threads, in one transaction.
func (n *naiveReclassify) publish(accountID string, spec rules.Spec) error {
	return n.db.Update(func(tx *store.Tx) error {
		after := ""
		for {
			threads, next, err := tx.ThreadIDs(accountID, after, 50)
			if err != nil {
				return err
			}
			if len(threads) > 0 {
				if _, _, err := n.q.Enqueue(tx, typeNaiveBatch, naivePayload{AccountID: accountID, Spec: spec, ThreadIDs: threads}); err != nil {
					return err
				}
				n.enqueued.Add(1)
			}
			if next == "" {
				return nil
			}
			after = next
		}
	})
}

// handle is a naive batch: the version's label on the messages it
// matches, off the others.
func (n *naiveReclassify) handle(ctx context.Context, t *queue.Task) error {
	var pl naivePayload
	var match *rules.Compiled
	err := json.Unmarshal(t.Payload, &pl)
	if err == nil {
		match, err = rules.Compile(pl.Spec)
	}
	if err != nil {
		return queue.Permanent(fmt.Errorf("naive batch: %w", err))
	}
	var msgs []store.Message
	if err := n.db.View(func(tx *store.Tx) (err error) {
		msgs, err = tx.ThreadMessages(pl.AccountID, pl.ThreadIDs...)
		return err
	}); err != nil {
		return err
	}
	gm, label, err := n.labelOf(ctx, pl.Spec.Label)
	if err != nil {
		return googleerr.ToQueue(err)
	}
	var add, remove []string
	for _, m := range msgs {
		if !m.DeletedAt.IsZero() {
			continue
		}
		if match.Match(&rules.Message{From: m.From, To: m.To, Cc: m.Cc, Subject: m.Subject}) {
			add = append(add, m.ID)
		} else {
			remove = append(remove, m.ID)
		}
	}
	if len(add) > 0 {
		if err := gm.BatchModify(ctx, add, []string{label}, nil); err != nil {
			return googleerr.ToQueue(err)
		}
	}
	if len(remove) > 0 {
		if err := gm.BatchModify(ctx, remove, nil, []string{label}); err != nil {
			return googleerr.ToQueue(err)
		}
	}
	n.done.Add(1)
	return nil
}

// labelOf opens the account's Gmail through the queue/google adapter
// (no budget: Gmail's quota is off in this scenario) and finds or creates
// the label, once.
func (n *naiveReclassify) labelOf(ctx context.Context, name string) (*google.Gmail, string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.gmail == nil {
		c := google.New(google.Config{APIURL: n.google.url, TokenURL: n.google.tokenURL, HTTPClient: &http.Client{Timeout: 30 * time.Second}})
		gm, err := c.Gmail(ctx, n.email, c.TokenSource(google.Token{RefreshToken: n.google.refresh}, nil))
		if err != nil {
			return nil, "", err
		}
		n.gmail = gm
	}
	if n.label == "" {
		labels, err := n.gmail.Labels(ctx)
		if err != nil {
			return nil, "", err
		}
		for _, l := range labels {
			if l.Name == name {
				n.label = l.ID
			}
		}
		if n.label == "" {
			l, err := n.gmail.CreateLabel(ctx, name)
			if err != nil {
				return nil, "", err
			}
			n.label = l.ID
		}
	}
	return n.gmail, n.label, nil
}
