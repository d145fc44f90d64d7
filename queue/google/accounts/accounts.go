// Package accounts is the Google-accounts service: each connected
// account's stored token (sealed at rest), its token source (refreshed
// tokens saved, a revoked grant putting the account in error) and the
// Gmail and Sheets clients that share it, made once per account and kept.
// The Gmail, rules and Sheets pipelines all reach Google through it.
package accounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"mailroom/internal/lifecycle"
	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

var (
	// ErrAccountGone is wrapped by the errors of an account that was
	// deleted.
	ErrAccountGone = errors.New("accounts: the account was deleted")
	// ErrLinkUnknown: no connect link has that token or state (never made,
	// or swept long after it expired). There is nowhere to send the
	// browser.
	ErrLinkUnknown = errors.New("accounts: the connect link is not valid")
	// ErrOAuthUnavailable: no OAuth client is configured.
	ErrOAuthUnavailable = errors.New("accounts: no Google OAuth client is configured (MAILROOM_GOOGLE_CLIENT_ID and _SECRET)")
	// ErrUnknownUser: a connect link's user does not exist.
	ErrUnknownUser = errors.New("accounts: no user has that id")
)

// ReauthRequired is the statusReason of an account whose grant Google
// refused (invalid_grant): a connect link for its address brings it back,
// its mirror kept.
const ReauthRequired = "reauth_required"

// ReauthText says what ReauthRequired means, for pages.
const ReauthText = "Google refused mailroom's access to this mailbox (the access was revoked or has expired). Connect the account again: send its owner a connect link (Accounts page); its mail and settings are kept, and syncing resumes where it stopped."

// Config tunes the service. Zero values take the defaults named.
type Config struct {
	// Logger; default: discard.
	Logger *slog.Logger
	// Now; default: time.Now.
	Now func() time.Time
}

// Service holds the accounts' connections to Google.
type Service struct {
	db     *store.DB
	google *google.Client
	log    *slog.Logger
	now    func() time.Time

	mu    sync.Mutex
	conns map[string]*conn
}

// conn is an account's token source and the adapters that share it.
type conn struct {
	ts     *google.TokenSource
	gmail  *google.Gmail
	sheets *google.Sheets
}

// Deps are what the service is built over.
type Deps struct {
	// DB is the store. Required.
	DB *store.DB
	// Google is the Google client every account's adapters share.
	// Required.
	Google *google.Client
}

// New builds the service over its deps. It has no task types of its own
// and no loops: Register and Services have nothing to add.
func New(cfg Config, deps Deps) (*Service, error) {
	if deps.DB == nil || deps.Google == nil {
		return nil, errors.New("accounts: New needs Deps.DB and Deps.Google")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{db: deps.DB, google: deps.Google, log: cfg.Logger.With("component", "accounts"), now: cfg.Now, conns: map[string]*conn{}}, nil
}

// Register adds nothing to the task table: the service has no task types
// (the pipelines' tasks call it).
func (s *Service) Register(*queue.Table) error { return nil }

// Services lists none: the service has no loops (tokens refresh when used).
func (s *Service) Services() []lifecycle.Service { return nil }

// Google is the Google client (OAuth consent and code exchange).
func (s *Service) Google() *google.Client { return s.google }

// conn returns the account's token source and adapters, made once per
// account and kept (with the access token) until the account is
// reconnected or deleted (Forget). A refreshed token is saved; a revoked
// grant puts the account in error.
func (s *Service) conn(ctx context.Context, acc store.Account) (*conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.conns[acc.ID]; c != nil {
		return c, nil
	}
	tok, err := s.Token(acc)
	if err != nil {
		return nil, err
	}
	id := acc.ID
	ts := s.google.TokenSource(tok, func(t google.Token) error { return s.saveToken(id, t) })
	refresh := tok.RefreshToken
	ts.OnRevoked(func(err error) { s.failAccount(id, refresh, err) })
	g, err := s.google.Gmail(ctx, acc.ID, ts)
	if err != nil {
		return nil, err
	}
	if b := s.google.Budget(); b != nil && acc.HistoryID != 0 {
		// The account spent before this process opened it (a restart, perhaps
		// after a crash that took the embedded broker's budget with it).
		if err := b.Resume(ctx, acc.ID); err != nil {
			return nil, err
		}
	}
	c := &conn{ts: ts, gmail: g}
	s.conns[acc.ID] = c
	return c, nil
}

// Client returns the Gmail adapter of acc as loaded by the caller.
func (s *Service) Client(ctx context.Context, acc store.Account) (*google.Gmail, error) {
	c, err := s.conn(ctx, acc)
	if err != nil {
		return nil, err
	}
	return c.gmail, nil
}

// usable loads an account: an unknown account is an error wrapping
// ErrAccountGone and store.ErrNotFound, one in error or disconnected wraps
// google.ErrRevoked (both permanent).
func (s *Service) usable(accountID string) (store.Account, error) {
	var acc store.Account
	err := s.db.View(func(tx *store.Tx) (err error) {
		acc, err = tx.AccountGet(accountID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return acc, &google.Permanent{Err: fmt.Errorf("%w: %w", ErrAccountGone, err)}
	}
	if err != nil {
		return acc, err
	}
	if acc.Status != store.AccountSyncing && acc.Status != store.AccountReady {
		return acc, &google.Permanent{Err: fmt.Errorf("gmail: account %s is %s: %w", acc.ID, acc.Status, google.ErrRevoked)}
	}
	return acc, nil
}

// Gmail returns the Gmail API of a connected account.
func (s *Service) Gmail(ctx context.Context, accountID string) (*google.Gmail, error) {
	acc, err := s.usable(accountID)
	if err != nil {
		return nil, err
	}
	return s.Client(ctx, acc)
}

// Sheets returns the Sheets API of a connected account, sharing its token
// with its Gmail API (one refresh, one saved token).
func (s *Service) Sheets(ctx context.Context, accountID string) (*google.Sheets, error) {
	acc, err := s.usable(accountID)
	if err != nil {
		return nil, err
	}
	c, err := s.conn(ctx, acc)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.sheets == nil {
		if c.sheets, err = s.google.Sheets(ctx, c.ts); err != nil {
			return nil, err
		}
	}
	return c.sheets, nil
}

// Forget drops the account's connection (it was reconnected or deleted).
func (s *Service) Forget(accountID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, accountID)
}

// Token unseals the account's stored token.
func (s *Service) Token(acc store.Account) (google.Token, error) {
	var tok google.Token
	if len(acc.Token) == 0 {
		return tok, &google.Permanent{Err: fmt.Errorf("gmail: account %s: %w: no token stored", acc.ID, google.ErrRevoked)}
	}
	plain, err := s.db.Unseal(acc.Token, acc.ID)
	if err != nil {
		return tok, &google.Permanent{Err: fmt.Errorf("gmail: account %s: %w", acc.ID, err)}
	}
	if err := json.Unmarshal(plain, &tok); err != nil {
		return tok, &google.Permanent{Err: fmt.Errorf("gmail: account %s: decode token: %w", acc.ID, err)}
	}
	return tok, nil
}

// Seal encrypts a token for storing in the account accountID.
func (s *Service) Seal(accountID string, tok google.Token) ([]byte, error) {
	raw, err := json.Marshal(tok)
	if err != nil {
		return nil, err
	}
	return s.db.Seal(raw, accountID), nil
}

// saveToken stores a refreshed token (the token source calls it).
func (s *Service) saveToken(accountID string, tok google.Token) error {
	sealed, err := s.Seal(accountID, tok)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(accountID)
		if errors.Is(err, store.ErrNotFound) {
			return nil // deleted meanwhile
		}
		if err != nil {
			return err
		}
		acc.Token = sealed
		return tx.AccountPut(acc)
	})
	if err != nil {
		return fmt.Errorf("gmail: save token of account %s: %w", accountID, err)
	}
	s.log.Debug("access token refreshed and saved", "account_id", accountID)
	return nil
}

// failAccount marks an account as needing the user (its grant was
// revoked): status error with what to do. It does nothing when the account
// holds another refresh token by now (it was reconnected meanwhile).
func (s *Service) failAccount(accountID, refresh string, cause error) {
	now := s.now().UTC()
	err := s.db.Update(func(tx *store.Tx) error {
		acc, err := tx.AccountGet(accountID)
		if err != nil {
			return err
		}
		if tok, err := s.Token(acc); err == nil && tok.RefreshToken != refresh {
			return nil
		}
		acc.Status, acc.StatusReason, acc.FullSyncDead = store.AccountError, ReauthRequired, false
		acc.LastError, acc.LastErrorAt = cause.Error(), now
		return tx.AccountPut(acc)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("mark account as failed", "account_id", accountID, "err", err)
	}
	s.Forget(accountID)
	s.log.Warn("account access revoked; it needs reconnecting", "account_id", accountID, "err", cause)
}
