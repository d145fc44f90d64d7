package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The Gmail buckets (created by the "gmail accounts and messages" migration).
var (
	bucketAccounts      = []byte("gmail_accounts")       // account id -> Account
	bucketAccountEmails = []byte("gmail_account_emails") // lower(email) \x00 account id -> nil
	// bucketGmailData holds one sub-bucket per account (named by its id),
	// each with the sub-buckets below and the counts key, so deleting an
	// account's data is one DeleteBucket.
	bucketGmailData = []byte("gmail_data")
)

var (
	subMessages = []byte("messages") // message id -> Message
	subThreads  = []byte("threads")  // thread id \x00 message id -> nil
	subLabels   = []byte("labels")   // label id -> name
	subRuns     = []byte("runs")     // seq -> SyncRun
	// subFullSync notes the messages the full sync in progress fetched, so
	// that an interrupted one goes on where it stopped (created on demand,
	// dropped when the full sync completes).
	subFullSync = []byte("full_sync") // message id -> nil
	keyCounts   = []byte("counts")    // MessageCounts
	// keyFullSyncListed holds the full sync's last listed page (see
	// FullSyncListed), apart from the account record, which every task
	// reads: 500 ids there made each read of it about 35 times dearer.
	keyFullSyncListed = []byte("full_sync_listed") // fullSyncListed
)

// Account statuses, as the contract names them.
const (
	AccountSyncing      = "syncing"
	AccountReady        = "ready"
	AccountError        = "error"
	AccountDisconnected = "disconnected"
)

// Account is a connected Gmail account: who owns it, its OAuth token
// (sealed), and where its mirror stands.
//
// HistoryID is the watermark: every change of the mailbox up to that Gmail
// history id is recorded in bbolt (as mirrored state or as event tasks in the
// outbox). It only moves forward, in the transaction that records those
// changes. WantedHistoryID is the highest history id a push announced; a
// sync runs while it is above the watermark.
type Account struct {
	ID     string `json:"id"`
	UserID string `json:"userId"`
	Email  string `json:"email"`
	Status string `json:"status"`
	// StatusReason says what is wrong and what to do, for error and
	// disconnected accounts.
	StatusReason string `json:"statusReason,omitempty"`
	// Token is the OAuth token, sealed with DB.Seal and the account id as
	// associated data. Only the Google adapter reads it.
	Token []byte `json:"token,omitempty"`

	HistoryID       uint64 `json:"historyId,omitempty"`
	WantedHistoryID uint64 `json:"wantedHistoryId,omitempty"`
	// WantedAt is when a push first asked for more than the watermark
	// holds, while the history sync has not caught up with it (zero once
	// it has); ShortReads counts the history reads since then that Gmail
	// answered below the pushed id (its history lags its push).
	WantedAt   time.Time `json:"wantedAt,omitzero"`
	ShortReads int       `json:"shortReads,omitempty"`
	// UnannouncedAt is when a poll last found changes that no push had
	// announced. Pushes are healthy while LastPushAt is set and
	// UnannouncedAt is not after it.
	UnannouncedAt time.Time `json:"unannouncedAt,omitzero"`
	// FullSyncRequested counts requests of a full sync (connect, resync,
	// history too old); FullSyncCompleted is the count the last finished
	// full sync had seen at its start. A full sync is due while the first
	// is ahead, so a request made during a full sync is not lost.
	FullSyncRequested uint64 `json:"fullSyncRequested,omitempty"`
	FullSyncCompleted uint64 `json:"fullSyncCompleted,omitempty"`
	// FullSyncStart is the full sync in progress, once one started: which
	// request it serves and the mailbox's history id when it began. A run
	// that resumes it keeps that history id (history from it replays what
	// changed meanwhile) and skips the messages it already fetched
	// (FullSyncFetched).
	FullSyncStart *FullSyncStart `json:"fullSyncStart,omitempty"`
	// FullSyncDead is set with status error when the account's full sync
	// went to the dead letters (its retries spent): a resync, or the dead
	// letter's redrive, starts it again. An account in error for its grant
	// (revoked) has it unset and needs connecting again.
	FullSyncDead bool `json:"fullSyncDead,omitempty"`
	// StaleHistoryID is a watermark Gmail answered "history too old" for:
	// the history sync does not read from it again (a full sync is due).
	StaleHistoryID uint64 `json:"staleHistoryId,omitempty"`

	WatchExpiration time.Time `json:"watchExpiration,omitzero"`
	WatchRenewedAt  time.Time `json:"watchRenewedAt,omitzero"`
	LastSyncAt      time.Time `json:"lastSyncAt,omitzero"`
	// LastPushAt is when a push for the account was last accepted (kept
	// to the second: a burst of pushes writes it once).
	LastPushAt  time.Time `json:"lastPushAt,omitzero"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

func emailKey(email, id string) []byte {
	return []byte(strings.ToLower(strings.TrimSpace(email)) + "\x00" + id)
}

// AccountPut creates or replaces an account, keeping the email index. A
// new account needs its ID set (NewID) by the caller, so that its token can
// be sealed with it before the first write.
func (tx *Tx) AccountPut(a Account) error {
	if a.ID == "" || a.Email == "" {
		return fmt.Errorf("store: account needs an id and an email")
	}
	b := tx.tx.Bucket(bucketAccounts)
	emails := tx.tx.Bucket(bucketAccountEmails)
	var old *Account
	if prev := new(Account); getJSON(b, []byte(a.ID), prev) == nil {
		old = prev
		if !strings.EqualFold(old.Email, a.Email) {
			if err := emails.Delete(emailKey(old.Email, old.ID)); err != nil {
				return err
			}
		}
	}
	if err := tx.accountStatusEvent(old, a); err != nil {
		return err
	}
	now := time.Now().UTC()
	if a.CreatedAt.IsZero() {
		a.CreatedAt = now
	}
	a.UpdatedAt = now
	if err := putJSON(b, []byte(a.ID), a); err != nil {
		return fmt.Errorf("store: put account %s: %w", a.ID, err)
	}
	return emails.Put(emailKey(a.Email, a.ID), nil)
}

// AccountGet returns one account; ErrNotFound when it does not exist.
func (tx *Tx) AccountGet(id string) (Account, error) {
	var a Account
	if err := getJSON(tx.tx.Bucket(bucketAccounts), []byte(id), &a); err != nil {
		return a, fmt.Errorf("store: account %s: %w", id, err)
	}
	return a, nil
}

// AccountExists reports whether the account exists (without decoding it).
func (tx *Tx) AccountExists(id string) bool {
	return tx.tx.Bucket(bucketAccounts).Get([]byte(id)) != nil
}

// Accounts lists every account, ordered by email then id.
func (tx *Tx) Accounts() ([]Account, error) {
	var out []Account
	err := tx.tx.Bucket(bucketAccounts).ForEach(func(_, v []byte) error {
		var a Account
		if err := json.Unmarshal(v, &a); err != nil {
			return fmt.Errorf("store: decode account: %w", err)
		}
		out = append(out, a)
		return nil
	})
	sort.Slice(out, func(i, j int) bool {
		if ei, ej := strings.ToLower(out[i].Email), strings.ToLower(out[j].Email); ei != ej {
			return ei < ej
		}
		return out[i].ID < out[j].ID
	})
	return out, err
}

// AccountIDsByEmail returns the ids of the accounts with that address
// (several users may connect the same mailbox), compared case-insensitively.
func (tx *Tx) AccountIDsByEmail(email string) []string {
	prefix := []byte(strings.ToLower(strings.TrimSpace(email)) + "\x00")
	var ids []string
	c := tx.tx.Bucket(bucketAccountEmails).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		ids = append(ids, string(k[len(prefix):]))
	}
	return ids
}

// AccountByUserEmail returns the account of a user with that address.
func (tx *Tx) AccountByUserEmail(userID, email string) (Account, error) {
	for _, id := range tx.AccountIDsByEmail(email) {
		a, err := tx.AccountGet(id)
		if err != nil {
			return a, err
		}
		if a.UserID == userID {
			return a, nil
		}
	}
	return Account{}, fmt.Errorf("store: account of user %s for %s: %w", userID, email, ErrNotFound)
}

// AccountDelete removes an account and all its data (messages, threads,
// labels, sync runs, the provenance of labels rules applied). ErrNotFound
// when it does not exist.
func (tx *Tx) AccountDelete(id string) error {
	a, err := tx.AccountGet(id)
	if err != nil {
		return err
	}
	if err := tx.tx.Bucket(bucketAccounts).Delete([]byte(id)); err != nil {
		return err
	}
	gone := a
	gone.Status, gone.StatusReason = AccountDisconnected, "deleted"
	if err := tx.accountStatusEvent(&a, gone); err != nil {
		return err
	}
	if err := tx.ownerGone(ownerAccount, id, a.UserID); err != nil {
		return err
	}
	if err := tx.tx.Bucket(bucketAccountEmails).Delete(emailKey(a.Email, a.ID)); err != nil {
		return err
	}
	data := tx.tx.Bucket(bucketGmailData)
	if ab := data.Bucket([]byte(id)); ab != nil {
		// Sub-buckets first: deleting only the parent after writing to a
		// child in the same transaction leaks a page in bbolt 1.5.0.
		for _, n := range [][]byte{subMessages, subThreads, subLabels, subRuns, subFullSync, subFullSyncTodo, subFullSyncThreads, subTombstones} {
			if ab.Bucket(n) != nil {
				if err := ab.DeleteBucket(n); err != nil {
					return fmt.Errorf("store: delete data of account %s: %w", id, err)
				}
			}
		}
		if err := data.DeleteBucket([]byte(id)); err != nil {
			return fmt.Errorf("store: delete data of account %s: %w", id, err)
		}
	}
	return tx.LabelProvenanceDeleteAccount(id)
}

// accountData returns the account's data bucket (and, when create is set,
// makes it and its sub-buckets). It is nil when missing and !create.
func (tx *Tx) accountData(accountID string, create bool) (*bolt.Bucket, error) {
	root := tx.tx.Bucket(bucketGmailData)
	if b := root.Bucket([]byte(accountID)); b != nil || !create {
		return b, nil
	}
	b, err := root.CreateBucket([]byte(accountID))
	if err != nil {
		return nil, fmt.Errorf("store: data bucket of account %s: %w", accountID, err)
	}
	for _, n := range [][]byte{subMessages, subThreads, subLabels, subRuns} {
		if _, err := b.CreateBucket(n); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// accountSub returns one sub-bucket of the account's data, nil when the
// account has no data yet and !create.
func (tx *Tx) accountSub(accountID string, name []byte, create bool) (*bolt.Bucket, error) {
	b, err := tx.accountData(accountID, create)
	if b == nil || err != nil {
		return nil, err
	}
	return b.Bucket(name), nil
}

// Labels returns the account's label names by id, as last read from Gmail
// (user labels; system labels are named by their id and need no entry).
func (tx *Tx) Labels(accountID string) (map[string]string, error) {
	out := map[string]string{}
	b, err := tx.accountSub(accountID, subLabels, false)
	if b == nil || err != nil {
		return out, err
	}
	err = b.ForEach(func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	})
	return out, err
}

// LabelsReplace replaces the account's label map with labels (id -> name).
func (tx *Tx) LabelsReplace(accountID string, labels map[string]string) error {
	data, err := tx.accountData(accountID, true)
	if err != nil {
		return err
	}
	if err := data.DeleteBucket(subLabels); err != nil {
		return err
	}
	b, err := data.CreateBucket(subLabels)
	if err != nil {
		return err
	}
	for id, name := range labels {
		if err := b.Put([]byte(id), []byte(name)); err != nil {
			return err
		}
	}
	return nil
}

// SyncRun is one run of an account's sync, kept for the admin page.
type SyncRun struct {
	ID         uint64    `json:"id"`
	Kind       string    `json:"kind"`    // "full" or "history"
	Trigger    string    `json:"trigger"` // what asked for it: connect, push, poll, resync, too_old
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// FromHistoryID and ToHistoryID are the watermark before and after.
	FromHistoryID uint64 `json:"fromHistoryId,omitempty"`
	ToHistoryID   uint64 `json:"toHistoryId,omitempty"`
	Records       int    `json:"records"`           // history records read
	Events        int    `json:"events"`            // event tasks recorded
	Messages      int    `json:"messages"`          // messages fetched (full sync)
	Resumed       int    `json:"resumed,omitempty"` // fetched by an earlier, interrupted run (full sync)
	// ShortRead: Gmail answered this read below the id a push announced
	// (its history lags its push); HistoryLagMs, on the run that caught up
	// after short reads, is how long history took from the push.
	ShortRead    bool   `json:"shortRead,omitempty"`
	HistoryLagMs int64  `json:"historyLagMs,omitempty"`
	Error        string `json:"error,omitempty"`
}

// syncRunsKept is how many runs per account are kept.
const syncRunsKept = 50

// SyncRunAdd records a finished (or failed) run and drops the oldest beyond
// the last 50.
func (tx *Tx) SyncRunAdd(accountID string, r SyncRun) error {
	b, err := tx.accountSub(accountID, subRuns, true)
	if err != nil {
		return err
	}
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	r.ID = seq
	if err := putJSON(b, u64(seq), r); err != nil {
		return err
	}
	// Keys are sequence numbers: the ones at or below seq-50 go.
	c := b.Cursor()
	for k, _ := c.First(); k != nil && seq > syncRunsKept && bytes.Compare(k, u64(seq-syncRunsKept)) <= 0; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// SyncRuns returns up to limit of the account's most recent runs, newest
// first.
func (tx *Tx) SyncRuns(accountID string, limit int) ([]SyncRun, error) {
	b, err := tx.accountSub(accountID, subRuns, false)
	if b == nil || err != nil {
		return nil, err
	}
	var out []SyncRun
	c := b.Cursor()
	for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
		var r SyncRun
		if err := json.Unmarshal(v, &r); err != nil {
			return nil, fmt.Errorf("store: decode sync run: %w", err)
		}
		out = append(out, r)
	}
	return out, nil
}

// FullSyncStart is where a full sync of an account began.
type FullSyncStart struct {
	Requested uint64    `json:"requested"`
	HistoryID uint64    `json:"historyId"`
	At        time.Time `json:"at"`
	// LiveHistoryID is how far the history sync that runs beside the full
	// sync has recorded the mailbox's changes (from HistoryID on): live
	// changes are read during a full sync, not after it.
	LiveHistoryID uint64 `json:"liveHistoryId,omitempty"`
	// Messages is the mailbox's size when the full sync began (Gmail's
	// profile); Fetched counts the messages it has stored so far. Their
	// difference is the work left (the account's quota status).
	Messages int `json:"messages,omitempty"`
	Fetched  int `json:"fetched,omitempty"`
	// Listed counts the ids messages.list has answered so far (a page
	// listed again counts again).
	Listed int `json:"listed,omitempty"`
	// PageToken is messages.list's token of the page after the one
	// listed last (FullSyncListed; the next to list once its ids are
	// done): the full sync runs in slices, each from here. Empty: from the
	// first page, unless ListedAll: the page listed last was the last one.
	PageToken string `json:"pageToken,omitempty"`
	ListedAll bool   `json:"listedAll,omitempty"`
	// Resumed counts the listed messages a run found stored by an earlier,
	// interrupted run (not fetched again).
	Resumed int `json:"resumed,omitempty"`
	// Grouped: the full sync keeps its listing grouped by thread
	// (FullSyncListAdd, FullSyncGroups). A start without it was recorded
	// before threads were fetched whole: its page listed last, ids without
	// thread ids, is still under FullSyncListed until FullSyncRegroup moves
	// it.
	Grouped bool `json:"grouped,omitempty"`
}

// FullSyncNoteFetched notes that the full sync in progress fetched ids.
func (tx *Tx) FullSyncNoteFetched(accountID string, ids []string) error {
	data, err := tx.accountData(accountID, true)
	if err != nil {
		return err
	}
	b, err := data.CreateBucketIfNotExists(subFullSync)
	if err != nil {
		return fmt.Errorf("store: full sync notes of account %s: %w", accountID, err)
	}
	for _, id := range ids {
		if err := b.Put([]byte(id), nil); err != nil {
			return err
		}
	}
	return nil
}

// FullSyncFetched returns which of ids the full sync in progress fetched.
func (tx *Tx) FullSyncFetched(accountID string, ids []string) (map[string]bool, error) {
	b, err := tx.accountSub(accountID, subFullSync, false)
	if b == nil || err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, id := range ids {
		if b.Get([]byte(id)) != nil {
			out[id] = true
		}
	}
	return out, nil
}

// fullSyncListed is the value of keyFullSyncListed.
type fullSyncListed struct {
	Requested uint64   `json:"requested"`
	IDs       []string `json:"ids"`
}

// FullSyncListed returns the ids of the page the full sync serving request
// requested listed last (of up to 500) that its runs had not taken yet,
// as a full sync kept them before it grouped its listing by thread (a
// start without Grouped); FullSyncRegroup moves them to the groups. None
// when another full sync listed them.
func (tx *Tx) FullSyncListed(accountID string, requested uint64) ([]string, error) {
	data, err := tx.accountData(accountID, false)
	if data == nil || err != nil {
		return nil, err
	}
	var l fullSyncListed
	if raw := data.Get(keyFullSyncListed); raw != nil {
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("store: full sync page of account %s: %w", accountID, err)
		}
	}
	if l.Requested != requested {
		return nil, nil
	}
	return l.IDs, nil
}

// FullSyncListedPut records ids as those FullSyncListed returns.
func (tx *Tx) FullSyncListedPut(accountID string, requested uint64, ids []string) error {
	data, err := tx.accountData(accountID, true)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return data.Delete(keyFullSyncListed)
	}
	return putJSON(data, keyFullSyncListed, fullSyncListed{Requested: requested, IDs: ids})
}

// FullSyncForget drops the notes of the full sync in progress (it
// completed, or a new one starts afresh).
func (tx *Tx) FullSyncForget(accountID string) error {
	data, err := tx.accountData(accountID, false)
	if data == nil || err != nil {
		return err
	}
	if err := data.Delete(keyFullSyncListed); err != nil {
		return err
	}
	for _, n := range [][]byte{subFullSync, subFullSyncTodo, subFullSyncThreads} {
		if data.Bucket(n) == nil {
			continue
		}
		if err := data.DeleteBucket(n); err != nil {
			return err
		}
	}
	return nil
}
