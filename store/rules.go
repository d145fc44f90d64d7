package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The label rules buckets (created by the "label rules and reclassify"
// migration).
var (
	bucketRules       = []byte("rules")           // rule id -> Rule (deleted rules stay as tombstones)
	bucketRuleVersion = []byte("rule_versions")   // rule id \x00 u64(version) -> RuleVersion
	bucketUserRules   = []byte("user_rules")      // user id \x00 rule id -> nil (live rules)
	bucketRuleLabels  = []byte("rule_labels")     // user id \x00 lower(label) -> rule id (ownership)
	bucketRuleLatest  = []byte("rule_latest_job") // rule id -> job id
	// bucketPending holds each user's pending reclassify; bucketDue indexes
	// it by fire time so that due ones are found with one cursor seek.
	bucketPending  = []byte("reclassify_pending")   // user id -> ReclassifyPending
	bucketDue      = []byte("reclassify_due")       // u64(firesAt ns) user id -> nil
	bucketJobs     = []byte("reclassify_jobs")      // job id -> ReclassifyJob
	bucketUserJobs = []byte("reclassify_user_jobs") // user id \x00 job id -> nil
	bucketBatches  = []byte("reclassify_batches")   // job id \x00 u32(index) -> ReclassifyBatch
	// bucketProvenance records which rule put which label on which message.
	bucketProvenance = []byte("label_provenance") // account id \x00 message id \x00 label id -> Provenance
)

var rulesBuckets = [][]byte{
	bucketRules, bucketRuleVersion, bucketUserRules, bucketRuleLabels, bucketRuleLatest,
	bucketPending, bucketDue, bucketJobs, bucketUserJobs, bucketBatches, bucketProvenance,
}

// Rule is a label rule's current version. The store keeps the rule's text
// (Spec, JSON of the rules package's model) without reading it; Label is
// the label the rule owns, unique per user regardless of case.
type Rule struct {
	ID        string          `json:"id"`
	UserID    string          `json:"userId"`
	Label     string          `json:"label"`
	Version   int             `json:"version"`
	Spec      json.RawMessage `json:"spec"`
	Deleted   bool            `json:"deleted,omitempty"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// RuleVersion is one saved version of a rule; a deletion is a version too.
type RuleVersion struct {
	Version int             `json:"version"`
	Label   string          `json:"label"`
	Spec    json.RawMessage `json:"spec,omitempty"`
	Deleted bool            `json:"deleted,omitempty"`
	SavedAt time.Time       `json:"savedAt"`
}

func join(parts ...string) []byte { return []byte(strings.Join(parts, "\x00")) }

func labelKey(userID, label string) []byte { return join(userID, strings.ToLower(label)) }

// RuleCreate stores version 1 of a new rule of an existing user.
// ErrNotFound when the user does not exist, ErrConflict when the user has a
// rule for that label already.
func (tx *Tx) RuleCreate(userID, label string, spec json.RawMessage, now time.Time) (Rule, error) {
	if _, err := tx.UserGet(userID); err != nil {
		return Rule{}, fmt.Errorf("store: rule of user %s: %w", userID, err)
	}
	r := Rule{ID: NewID(), UserID: userID, Label: label, Spec: spec, CreatedAt: now.UTC(), UpdatedAt: now.UTC()}
	if err := tx.claimLabel(r); err != nil {
		return Rule{}, err
	}
	if err := tx.tx.Bucket(bucketUserRules).Put(join(userID, r.ID), nil); err != nil {
		return Rule{}, err
	}
	return r, tx.ruleSaveVersion(&r, now)
}

// RuleUpdate stores a new version of a live rule. ErrNotFound when there is
// no such live rule, ErrConflict when another rule of the user owns the new
// label.
func (tx *Tx) RuleUpdate(id, label string, spec json.RawMessage, now time.Time) (Rule, error) {
	r, err := tx.RuleGet(id)
	if err != nil {
		return r, err
	}
	if r.Deleted {
		return Rule{}, fmt.Errorf("store: rule %s: %w", id, ErrNotFound)
	}
	if !strings.EqualFold(r.Label, label) {
		if err := tx.tx.Bucket(bucketRuleLabels).Delete(labelKey(r.UserID, r.Label)); err != nil {
			return r, err
		}
	}
	r.Label, r.Spec, r.UpdatedAt = label, spec, now.UTC()
	if err := tx.claimLabel(r); err != nil {
		return Rule{}, err
	}
	return r, tx.ruleSaveVersion(&r, now)
}

// RuleDelete deletes a live rule: it releases its label and leaves a
// tombstone version (the reclassify removes the labels it applied).
// ErrNotFound when there is no such live rule.
func (tx *Tx) RuleDelete(id string, now time.Time) (Rule, error) {
	r, err := tx.RuleGet(id)
	if err != nil {
		return r, err
	}
	if r.Deleted {
		return Rule{}, fmt.Errorf("store: rule %s: %w", id, ErrNotFound)
	}
	if err := tx.tx.Bucket(bucketRuleLabels).Delete(labelKey(r.UserID, r.Label)); err != nil {
		return r, err
	}
	if err := tx.tx.Bucket(bucketUserRules).Delete(join(r.UserID, r.ID)); err != nil {
		return r, err
	}
	r.Deleted, r.UpdatedAt = true, now.UTC()
	return r, tx.ruleSaveVersion(&r, now)
}

func (tx *Tx) claimLabel(r Rule) error {
	labels := tx.tx.Bucket(bucketRuleLabels)
	key := labelKey(r.UserID, r.Label)
	if owner := labels.Get(key); owner != nil && string(owner) != r.ID {
		return fmt.Errorf("store: label %q of user %s: %w", r.Label, r.UserID, ErrConflict)
	}
	return labels.Put(key, []byte(r.ID))
}

func (tx *Tx) ruleSaveVersion(r *Rule, now time.Time) error {
	r.Version++
	v := RuleVersion{Version: r.Version, Label: r.Label, Spec: r.Spec, Deleted: r.Deleted, SavedAt: now.UTC()}
	if r.Deleted {
		v.Spec = nil
	}
	if err := putJSON(tx.tx.Bucket(bucketRuleVersion), append(join(r.ID, ""), u64(uint64(r.Version))...), v); err != nil {
		return fmt.Errorf("store: put version %d of rule %s: %w", r.Version, r.ID, err)
	}
	if err := putJSON(tx.tx.Bucket(bucketRules), []byte(r.ID), r); err != nil {
		return fmt.Errorf("store: put rule %s: %w", r.ID, err)
	}
	return nil
}

// RuleGet returns a rule, deleted ones (tombstones) included.
func (tx *Tx) RuleGet(id string) (Rule, error) {
	var r Rule
	if err := getJSON(tx.tx.Bucket(bucketRules), []byte(id), &r); err != nil {
		return r, fmt.Errorf("store: rule %s: %w", id, err)
	}
	return r, nil
}

// Rules lists a user's live rules, oldest first.
func (tx *Tx) Rules(userID string) ([]Rule, error) {
	prefix := join(userID, "")
	var out []Rule
	c := tx.tx.Bucket(bucketUserRules).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		r, err := tx.RuleGet(string(k[len(prefix):]))
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// RuleVersions returns every saved version of a rule, oldest first.
func (tx *Tx) RuleVersions(id string) ([]RuleVersion, error) {
	prefix := join(id, "")
	var out []RuleVersion
	c := tx.tx.Bucket(bucketRuleVersion).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var rv RuleVersion
		if err := json.Unmarshal(v, &rv); err != nil {
			return nil, fmt.Errorf("store: decode version of rule %s: %w", id, err)
		}
		out = append(out, rv)
	}
	return out, nil
}

// RuleVersionGet returns one saved version of a rule.
func (tx *Tx) RuleVersionGet(id string, version int) (RuleVersion, error) {
	var v RuleVersion
	if err := getJSON(tx.tx.Bucket(bucketRuleVersion), append(join(id, ""), u64(uint64(version))...), &v); err != nil {
		return v, fmt.Errorf("store: version %d of rule %s: %w", version, id, err)
	}
	return v, nil
}

// RuleLatestJob returns the id of the newest reclassify job that carries
// the rule ("" when none was published yet).
func (tx *Tx) RuleLatestJob(ruleID string) string {
	return string(tx.tx.Bucket(bucketRuleLatest).Get([]byte(ruleID)))
}

// RuleSetLatestJob records jobID as the rule's newest reclassify job.
func (tx *Tx) RuleSetLatestJob(ruleID, jobID string) error {
	return tx.tx.Bucket(bucketRuleLatest).Put([]byte(ruleID), []byte(jobID))
}

// ReclassifyPending is a user's reclassify that waits for its fire time:
// the union of the rules saved since the last publish, and when.
type ReclassifyPending struct {
	UserID  string   `json:"userId"`
	RuleIDs []string `json:"ruleIds"` // sorted, unique
	// Accounts, when not empty, are the only accounts of the user it
	// covers (the label pass of a full sync's end); empty: every account
	// (a rule saved).
	Accounts  []string  `json:"accounts,omitempty"` // sorted, unique
	FirstSave time.Time `json:"firstSave"`
	LastSave  time.Time `json:"lastSave"`
	FiresAt   time.Time `json:"firesAt"`
}

func dueKey(firesAt time.Time, userID string) []byte {
	return append(u64(uint64(firesAt.UnixNano())), userID...)
}

// ReclassifyMerge adds ruleID to the user's pending reclassify (creating
// it), in the caller's transaction: the union cannot lose a rule to a
// concurrent save, since bbolt runs one writer at a time. The fire time
// becomes now+debounce, but never later than first save + maxWait.
// accountID, when not "", scopes the rule to that account (a full sync's
// label pass): the pending reclassify covers the union of the accounts
// merged so, or every account once a merge names none.
func (tx *Tx) ReclassifyMerge(userID, ruleID, accountID string, now time.Time, debounce, maxWait time.Duration) (ReclassifyPending, error) {
	pending := tx.tx.Bucket(bucketPending)
	p, err := tx.ReclassifyPendingGet(userID)
	switch {
	case errors.Is(err, ErrNotFound):
		p = ReclassifyPending{UserID: userID, FirstSave: now.UTC()}
		if accountID != "" {
			p.Accounts = []string{accountID}
		}
	case err != nil:
		return p, err
	default:
		if err := tx.tx.Bucket(bucketDue).Delete(dueKey(p.FiresAt, userID)); err != nil {
			return p, err
		}
		if accountID == "" {
			p.Accounts = nil
		} else if i, found := slices.BinarySearch(p.Accounts, accountID); len(p.Accounts) > 0 && !found {
			p.Accounts = slices.Insert(p.Accounts, i, accountID)
		}
	}
	if i, found := slices.BinarySearch(p.RuleIDs, ruleID); !found {
		p.RuleIDs = slices.Insert(p.RuleIDs, i, ruleID)
	}
	p.LastSave = now.UTC()
	p.FiresAt = p.LastSave.Add(debounce)
	if limit := p.FirstSave.Add(maxWait); p.FiresAt.After(limit) {
		p.FiresAt = limit
	}
	if err := putJSON(pending, []byte(userID), p); err != nil {
		return p, fmt.Errorf("store: put pending reclassify of %s: %w", userID, err)
	}
	return p, tx.tx.Bucket(bucketDue).Put(dueKey(p.FiresAt, userID), nil)
}

// ReclassifyPendingGet returns the user's pending reclassify; ErrNotFound
// when there is none.
func (tx *Tx) ReclassifyPendingGet(userID string) (ReclassifyPending, error) {
	var p ReclassifyPending
	if err := getJSON(tx.tx.Bucket(bucketPending), []byte(userID), &p); err != nil {
		return p, fmt.Errorf("store: pending reclassify of %s: %w", userID, err)
	}
	return p, nil
}

// ReclassifyDue calls fn with each user whose pending reclassify fires at
// or before now, earliest first, until fn returns false. It walks the
// fire-time index from its start and stops at the first entry after now,
// so it never reads a pending job that is not due (beyond that one
// entry). visited counts the index entries read.
func (tx *Tx) ReclassifyDue(now time.Time, fn func(userID string, firesAt time.Time) bool) (visited int, err error) {
	c := tx.tx.Bucket(bucketDue).Cursor()
	limit := uint64(now.UnixNano())
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		visited++
		if len(k) < 8 {
			return visited, fmt.Errorf("store: bad fire-time index key %x", k)
		}
		at := binary.BigEndian.Uint64(k[:8])
		if at > limit {
			return visited, nil
		}
		if !fn(string(k[8:]), time.Unix(0, int64(at)).UTC()) {
			return visited, nil
		}
	}
	return visited, nil
}

// ReclassifyTake removes and returns the user's pending reclassify;
// ErrNotFound when there is none (another publisher took it).
func (tx *Tx) ReclassifyTake(userID string) (ReclassifyPending, error) {
	p, err := tx.ReclassifyPendingGet(userID)
	if err != nil {
		return p, err
	}
	if err := tx.tx.Bucket(bucketDue).Delete(dueKey(p.FiresAt, userID)); err != nil {
		return p, err
	}
	return p, tx.tx.Bucket(bucketPending).Delete([]byte(userID))
}

// Batch states.
const (
	BatchWaiting = "waiting" // in the outbox (or running)
	BatchWriting = "writing" // ran; its label changes wait for the account's writer
	BatchDone    = "done"    // ran
	BatchStale   = "stale"   // dropped: every rule it carried got a newer job first
	BatchFailed  = "failed"  // in the dead letters (a redrive runs it again)
)

// ReclassifyJob is one published reclassify of a user's rules over all
// the threads of the user's accounts, in batches.
type ReclassifyJob struct {
	ID      string   `json:"id"`
	UserID  string   `json:"userId"`
	RuleIDs []string `json:"ruleIds"`
	// Threads is the number of threads the batches cover.
	Threads             int `json:"threads"`
	Batches             int `json:"batches"`
	BatchesDone         int `json:"batchesDone"`
	BatchesSkippedStale int `json:"batchesSkippedStale"`
	// BatchesFailed counts batches in the dead letters; a redriven batch
	// that then runs counts as done instead.
	BatchesFailed int `json:"batchesFailed,omitempty"`
	// RulesSkipped counts, over the batches that ran, the rules a batch
	// skipped because a newer job carries them (the per-rule stale skip).
	RulesSkipped int `json:"rulesSkipped"`
	// ThreadsLabeled and ThreadsUnlabeled count threads in which a message
	// got a label added, or removed, by the job; MessagesLabeled and
	// MessagesUnlabeled count the label changes.
	ThreadsLabeled    int `json:"threadsLabeled"`
	ThreadsUnlabeled  int `json:"threadsUnlabeled"`
	MessagesLabeled   int `json:"messagesLabeled"`
	MessagesUnlabeled int `json:"messagesUnlabeled"`
	GmailCalls        int `json:"gmailCalls"`
	// BatchesWriting counts the batches that ran and whose label changes
	// wait for the account's writer (they count as waiting).
	BatchesWriting int       `json:"batchesWriting,omitempty"`
	StartedAt      time.Time `json:"startedAt"`
	// FinishedAt is set once no batch is waiting.
	FinishedAt time.Time `json:"finishedAt,omitzero"`
}

// Waiting is the number of batches neither done, dropped nor failed.
func (j *ReclassifyJob) Waiting() int {
	return j.Batches - j.BatchesDone - j.BatchesSkippedStale - j.BatchesFailed
}

// ReclassifyBatch is one batch task of a job.
type ReclassifyBatch struct {
	JobID     string `json:"jobId"`
	Index     int    `json:"index"`
	AccountID string `json:"accountId"`
	Threads   int    `json:"threads"`
	// Queue and OutboxID name the batch task's outbox record (OutboxID is
	// also the broker's task id).
	Queue    string `json:"queue"`
	OutboxID string `json:"outboxId"`
	State    string `json:"state"`
	// Unsent counts, while the batch is writing, its label changes not yet
	// in Gmail; the counts below are what it adds to its job's once they are.
	Unsent int `json:"unsent,omitempty"`
	// Payload is the batch task's, kept while the batch is writing: a
	// change Gmail refuses for good puts the batch in the dead letters,
	// where a redrive runs it again.
	Payload json.RawMessage `json:"payload,omitempty"`
	// WriteFailed says why Gmail refused a change of the batch for good.
	WriteFailed       string `json:"writeFailed,omitempty"`
	ThreadsLabeled    int    `json:"threadsLabeled,omitempty"`
	ThreadsUnlabeled  int    `json:"threadsUnlabeled,omitempty"`
	MessagesLabeled   int    `json:"messagesLabeled,omitempty"`
	MessagesUnlabeled int    `json:"messagesUnlabeled,omitempty"`
}

// ReclassifyJobCreate stores a new job, giving it an id that sorts in
// publish order.
func (tx *Tx) ReclassifyJobCreate(j *ReclassifyJob) error {
	b := tx.tx.Bucket(bucketJobs)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	j.ID = hex.EncodeToString(u64(seq))
	if err := tx.ReclassifyJobPut(*j); err != nil {
		return err
	}
	return tx.tx.Bucket(bucketUserJobs).Put(join(j.UserID, j.ID), nil)
}

// ReclassifyJobPut rewrites a job.
func (tx *Tx) ReclassifyJobPut(j ReclassifyJob) error {
	if !j.FinishedAt.IsZero() {
		if old, err := tx.ReclassifyJobGet(j.ID); err == nil && old.FinishedAt.IsZero() {
			if err := tx.reclassifyDoneEvent(j); err != nil {
				return err
			}
		}
	}
	if err := putJSON(tx.tx.Bucket(bucketJobs), []byte(j.ID), j); err != nil {
		return fmt.Errorf("store: put reclassify job %s: %w", j.ID, err)
	}
	return nil
}

// ReclassifyJobGet returns one job.
func (tx *Tx) ReclassifyJobGet(id string) (ReclassifyJob, error) {
	var j ReclassifyJob
	if err := getJSON(tx.tx.Bucket(bucketJobs), []byte(id), &j); err != nil {
		return j, fmt.Errorf("store: reclassify job %s: %w", id, err)
	}
	return j, nil
}

// ReclassifyJobs returns up to limit of the user's jobs, newest first.
func (tx *Tx) ReclassifyJobs(userID string, limit int) ([]ReclassifyJob, error) {
	prefix := join(userID, "")
	var out []ReclassifyJob
	c := tx.tx.Bucket(bucketUserJobs).Cursor()
	// Seek past the user's last key, then walk back.
	k, _ := c.Seek(join(userID + "\x01"))
	if k == nil {
		k, _ = c.Last()
	} else {
		k, _ = c.Prev()
	}
	for ; k != nil && bytes.HasPrefix(k, prefix) && (limit <= 0 || len(out) < limit); k, _ = c.Prev() {
		j, err := tx.ReclassifyJobGet(string(k[len(prefix):]))
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func batchKey(jobID string, index int) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(index))
	return append(join(jobID, ""), b[:]...)
}

// ReclassifyBatchPut stores a batch of a job.
func (tx *Tx) ReclassifyBatchPut(b ReclassifyBatch) error {
	return putJSON(tx.tx.Bucket(bucketBatches), batchKey(b.JobID, b.Index), b)
}

// ReclassifyBatchGet returns one batch of a job.
func (tx *Tx) ReclassifyBatchGet(jobID string, index int) (ReclassifyBatch, error) {
	var b ReclassifyBatch
	if err := getJSON(tx.tx.Bucket(bucketBatches), batchKey(jobID, index), &b); err != nil {
		return b, fmt.Errorf("store: batch %d of job %s: %w", index, jobID, err)
	}
	return b, nil
}

// ReclassifyBatches calls fn with each batch of a job, in index order,
// until fn returns false.
func (tx *Tx) ReclassifyBatches(jobID string, fn func(ReclassifyBatch) (bool, error)) error {
	prefix := join(jobID, "")
	c := tx.tx.Bucket(bucketBatches).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var b ReclassifyBatch
		if err := json.Unmarshal(v, &b); err != nil {
			return fmt.Errorf("store: decode batch of job %s: %w", jobID, err)
		}
		more, err := fn(b)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// Provenance says which rule, at which version and in which job, put a
// label on a message, or took it off. Present is the label's state after
// that change; SeenHID is the message's history id for that label in the
// mirror when the change was made, so that until the mirror takes a newer
// change of the label, this record is the better knowledge of it.
//
// Pending marks a change written down before its Gmail call and not yet
// confirmed: the process may have died, or the call failed, after Gmail
// made it. The label's state is unknown, and it is the rule's to decide:
// the next run that looks at the message sends the change it wants again
// (Gmail takes an add of a label that is there, or a removal of one that
// is not, as no change).
type Provenance struct {
	RuleID  string    `json:"ruleId"`
	Version int       `json:"version"`
	JobID   string    `json:"jobId,omitempty"` // empty: applied to new mail
	Present bool      `json:"present"`
	Pending bool      `json:"pending,omitempty"`
	SeenHID uint64    `json:"seenHid,omitempty"`
	At      time.Time `json:"at"`
}

func provenanceKey(accountID, messageID, labelID string) []byte {
	return join(accountID, messageID, labelID)
}

// LabelProvenance returns the provenance records of a message's labels, by
// label id. A label a person applied has none.
func (tx *Tx) LabelProvenance(accountID, messageID string) (map[string]Provenance, error) {
	prefix := join(accountID, messageID, "")
	var out map[string]Provenance
	c := tx.tx.Bucket(bucketProvenance).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var p Provenance
		if err := json.Unmarshal(v, &p); err != nil {
			return nil, fmt.Errorf("store: decode provenance %q: %w", k, err)
		}
		if out == nil {
			out = map[string]Provenance{}
		}
		out[string(k[len(prefix):])] = p
	}
	return out, nil
}

// LabelProvenancePut records the provenance of a message's label.
func (tx *Tx) LabelProvenancePut(accountID, messageID, labelID string, p Provenance) error {
	return putJSON(tx.tx.Bucket(bucketProvenance), provenanceKey(accountID, messageID, labelID), p)
}

// LabelProvenanceDelete forgets the provenance of a message's label.
func (tx *Tx) LabelProvenanceDelete(accountID, messageID, labelID string) error {
	return tx.tx.Bucket(bucketProvenance).Delete(provenanceKey(accountID, messageID, labelID))
}

// LabelProvenanceDeleteAccount forgets every provenance record of an
// account, and its label changes on their way to Gmail (when the account
// is deleted).
func (tx *Tx) LabelProvenanceDeleteAccount(accountID string) error {
	if err := tx.labelWritesDeleteAccount(accountID); err != nil {
		return err
	}
	prefix := join(accountID, "")
	c := tx.tx.Bucket(bucketProvenance).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Seek(prefix) {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// createRulesBuckets is the "label rules and reclassify" migration.
func createRulesBuckets(tx *bolt.Tx) error { return createBuckets(tx, rulesBuckets...) }
