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

// Moving a user to another mailroom of the fleet (mailroom export-user and
// import-user): the user's records are copied as they are, bucket by
// bucket, so the target has the same accounts (tokens sealed with the
// fleet's shared key), mirrors, watermarks, rules, forms with their waiting
// rows, and webhooks. Only what is numbered per mailroom is renumbered on
// import: submissions (the store-wide submission sequence) and webhook
// cursors (positions in this mailroom's event log).

// MoveFormat is the export file format this build writes; import refuses a
// newer one.
const MoveFormat = 1

// MovedReason is the status reason of an account moved away.
const MovedReason = "moved to another mailroom"

// Move errors.
var (
	// ErrMoveKey: the file was sealed under another secret key.
	ErrMoveKey = errors.New("the export was made with another MAILROOM_SECRET_KEY: the target must use the source's key (a fleet shares one MAILROOM_SECRET_KEY)")
	// ErrMoveFormat: the file comes from a newer mailroom.
	ErrMoveFormat = errors.New("the export file comes from a newer mailroom")
	// ErrMoved: the user was moved to another mailroom.
	ErrMoved = errors.New("the user was moved to another mailroom")
)

// Move is one user's records, bucket by bucket.
type Move struct {
	Format     int       `json:"format"`
	Schema     int       `json:"schema"`
	UserID     string    `json:"userId"`
	Email      string    `json:"email"`
	ExportedAt time.Time `json:"exportedAt"`
	// KeyCheck is a value sealed with the source's key: import opens it
	// first, so a target with another key fails with a clear error.
	KeyCheck []byte       `json:"keyCheck"`
	Buckets  []MoveBucket `json:"buckets"`
	// EventsHead is the source's newest event number at the export: the
	// target numbers its events above it, so a receiver's event ids keep
	// increasing across the move.
	EventsHead uint64 `json:"eventsHead,omitempty"`
}

// MoveBucket is the user's part of one bucket.
type MoveBucket struct {
	Name    string      `json:"name"`
	Seq     uint64      `json:"seq,omitempty"`
	Entries []MoveEntry `json:"entries"`
}

// MoveEntry is a key with its value, or with its nested bucket.
type MoveEntry struct {
	K []byte      `json:"k"`
	V []byte      `json:"v,omitempty"`
	B *MoveBucket `json:"b,omitempty"`
}

// moveSet is what belongs to the user being moved.
type moveSet struct {
	user                                  string
	accounts, forms, rules, jobs, webhook map[string]bool
}

// moveRule says how a bucket's keys belong to a user: pick selects the
// user's entries; a nil pick means the bucket holds nothing per user that
// moves, for the reason why.
type moveRule struct {
	pick func(s *moveSet, k, v []byte) bool
	why  string
}

func keyIn(set func(*moveSet) map[string]bool) func(*moveSet, []byte, []byte) bool {
	return func(s *moveSet, k, _ []byte) bool { return set(s)[string(k)] }
}

func prefixIn(set func(*moveSet) map[string]bool) func(*moveSet, []byte, []byte) bool {
	return func(s *moveSet, k, _ []byte) bool {
		head, _, ok := bytes.Cut(k, []byte{0})
		return ok && set(s)[string(head)]
	}
}

func userIDField(s *moveSet, _, v []byte) bool {
	var r struct {
		UserID string `json:"userId"`
	}
	return json.Unmarshal(v, &r) == nil && r.UserID == s.user
}

var (
	accountsOf = func(s *moveSet) map[string]bool { return s.accounts }
	formsOf    = func(s *moveSet) map[string]bool { return s.forms }
	rulesOf    = func(s *moveSet) map[string]bool { return s.rules }
	jobsOf     = func(s *moveSet) map[string]bool { return s.jobs }
	webhooksOf = func(s *moveSet) map[string]bool { return s.webhook }
	theUser    = func(s *moveSet) map[string]bool { return map[string]bool{s.user: true} }
)

// moveBuckets classifies every top-level bucket. A bucket added to the
// schema must be added here (TestMoveClassifiesEveryBucket).
var moveBuckets = map[string]moveRule{
	// Per user: moved.
	string(bucketUsers):      {pick: keyIn(theUser)},
	string(bucketUserEmails): {pick: func(s *moveSet, _, v []byte) bool { return string(v) == s.user }},
	string(bucketTokens):     {pick: userIDField},
	string(bucketAccounts):   {pick: keyIn(accountsOf)},
	string(bucketAccountEmails): {pick: func(s *moveSet, k, _ []byte) bool {
		i := bytes.LastIndexByte(k, 0)
		return i >= 0 && s.accounts[string(k[i+1:])]
	}},
	string(bucketGmailData):   {pick: keyIn(accountsOf)},
	string(bucketLabelWrites): {pick: prefixIn(accountsOf)},
	string(bucketLabelFlush):  {pick: keyIn(accountsOf)},
	string(bucketProvenance):  {pick: prefixIn(accountsOf)},
	string(bucketForms):       {pick: keyIn(formsOf)},
	string(bucketFormSheets):  {pick: func(s *moveSet, _, v []byte) bool { return s.forms[string(v)] }},
	string(bucketSubmissions): {pick: func(s *moveSet, _, v []byte) bool {
		var r struct {
			FormID string `json:"formId"`
		}
		return json.Unmarshal(v, &r) == nil && s.forms[r.FormID]
	}},
	string(bucketFormBuffers):    {pick: keyIn(formsOf)},
	string(bucketSheetWrites):    {pick: keyIn(formsOf)},
	string(bucketRules):          {pick: keyIn(rulesOf)},
	string(bucketRuleVersion):    {pick: prefixIn(rulesOf)},
	string(bucketUserRules):      {pick: prefixIn(theUser)},
	string(bucketRuleLabels):     {pick: prefixIn(theUser)},
	string(bucketRuleLatest):     {pick: keyIn(rulesOf)},
	string(bucketPending):        {pick: keyIn(theUser)},
	string(bucketDue):            {pick: func(s *moveSet, k, _ []byte) bool { return len(k) > 8 && string(k[8:]) == s.user }},
	string(bucketJobs):           {pick: keyIn(jobsOf)},
	string(bucketUserJobs):       {pick: prefixIn(theUser)},
	string(bucketBatches):        {pick: prefixIn(jobsOf)},
	string(bucketWebhooks):       {pick: keyIn(webhooksOf)},
	string(bucketUserFormBytes):  {pick: keyIn(theUser)},
	string(bucketMeta):           {why: "this mailroom's own settings (schema version, admin password, broker state)"},
	string(bucketOutbox):         {why: "the tasks in flight: the export waits for the user's to finish (or --force drops them); import records the follow-up tasks anew"},
	string(bucketOutboxKeys):     {why: "index of the outbox"},
	string(bucketOutboxGroups):   {why: "counts of the outbox"},
	string(bucketDeadLetters):    {why: "this mailroom's archive of failed tasks (redrive them before the move)"},
	string(bucketDeadCounts):     {why: "counts of the dead letters"},
	string(bucketSessions):       {why: "admin logins of this mailroom"},
	string(bucketConnectLinks):   {why: "short-lived OAuth round trips of this mailroom (connect again on the target)"},
	string(bucketConnectStates):  {why: "index of the connect links"},
	string(bucketEvents):         {why: "the event log is per mailroom: webhooks go on from the target's log"},
	string(bucketUserEvents):     {why: "index of the event log"},
	string(bucketEventsMeta):     {why: "the event log's pruning position"},
	string(bucketAlerts):         {why: "this mailroom's pending dead-letter alerts"},
	string(bucketOwnersGone):     {why: "owners of what was deleted here, for this mailroom's dead letters"},
	string(bucketDeliveries):     {why: "this mailroom's delivery log (its attempts, pruned with the events)"},
	string(bucketDeliveryByHook): {why: "index of the delivery log"},
}

// moveIDs are the buckets whose values name the user's accounts, forms,
// rules, reclassify jobs and webhooks.
func (tx *Tx) moveIDs(userID string) (*moveSet, error) {
	s := &moveSet{user: userID, accounts: map[string]bool{}, forms: map[string]bool{}, rules: map[string]bool{}, jobs: map[string]bool{}, webhook: map[string]bool{}}
	for name, set := range map[string]map[string]bool{
		string(bucketAccounts): s.accounts, string(bucketForms): s.forms, string(bucketRules): s.rules,
		string(bucketJobs): s.jobs, string(bucketWebhooks): s.webhook,
	} {
		err := tx.tx.Bucket([]byte(name)).ForEach(func(k, v []byte) error {
			if userIDField(s, k, v) {
				set[string(k)] = true
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("store: move: scan %s: %w", name, err)
		}
	}
	return s, nil
}

func keyCheckAAD(userID string) string { return "move:" + userID }

// MoveExport collects the user's records.
func (tx *Tx) MoveExport(userID string) (*Move, error) {
	u, err := tx.UserGet(userID)
	if err != nil {
		return nil, fmt.Errorf("store: move: user %s: %w", userID, err)
	}
	if !u.MovedAt.IsZero() {
		return nil, fmt.Errorf("store: move: user %s: %w (at %s)", userID, ErrMoved, u.MovedAt.Format(time.RFC3339))
	}
	s, err := tx.moveIDs(userID)
	if err != nil {
		return nil, err
	}
	m := &Move{Format: MoveFormat, Schema: SchemaVersion(), UserID: u.ID, Email: u.Email, ExportedAt: time.Now().UTC(),
		KeyCheck: tx.db.Seal([]byte(u.ID), keyCheckAAD(u.ID)), EventsHead: tx.EventsHead()}
	names := make([]string, 0, len(moveBuckets))
	for n, r := range moveBuckets {
		if r.pick != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		b := tx.tx.Bucket([]byte(n))
		if b == nil {
			continue
		}
		mb := MoveBucket{Name: n, Seq: b.Sequence()}
		pick := moveBuckets[n].pick
		err := b.ForEach(func(k, v []byte) error {
			if !pick(s, k, v) {
				return nil
			}
			mb.Entries = append(mb.Entries, moveEntry(b, k, v))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("store: move: export %s: %w", n, err)
		}
		m.Buckets = append(m.Buckets, mb)
	}
	return m, nil
}

func moveEntry(b *bolt.Bucket, k, v []byte) MoveEntry {
	e := MoveEntry{K: bytes.Clone(k), V: bytes.Clone(v)}
	if nb := b.Bucket(k); v == nil && nb != nil {
		e.B = copyBucket(nb)
	}
	return e
}

func copyBucket(b *bolt.Bucket) *MoveBucket {
	mb := &MoveBucket{Seq: b.Sequence()}
	_ = b.ForEach(func(k, v []byte) error {
		mb.Entries = append(mb.Entries, moveEntry(b, k, v))
		return nil
	})
	return mb
}

// MoveBusy lists what of the user is still in flight on this mailroom:
// outbox tasks naming its accounts, forms or reclassify jobs (but those of
// the types redo says import records anew), webhook events not delivered
// yet, unfinished reclassify jobs and label changes not yet in Gmail. An
// export made while some are listed drops them.
func (tx *Tx) MoveBusy(userID string, redo func(taskType string) bool) ([]string, error) {
	s, err := tx.moveIDs(userID)
	if err != nil {
		return nil, err
	}
	var busy []string
	tasks := map[string]int{}
	err = tx.tx.Bucket(bucketOutbox).ForEach(func(q, _ []byte) error {
		return tx.OutboxScan(string(q), "", 0, func(r OutboxRecord) bool {
			if !redo(r.Type) && payloadNames(r.Payload, s) {
				tasks[r.Type]++
			}
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: move: scan outbox: %w", err)
	}
	for _, typ := range sortedKeys(tasks) {
		busy = append(busy, fmt.Sprintf("%d %s task(s) in the outbox", tasks[typ], typ))
	}
	for id := range s.webhook {
		w, err := tx.WebhookGet(id)
		if err != nil {
			return nil, err
		}
		evs, _, err := tx.Events(w.Query(w.Cursor, 1))
		if err != nil && !errors.Is(err, ErrCursorExpired) {
			return nil, err
		}
		if w.Batch != nil || len(evs) > 0 || err != nil {
			busy = append(busy, fmt.Sprintf("webhook %s has events not delivered yet", id))
		}
	}
	for id := range s.jobs {
		j, err := tx.ReclassifyJobGet(id)
		if err != nil {
			return nil, err
		}
		if j.FinishedAt.IsZero() {
			busy = append(busy, fmt.Sprintf("reclassify job %s is not finished", id))
		}
	}
	for id := range s.accounts {
		if tx.LabelWritesAny(id) {
			busy = append(busy, fmt.Sprintf("account %s has label changes not yet in Gmail", id))
		}
	}
	sort.Strings(busy)
	return busy, nil
}

func payloadNames(payload []byte, s *moveSet) bool {
	var p struct {
		AccountID string `json:"accountId"`
		FormID    string `json:"formId"`
		JobID     string `json:"jobId"`
		WebhookID string `json:"webhookId"`
		UserID    string `json:"userId"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return false
	}
	return s.accounts[p.AccountID] || s.forms[p.FormID] || s.jobs[p.JobID] || s.webhook[p.WebhookID] || (p.UserID != "" && p.UserID == s.user)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// MoveRetire marks the user as moved on this mailroom, after its export:
// its accounts are disconnected (their tokens dropped), its forms refuse
// submissions (ErrMoved) and their waiting rows, which the target writes,
// are forgotten here; its webhooks, label changes and pending reclassify
// go. The mirror, rules and forms stay, for the record.
func (tx *Tx) MoveRetire(userID string, at time.Time) error {
	s, err := tx.moveIDs(userID)
	if err != nil {
		return err
	}
	u, err := tx.UserGet(userID)
	if err != nil {
		return err
	}
	u.MovedAt = at.UTC()
	if err := putJSON(tx.tx.Bucket(bucketUsers), []byte(u.ID), u); err != nil {
		return err
	}
	for id := range s.accounts {
		a, err := tx.AccountGet(id)
		if err != nil {
			return err
		}
		a.Status, a.StatusReason, a.Token = AccountDisconnected, MovedReason, nil
		if err := tx.AccountPut(a); err != nil {
			return err
		}
		if err := tx.labelWritesDeleteAccount(id); err != nil {
			return err
		}
	}
	for id := range s.forms {
		if err := tx.formRetire(id, at); err != nil {
			return err
		}
	}
	for id := range s.webhook {
		if err := tx.WebhookDelete(id); err != nil {
			return err
		}
	}
	if _, err := tx.ReclassifyTake(userID); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// formRetire marks a moved form and forgets its waiting rows.
func (tx *Tx) formRetire(id string, at time.Time) error {
	f, err := tx.FormGet(id)
	if err != nil {
		return err
	}
	f.MovedAt = at.UTC()
	if err := putJSON(tx.tx.Bucket(bucketForms), []byte(id), f); err != nil {
		return err
	}
	buf, err := tx.formBuffer(id)
	if err != nil {
		return err
	}
	c := buf.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.First() {
		if err := c.Delete(); err != nil {
			return err
		}
	}
	w, err := tx.SheetWrites(id)
	if err != nil {
		return err
	}
	w.Buffered, w.Pending = 0, nil
	return tx.putSheetWrites(id, w)
}

// MoveImported is what an import brought, for its follow-up work.
type MoveImported struct {
	User     User
	Accounts []Account
	// Forms are the forms with rows waiting.
	Forms []string
	// LabelWrites are the accounts with label changes waiting.
	LabelWrites []string
}

// MoveImport writes a user exported from another mailroom. It refuses
// (ErrConflict) when the user, its email, an account's email or any of its
// records already exists here.
func (tx *Tx) MoveImport(m *Move) (MoveImported, error) {
	var out MoveImported
	if m.Format > MoveFormat || m.Format < 1 {
		return out, fmt.Errorf("store: import: format %d: %w (this mailroom reads up to format %d)", m.Format, ErrMoveFormat, MoveFormat)
	}
	if _, err := tx.db.Unseal(m.KeyCheck, keyCheckAAD(m.UserID)); err != nil {
		return out, fmt.Errorf("store: import: %w", ErrMoveKey)
	}
	if err := tx.moveConflicts(m); err != nil {
		return out, err
	}
	if err := tx.eventsAtLeast(m.EventsHead); err != nil {
		return out, fmt.Errorf("store: import: %w", err)
	}
	// Submissions first: the buffers name them by their new ids.
	subs := map[string][]byte{}
	order := slices.Clone(m.Buckets)
	sort.SliceStable(order, func(i, j int) bool {
		return order[i].Name == string(bucketSubmissions) && order[j].Name != order[i].Name
	})
	for _, mb := range order {
		var err error
		switch mb.Name {
		case string(bucketSubmissions):
			err = tx.importSubmissions(mb, subs)
		case string(bucketFormBuffers):
			err = tx.importBuffers(mb, subs)
		case string(bucketWebhooks):
			err = tx.importWebhooks(mb)
		default:
			err = tx.importBucket(mb)
		}
		if err != nil {
			return out, fmt.Errorf("store: import %s: %w", mb.Name, err)
		}
	}
	return tx.moveImported(m)
}

func (tx *Tx) moveImported(m *Move) (MoveImported, error) {
	var out MoveImported
	u, err := tx.UserGet(m.UserID)
	if err != nil {
		return out, err
	}
	out.User = u
	s, err := tx.moveIDs(m.UserID)
	if err != nil {
		return out, err
	}
	for _, id := range sortedKeys(s.accounts) {
		a, err := tx.AccountGet(id)
		if err != nil {
			return out, err
		}
		out.Accounts = append(out.Accounts, a)
		if tx.LabelWritesAny(id) {
			out.LabelWrites = append(out.LabelWrites, id)
		}
	}
	for _, id := range sortedKeys(s.forms) {
		w, err := tx.SheetWrites(id)
		if err != nil {
			return out, err
		}
		if w.Buffered > 0 {
			out.Forms = append(out.Forms, id)
		}
	}
	return out, nil
}

func (tx *Tx) moveConflicts(m *Move) error {
	for _, mb := range m.Buckets {
		if mb.Name == string(bucketSubmissions) {
			continue // renumbered
		}
		rule, ok := moveBuckets[mb.Name]
		if !ok || rule.pick == nil {
			return fmt.Errorf("store: import: the file holds bucket %q, which this mailroom does not move", mb.Name)
		}
		b := tx.tx.Bucket([]byte(mb.Name))
		for _, e := range mb.Entries {
			if b.Get(e.K) == nil && b.Bucket(e.K) == nil {
				if mb.Name == string(bucketAccountEmails) {
					if err := tx.accountEmailFree(e.K); err != nil {
						return err
					}
				}
				continue
			}
			switch mb.Name {
			case string(bucketUsers):
				return fmt.Errorf("store: import: user %s already exists here: %w", e.K, ErrConflict)
			case string(bucketUserEmails):
				return fmt.Errorf("store: import: a user with email %s already exists here: %w", e.K, ErrConflict)
			case string(bucketFormSheets):
				return fmt.Errorf("store: import: a form here already writes the sheet %q: %w", strings.ReplaceAll(string(e.K), "\x00", " / "), ErrConflict)
			}
			return fmt.Errorf("store: import: %s already holds %q: %w", mb.Name, e.K, ErrConflict)
		}
	}
	return nil
}

// accountEmailFree refuses an account email index key (email \x00 id)
// whose email is connected here already.
func (tx *Tx) accountEmailFree(k []byte) error {
	i := bytes.LastIndexByte(k, 0)
	if i < 0 {
		return fmt.Errorf("store: import: bad account email key %q", k)
	}
	prefix := k[:i+1]
	if got, _ := tx.tx.Bucket(bucketAccountEmails).Cursor().Seek(prefix); got != nil && bytes.HasPrefix(got, prefix) {
		return fmt.Errorf("store: import: the Gmail account %s is already connected here: %w", k[:i], ErrConflict)
	}
	return nil
}

func (tx *Tx) importBucket(mb MoveBucket) error {
	b := tx.tx.Bucket([]byte(mb.Name))
	if err := putEntries(b, mb.Entries); err != nil {
		return err
	}
	return b.SetSequence(max(b.Sequence(), mb.Seq))
}

func putEntries(b *bolt.Bucket, entries []MoveEntry) error {
	for _, e := range entries {
		if e.B == nil {
			if err := b.Put(e.K, nonNil(e.V)); err != nil {
				return err
			}
			continue
		}
		nb, err := b.CreateBucket(e.K)
		if err != nil {
			return err
		}
		if err := putEntries(nb, e.B.Entries); err != nil {
			return err
		}
		if err := nb.SetSequence(e.B.Seq); err != nil {
			return err
		}
	}
	return nil
}

// importSubmissions gives each submission a new id of this mailroom's
// sequence, in the old order; subs maps old keys to new ones.
func (tx *Tx) importSubmissions(mb MoveBucket, subs map[string][]byte) error {
	b := tx.tx.Bucket(bucketSubmissions)
	for _, e := range mb.Entries {
		var s Submission
		if err := json.Unmarshal(e.V, &s); err != nil {
			return err
		}
		id, err := b.NextSequence()
		if err != nil {
			return err
		}
		s.ID = hex.EncodeToString(u64(id))
		if err := putJSON(b, u64(id), s); err != nil {
			return err
		}
		subs[string(e.K)] = u64(id)
	}
	return nil
}

// importBuffers writes the forms' buffers with the submissions' new ids.
func (tx *Tx) importBuffers(mb MoveBucket, subs map[string][]byte) error {
	root := tx.tx.Bucket(bucketFormBuffers)
	for _, e := range mb.Entries {
		if e.B == nil {
			return fmt.Errorf("buffer of form %s is not a bucket", e.K)
		}
		entries := make([]MoveEntry, len(e.B.Entries))
		for i, r := range e.B.Entries {
			id, ok := subs[string(r.V)]
			if !ok || len(r.V) != 8 {
				return fmt.Errorf("form %s: waiting row %d names submission %x, not in the file", e.K, binary.BigEndian.Uint64(r.K), r.V)
			}
			entries[i] = MoveEntry{K: r.K, V: id}
		}
		if err := putEntries(root, []MoveEntry{{K: e.K, B: &MoveBucket{Seq: e.B.Seq, Entries: entries}}}); err != nil {
			return err
		}
	}
	return nil
}

// eventsAtLeast moves the event log's numbering up to head when it is
// below: the moved user's receivers then see ids above every id the source
// gave them. The skipped numbers name no event, as pruned ones do not;
// every kept cursor stays valid.
func (tx *Tx) eventsAtLeast(head uint64) error {
	b := tx.tx.Bucket(bucketEvents)
	if head <= b.Sequence() {
		return nil
	}
	return b.SetSequence(head)
}

// importWebhooks writes the webhooks with their cursors at this
// mailroom's newest event: they go on with what happens here from now.
func (tx *Tx) importWebhooks(mb MoveBucket) error {
	b := tx.tx.Bucket(bucketWebhooks)
	head := tx.EventsHead()
	for _, e := range mb.Entries {
		var w Webhook
		if err := json.Unmarshal(e.V, &w); err != nil {
			return err
		}
		w.Cursor, w.Batch = head, nil
		if err := putJSON(b, e.K, w); err != nil {
			return err
		}
	}
	return nil
}

// nonNil gives the index entries stored with an empty value (which JSON
// brings back as nil) a non-nil empty value to Put.
func nonNil(v []byte) []byte {
	if v == nil {
		return []byte{}
	}
	return v
}
