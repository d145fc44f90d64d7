package rules

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/store"
)

// batchPayload is the payload of a rules:reclassify-batch task.
type batchPayload struct {
	JobID     string   `json:"jobId"`
	UserID    string   `json:"userId"`
	AccountID string   `json:"accountId"`
	Index     int      `json:"index"`
	RuleIDs   []string `json:"ruleIds"`
	ThreadIDs []string `json:"threadIds"`
}

// Publisher turns due pending reclassifies into jobs, every Tick. It finds
// them through the fire-time index, never by scanning users, and publishes
// each in one transaction that takes the pending entry, so two publishers
// (two loops, two processes sharing the file) never publish one twice: the
// second transaction finds the entry gone.
type Publisher struct {
	lifecycle.Base // Start and Stop
	p              *Pipeline
	q              Enqueuer
	kick           chan struct{}
}

var _ lifecycle.Service = (*Publisher)(nil)

// Publisher returns a publisher of the pipeline's due jobs that enqueues
// batch tasks through q (the pipeline's own is among its Services).
func (p *Pipeline) Publisher(q Enqueuer) *Publisher {
	return &Publisher{p: p, q: q, kick: make(chan struct{}, 1)}
}

// Start runs the ticker until Stop, which waits for a publish in progress.
func (pub *Publisher) Start(ctx context.Context) error {
	return pub.StartLoop(ctx, pub.run)
}

func (pub *Publisher) run(ctx context.Context) {
	lifecycle.TickOrKick(ctx, pub.p.cfg.Tick, pub.kick, func(ctx context.Context) {
		st, err := pub.RunOnce(ctx, pub.p.cfg.Now())
		if err != nil && ctx.Err() == nil {
			pub.p.log.Error("publish due reclassify jobs", "err", err)
		}
		if st.Published == pub.p.cfg.PublishPerTick {
			pub.Kick() // more may be due: go again at once
		}
	})
}

// Kick makes the publisher look for due jobs now, not at its next tick.
func (pub *Publisher) Kick() {
	select {
	case pub.kick <- struct{}{}:
	default:
	}
}

// PublishStats says what one RunOnce did.
type PublishStats struct {
	// Published is the number of jobs published.
	Published int
	// Visited is the number of fire-time index entries read: the due ones
	// plus at most one that is not due, whatever the number of users.
	Visited int
	// Jobs are the published jobs.
	Jobs []store.ReclassifyJob
}

// RunOnce publishes the jobs due at now, up to PublishPerTick, one
// transaction each.
func (pub *Publisher) RunOnce(ctx context.Context, now time.Time) (PublishStats, error) {
	var st PublishStats
	for st.Published < pub.p.cfg.PublishPerTick && ctx.Err() == nil {
		var job *store.ReclassifyJob
		var dropped int
		err := pub.p.db.Update(func(tx *store.Tx) error {
			job, dropped = nil, 0
			var userID string
			visited, err := tx.ReclassifyDue(now, func(id string, _ time.Time) bool {
				userID = id
				return false
			})
			st.Visited += visited
			if err != nil || userID == "" {
				return err
			}
			pending, err := tx.ReclassifyTake(userID)
			if err != nil {
				return err
			}
			j, n, err := pub.publish(tx, pending, now)
			job, dropped = &j, n
			return err
		})
		if err != nil {
			return st, fmt.Errorf("rules: publish: %w", err)
		}
		if job == nil {
			return st, nil
		}
		st.Published++
		st.Jobs = append(st.Jobs, *job)
		pub.p.metrics.publishes.Inc()
		pub.p.metrics.batches.WithLabelValues("stale").Add(float64(dropped))
		pub.p.log.Info("reclassify published", "user_id", job.UserID, "job_id", job.ID,
			"rules", len(job.RuleIDs), "threads", job.Threads, "batches", job.Batches, "dropped_stale_batches", dropped)
	}
	return st, ctx.Err()
}

// publish makes the job of a pending reclassify in tx: the job record, each
// rule's latest job, one batch task per BatchSize threads of each of the
// user's accounts it covers, and drops the waiting batches of the jobs it
// supersedes.
//
// A full sync's label pass covers only the accounts whose full sync ended,
// unless a job it supersedes has batches that have not run: those are
// dropped (their rules' latest job is this one), so this job covers every
// account in their stead.
//
// An account whose full sync is due or running is left out: its mirror is
// still being filled, and the transaction that records the full sync
// complete schedules every rule of the user over it
// (RuleApplier.ReclassifyAccount in the Gmail pipeline), the rules saved
// meanwhile among them. So a new user who saves rules while their mailbox
// syncs gets one label pass over it, at the end, not one now over what is
// mirrored so far and another over the same threads then.
func (pub *Publisher) publish(tx *store.Tx, pending store.ReclassifyPending, now time.Time) (store.ReclassifyJob, int, error) {
	job := store.ReclassifyJob{UserID: pending.UserID, RuleIDs: pending.RuleIDs, StartedAt: now.UTC()}
	if err := tx.ReclassifyJobCreate(&job); err != nil {
		return job, 0, err
	}
	var previous []string
	for _, id := range job.RuleIDs {
		if prev := tx.RuleLatestJob(id); prev != "" && !slices.Contains(previous, prev) {
			previous = append(previous, prev)
		}
		if err := tx.RuleSetLatestJob(id, job.ID); err != nil {
			return job, 0, err
		}
	}
	scope := pending.Accounts
	for _, id := range previous {
		prev, err := tx.ReclassifyJobGet(id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return job, 0, err
		}
		if err == nil && prev.Waiting() > prev.BatchesWriting {
			scope = nil
		}
	}
	accounts, err := tx.Accounts()
	if err != nil {
		return job, 0, err
	}
	size := pub.p.cfg.BatchSize
	for _, a := range accounts {
		if a.UserID != job.UserID || a.Status == store.AccountDisconnected || fullSyncDue(a) ||
			len(scope) > 0 && !slices.Contains(scope, a.ID) {
			continue
		}
		after := ""
		for {
			threads, next, err := tx.ThreadIDs(a.ID, after, size)
			if err != nil {
				return job, 0, err
			}
			if len(threads) > 0 {
				payload := batchPayload{JobID: job.ID, UserID: job.UserID, AccountID: a.ID, Index: job.Batches, RuleIDs: job.RuleIDs, ThreadIDs: threads}
				// Counted per account, weighed by its threads (the Gmail
				// quota backlog asks the queue, never this payload).
				rec, _, err := pub.q.Enqueue(tx, TypeReclassifyBatch, payload, queue.Group(a.ID, len(threads)))
				if err != nil {
					return job, 0, err
				}
				err = tx.ReclassifyBatchPut(store.ReclassifyBatch{
					JobID: job.ID, Index: job.Batches, AccountID: a.ID, Threads: len(threads),
					Queue: rec.Queue, OutboxID: rec.ID, State: store.BatchWaiting,
				})
				if err != nil {
					return job, 0, err
				}
				job.Batches++
				job.Threads += len(threads)
			}
			if next == "" {
				break
			}
			after = next
		}
	}
	if job.Batches == 0 {
		job.FinishedAt = now.UTC()
	}
	if err := tx.ReclassifyJobPut(job); err != nil {
		return job, 0, err
	}
	dropped := 0
	for _, id := range previous {
		n, err := pub.dropSuperseded(tx, id, now)
		if err != nil {
			return job, 0, err
		}
		dropped += n
	}
	return job, dropped, nil
}

// fullSyncDue reports whether a full sync of the account is due or
// running and will finish by itself: one was requested since the last one
// completed, and the account is syncing or ready (not in error, its full
// sync not in the dead letters). Its completion schedules the user's rules
// over the account. An account whose full sync failed is not left out: it
// waits for a person (a resync or a redrive), and the mail it mirrors
// meanwhile must still follow the rules.
func fullSyncDue(a store.Account) bool {
	return a.FullSyncRequested > a.FullSyncCompleted && !a.FullSyncDead &&
		(a.Status == store.AccountSyncing || a.Status == store.AccountReady)
}

// dropSuperseded drops the waiting batches of job id when every rule it
// carried has a newer job: their outbox records go, so those still in the
// outbox never reach a worker, and those already handed to the broker end
// at the handler's first read (the latest job ids) as stale, with no Gmail
// or store work. A batch that is running at this moment finishes without
// recording its plan (see queueWrites) and stays skipped.
func (pub *Publisher) dropSuperseded(tx *store.Tx, id string, now time.Time) (int, error) {
	job, err := tx.ReclassifyJobGet(id)
	if err != nil {
		return 0, err
	}
	for _, r := range job.RuleIDs {
		if tx.RuleLatestJob(r) == id {
			return 0, nil // still the latest job of a rule: its batches run for that rule
		}
	}
	if job.Waiting() == 0 {
		return 0, nil
	}
	dropped := 0
	var stale []store.ReclassifyBatch
	err = tx.ReclassifyBatches(id, func(b store.ReclassifyBatch) (bool, error) {
		if b.State == store.BatchWaiting {
			stale = append(stale, b)
		}
		return true, nil
	})
	if err != nil {
		return 0, err
	}
	for _, b := range stale {
		if err := pub.q.Cancel(tx, TypeReclassifyBatch, b.OutboxID); err != nil {
			return 0, err
		}
		b.State = store.BatchStale
		if err := tx.ReclassifyBatchPut(b); err != nil {
			return 0, err
		}
		job.BatchesSkippedStale++
		dropped++
	}
	if job.Waiting() == 0 && job.FinishedAt.IsZero() {
		job.FinishedAt = now.UTC()
	}
	if err := tx.ReclassifyJobPut(job); err != nil {
		return 0, err
	}
	return dropped, pub.p.flushJobTx(tx, job)
}
