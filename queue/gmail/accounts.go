package gmail

import (
	"context"
	"errors"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/queue/googleerr"
	"mailroom/store"
)

// ConnectRequest connects a Gmail account to a user.
type ConnectRequest struct {
	UserID string
	Email  string
	// Token holds at least the refresh token.
	Token google.Token
}

// Connect stores the account (or, when the user already has one for that
// address, gives it the new token: a reconnect, which keeps its mirror and
// resumes history from its watermark) and records its full sync (a new
// account) or history sync (a reconnect) and, when a Pub/Sub topic is
// set, its users.watch. No Gmail call is made
// here: a token that does not work puts the account in error at its sync.
func (p *Pipeline) Connect(ctx context.Context, r ConnectRequest) (acc store.Account, created bool, err error) {
	r.Email = strings.TrimSpace(r.Email)
	switch {
	case strings.TrimSpace(r.UserID) == "":
		return acc, false, &InvalidError{Field: "userId", Message: "userId is required"}
	case r.Email == "":
		return acc, false, &InvalidError{Field: "email", Message: "email is required"}
	case !validAddress(r.Email):
		return acc, false, &InvalidError{Field: "email", Message: "email is not an email address"}
	case strings.TrimSpace(r.Token.RefreshToken) == "":
		return acc, false, &InvalidError{Field: "refreshToken", Message: "refreshToken is required"}
	}
	err = p.db.Update(func(tx *store.Tx) error {
		if _, err := tx.UserGet(r.UserID); errors.Is(err, store.ErrNotFound) {
			return &InvalidError{Field: "userId", Message: "no user has that id"}
		} else if err != nil {
			return err
		}
		var err error
		acc, err = tx.AccountByUserEmail(r.UserID, r.Email)
		created = errors.Is(err, store.ErrNotFound)
		if created {
			acc = store.Account{ID: store.NewID(), UserID: r.UserID, Email: r.Email}
		} else if err != nil {
			return err
		}
		sealed, err := p.accounts.Seal(acc.ID, r.Token)
		if err != nil {
			return err
		}
		acc.Token = sealed
		// A reconnect of an account with a watermark (its grant was refused
		// and given again) resumes from it: a history sync brings what
		// changed meanwhile, and a full sync runs only if Gmail says the
		// history is gone (404) or one was due anyway.
		resume := !created && !acc.FullSyncDead && !needsFullSync(acc)
		acc.Status, acc.StatusReason, acc.LastError, acc.FullSyncDead = store.AccountSyncing, "", "", false
		if !resume {
			acc.FullSyncRequested++
		}
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		if resume {
			if err := p.enqueueSync(tx, acc.ID, triggerConnect); err != nil {
				return err
			}
		} else if err := p.enqueueFullSync(tx, acc.ID, triggerConnect); err != nil {
			return err
		}
		if p.WatchEnabled() {
			_, _, err := p.queue.Enqueue(tx, TypeWatchRenew, watchPayload{AccountID: acc.ID}, queue.Key(watchKey(acc.ID)))
			return err
		}
		return nil
	})
	if err != nil {
		return acc, false, fmt.Errorf("gmail: connect %s: %w", r.Email, err)
	}
	p.forgetClient(acc.ID)
	p.log.Info("account connected", "account_id", acc.ID, "user_id", acc.UserID, "created", created)
	return acc, created, nil
}

func validAddress(s string) bool {
	a, err := mail.ParseAddress(s)
	return err == nil && a.Name == "" && strings.EqualFold(a.Address, s)
}

func sameAddress(a, b string) bool {
	return strings.EqualFold(strings.TrimSpace(a), strings.TrimSpace(b))
}

// Resync records a full sync of the account.
func (p *Pipeline) Resync(ctx context.Context, id string) error {
	err := p.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(id)
		if err != nil {
			return err
		}
		if !active(acc) && !acc.FullSyncDead {
			return &InvalidError{Field: "id", Message: "the account is " + acc.Status + "; connect it again first"}
		}
		revive(&acc)
		acc.FullSyncRequested++
		acc.Status = store.AccountSyncing
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
		return p.enqueueFullSync(tx, acc.ID, triggerResync)
	})
	if err != nil {
		return fmt.Errorf("gmail: resync %s: %w", id, err)
	}
	return nil
}

// Deleted says what deleting an account did at Google.
type Deleted struct {
	// Email is the deleted account's address.
	Email string
	// RevokeErr is why Google's revocation endpoint did not revoke the
	// account's grant (nil: revoked). The account is deleted either way.
	RevokeErr error
}

// Delete stops the account's watch (best effort: a revoked grant cannot
// stop it, and Google expires it within 7 days), revokes its grant at
// Google's revocation endpoint (so the refresh token stops working there
// too; a refusal is logged and returned in Deleted, and does not stop the
// delete) and deletes the account with all its data. Its waiting tasks
// then fail permanently.
func (p *Pipeline) Delete(ctx context.Context, id string) (Deleted, error) {
	acc, err := p.account(id)
	if errors.Is(err, ErrAccountGone) {
		return Deleted{}, fmt.Errorf("gmail: delete %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return Deleted{}, err
	}
	if p.WatchEnabled() && active(acc) {
		if err := p.stopWatch(ctx, acc); err != nil {
			p.log.Warn("stop watch of a deleted account; it expires on its own", "account_id", id, "err", err)
		}
	}
	d := Deleted{Email: acc.Email, RevokeErr: p.revokeGrant(ctx, acc)}
	if err := p.db.Update(func(tx *store.Tx) error { return tx.AccountDelete(id) }); err != nil {
		return Deleted{}, fmt.Errorf("gmail: delete %s: %w", id, err)
	}
	p.forgetClient(id)
	p.log.Info("account deleted", "account_id", id, "grant_revoked", d.RevokeErr == nil)
	return d, nil
}

// revokeGrant revokes the account's grant at Google; an error says why it
// was not revoked (and is logged).
func (p *Pipeline) revokeGrant(ctx context.Context, acc store.Account) error {
	tok, err := p.accounts.Token(acc)
	if err == nil {
		ctx, cancel := context.WithTimeout(ctx, p.cfg.GoogleTimeout)
		defer cancel()
		err = p.google.Revoke(ctx, tok)
	}
	if err != nil {
		p.log.Warn("Google did not revoke the grant of a deleted account; remove mailroom's access in the Google account", "account_id", acc.ID, "revoke_url", p.google.RevokeURL(), "err", err)
		return fmt.Errorf("gmail: revoke the grant of %s: %w", acc.ID, err)
	}
	p.log.Info("grant revoked at Google", "account_id", acc.ID)
	return nil
}

func (p *Pipeline) stopWatch(ctx context.Context, acc store.Account) error {
	ctx, cancel := context.WithTimeout(google.WithPriority(ctx, google.PriorityLive), p.cfg.GoogleTimeout)
	defer cancel()
	gm, err := p.client(ctx, acc)
	if err != nil {
		return err
	}
	return googleerr.ToQueue(gm.Stop(ctx))
}

// AccountView is an account as the API shows it.
type AccountView struct {
	ID     string `json:"id"`
	UserID string `json:"userId"`
	Email  string `json:"email"`
	Status string `json:"status"`
	// HistoryID is the watermark, a string as Gmail gives it ("" before the
	// first sync).
	HistoryID string `json:"historyId"`
	// WatchExpiration is RFC 3339, or "" without a watch.
	WatchExpiration string `json:"watchExpiration"`
	// Messages is the number of messages in the mirror (trashed included);
	// MessageCounts adds how many are unread and trashed.
	Messages      int                 `json:"messages"`
	MessageCounts store.MessageCounts `json:"messageCounts"`
	StatusReason  string              `json:"statusReason,omitempty"`
	LastSyncAt    string              `json:"lastSyncAt,omitempty"`
	LastError     string              `json:"lastError,omitempty"`
	CreatedAt     string              `json:"createdAt"`
	// LastPushAt is when a push for the account last came (RFC 3339, to
	// the second), or "". Pushes says how they fare: "arriving", "stopped"
	// (a poll found changes no push announced since the last one), "none"
	// (none came yet), or "off" (no Pub/Sub topic: polling alone).
	LastPushAt string `json:"lastPushAt"`
	Pushes     string `json:"pushes"`
	// FullSync is the full sync in progress, nil when none runs.
	FullSync *FullSyncView `json:"fullSync"`
	// GmailQuota is the account's use of its Gmail budget (filled by
	// WithQuota; nil without a budget).
	GmailQuota *QuotaView `json:"gmailQuota,omitempty"`

	// The same times as time.Time, for pages.
	LastSync     time.Time `json:"-"`
	LastPush     time.Time `json:"-"`
	WatchExpires time.Time `json:"-"`
	LastErrorAt  time.Time `json:"-"`
	// Watermark is HistoryID as a number (0 before the first sync).
	Watermark uint64 `json:"-"`
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func hidString(h uint64) string {
	if h == 0 {
		return ""
	}
	return strconv.FormatUint(h, 10)
}

func (p *Pipeline) viewAccount(tx *store.Tx, a store.Account) (AccountView, error) {
	counts, err := tx.MessageCounts(a.ID)
	if err != nil {
		return AccountView{}, err
	}
	return AccountView{
		FullSync: p.fullSyncView(a.FullSyncStart),
		ID:       a.ID, UserID: a.UserID, Email: a.Email, Status: a.Status, HistoryID: hidString(a.HistoryID),
		WatchExpiration: rfc3339(a.WatchExpiration), Messages: counts.Total, MessageCounts: counts, StatusReason: a.StatusReason,
		LastSyncAt: rfc3339(a.LastSyncAt), LastError: a.LastError, CreatedAt: rfc3339(a.CreatedAt),
		LastSync: a.LastSyncAt, WatchExpires: a.WatchExpiration, LastErrorAt: a.LastErrorAt, Watermark: a.HistoryID,
		LastPushAt: rfc3339(a.LastPushAt), LastPush: a.LastPushAt, Pushes: pushState(a, p.WatchEnabled()),
	}, nil
}

// pushState says how the account's pushes fare (AccountView.Pushes).
func pushState(a store.Account, watched bool) string {
	switch {
	case !watched:
		return "off"
	case !a.UnannouncedAt.IsZero() && a.UnannouncedAt.After(a.LastPushAt):
		return "stopped"
	case a.LastPushAt.IsZero():
		return "none"
	}
	return "arriving"
}

// Account returns one account's view; store.ErrNotFound when unknown.
func (p *Pipeline) Account(id string) (AccountView, error) {
	var v AccountView
	err := p.db.View(func(tx *store.Tx) error {
		a, err := tx.AccountGet(id)
		if err != nil {
			return err
		}
		v, err = p.viewAccount(tx, a)
		return err
	})
	return v, err
}

// Accounts returns every account's view.
func (p *Pipeline) Accounts() ([]AccountView, error) {
	out := []AccountView{}
	err := p.db.View(func(tx *store.Tx) error {
		accs, err := tx.Accounts()
		if err != nil {
			return err
		}
		for _, a := range accs {
			v, err := p.viewAccount(tx, a)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}

// AccountDetail is an account with its recent sync runs (admin page).
type AccountDetail struct {
	AccountView
	Runs []store.SyncRun
	// WatchRenewedAt is when users.watch last succeeded.
	WatchRenewedAt time.Time
	// WantedHistoryID is the newest history id a push announced.
	WantedHistoryID uint64
	// SyncPending says whether a history sync is recorded and not
	// finished; FullSyncPending the same of a full sync.
	SyncPending, FullSyncPending bool
}

// Detail returns an account with its last runs.
func (p *Pipeline) Detail(id string, runs int) (AccountDetail, error) {
	var d AccountDetail
	err := p.db.View(func(tx *store.Tx) error {
		a, err := tx.AccountGet(id)
		if err != nil {
			return err
		}
		if d.AccountView, err = p.viewAccount(tx, a); err != nil {
			return err
		}
		d.WatchRenewedAt, d.WantedHistoryID = a.WatchRenewedAt, a.WantedHistoryID
		d.SyncPending = p.pending(tx, TypeSync, syncKey(a.ID))
		d.FullSyncPending = p.pending(tx, TypeFullSync, fullSyncKey(a.ID))
		d.Runs, err = tx.SyncRuns(a.ID, runs)
		return err
	})
	return d, err
}

// MessageView is a message as the API shows it (store.Message.View).
type MessageView = store.MessageView

func viewMessage(m store.Message, names map[string]string) MessageView { return m.View(names) }

// MessageQuery filters an account's messages.
type MessageQuery struct {
	// Label is a label name (user labels) or id (system labels). Empty: any.
	Label string
	// Unread and Trashed, when set, keep messages in that state.
	Unread, Trashed *bool
	// Limit is the page size: 1 to 500. Zero: 50.
	Limit int
	// Cursor is the previous page's next.
	Cursor string
}

// MaxMessagesPage is the largest page of Messages.
const MaxMessagesPage = 500

// Messages lists an account's messages, newest first. An unknown account
// is store.ErrNotFound; a label no message can have gives an empty page.
func (p *Pipeline) Messages(accountID string, q MessageQuery) (msgs []MessageView, next string, err error) {
	if q.Limit < 0 || q.Limit > MaxMessagesPage {
		return nil, "", &InvalidError{Field: "limit", Message: fmt.Sprintf("limit must be between 1 and %d", MaxMessagesPage)}
	}
	msgs = []MessageView{}
	err = p.db.View(func(tx *store.Tx) error {
		if _, err := tx.AccountGet(accountID); err != nil {
			return err
		}
		names, err := tx.Labels(accountID)
		if err != nil {
			return err
		}
		f := store.MessageFilter{Unread: q.Unread, Trashed: q.Trashed, Limit: q.Limit, Cursor: q.Cursor}
		if q.Label != "" {
			f.LabelID = labelID(names, q.Label)
		}
		page, n, err := tx.Messages(accountID, f)
		if err != nil {
			return err
		}
		for _, m := range page {
			msgs = append(msgs, viewMessage(m, names))
		}
		next = n
		return nil
	})
	return msgs, next, err
}

// labelID finds the id of a label given by name (any case) or id.
func labelID(names map[string]string, label string) string {
	if _, ok := names[label]; ok {
		return label
	}
	for id, n := range names {
		if strings.EqualFold(n, label) {
			return id
		}
	}
	return label
}

// Message returns one listed message; store.ErrNotFound when the account
// or the message is unknown (or deleted).
func (p *Pipeline) Message(accountID, id string) (MessageView, error) {
	var v MessageView
	err := p.db.View(func(tx *store.Tx) error {
		m, err := tx.MessageGet(accountID, id)
		if err != nil {
			return err
		}
		if !m.Visible() {
			return fmt.Errorf("gmail: message %s: %w", id, store.ErrNotFound)
		}
		names, err := tx.Labels(accountID)
		if err != nil {
			return err
		}
		v = viewMessage(m, names)
		return nil
	})
	return v, err
}
