package accounts

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"golang.org/x/oauth2"

	"mailroom/queue/google"
	"mailroom/store"
)

// Connect links: a round trip through Google's consent that connects a
// Gmail account to a user, for the API's connect links and the admin
// page's own connect alike. A link may be looked at (CheckLink: a page and
// a chat app's preview use nothing up) and followed (OpenLink sends the
// browser to Google with a PKCE S256 challenge and an OAuth state bound to
// the link; following it again replaces both) until it is finished once
// (FinishLink takes the state, exchanges the code with the verifier and
// reads the mailbox's address). Links live in bbolt (verifiers sealed), so
// a restart between the two does not lose them.

const (
	// LinkTTL is how long a connect link may be followed.
	LinkTTL = 15 * time.Minute
	// ConsentTTL is how long Google's consent may take once the link is
	// followed.
	ConsentTTL = 10 * time.Minute
	// linkKeep is how long a link is kept after it expires, so that using
	// it again answers expired_link rather than an unknown link.
	linkKeep = 24 * time.Hour
	// sweepBatch bounds the expired links deleted per new link.
	sweepBatch = 200
)

// Link outcomes, as the API's redirect names them (error=CODE).
const (
	LinkConnected   = "connected"
	LinkDenied      = "denied"
	LinkExpired     = "expired_link"
	LinkWrongUser   = "wrong_user"
	LinkGoogleError = "google_error"
)

// LinkError is a link that cannot connect: Code is one of the Link*
// outcomes and Link the link (to return to its RedirectURI, or to the
// admin page for an admin connect).
type LinkError struct {
	Code string
	Link store.ConnectLink
	Err  error
}

func (e *LinkError) Error() string {
	if e.Err != nil {
		return "accounts: connect link " + e.Link.ID + ": " + e.Code + ": " + e.Err.Error()
	}
	return "accounts: connect link " + e.Link.ID + ": " + e.Code
}

func (e *LinkError) Unwrap() error { return e.Err }

// LinkRequest makes a link.
type LinkRequest struct {
	UserID string
	// RedirectURI, State and Email: where the browser returns (an API
	// link), the caller's state echoed there, and the address expected
	// (login_hint; another address ends in wrong_user).
	RedirectURI, State, Email string
	// Session is a secret of the admin session starting an admin-page
	// connect (its CSRF token): only that session can finish it.
	Session string
}

// Link is a made link: its secret token (the URL's last segment) and when
// it expires.
type Link struct {
	ID        string
	Token     string
	ExpiresAt time.Time
}

// OAuthConfigured reports whether accounts can be connected through
// Google's consent.
func (s *Service) OAuthConfigured() bool { return s.google.OAuthConfigured() }

// CreateLink stores a new link for the user (expired links are swept).
func (s *Service) CreateLink(r LinkRequest) (Link, error) {
	if !s.OAuthConfigured() {
		return Link{}, ErrOAuthUnavailable
	}
	now := s.now().UTC()
	token := "cl_" + rand.Text() + rand.Text()
	l := store.ConnectLink{
		Key: store.ConnectLinkKey(token), ID: store.NewID(), UserID: r.UserID,
		RedirectURI: r.RedirectURI, State: r.State, Email: strings.TrimSpace(r.Email),
		CreatedAt: now, ExpiresAt: now.Add(LinkTTL),
	}
	if r.Session != "" {
		l.Session = sessionHash(r.Session)
	}
	err := s.db.Update(func(tx *store.Tx) error {
		if _, err := tx.UserGet(r.UserID); errors.Is(err, store.ErrNotFound) {
			return ErrUnknownUser
		} else if err != nil {
			return err
		}
		if _, err := tx.ConnectLinksSweep(now.Add(-linkKeep), sweepBatch); err != nil {
			return err
		}
		return tx.ConnectLinkPut(l)
	})
	if err != nil {
		return Link{}, fmt.Errorf("accounts: create connect link: %w", err)
	}
	s.log.Info("connect link made", "link_id", l.ID, "user_id", l.UserID, "admin", l.Session != "")
	return Link{ID: l.ID, Token: token, ExpiresAt: l.ExpiresAt}, nil
}

func sessionHash(session string) string {
	sum := sha256.Sum256([]byte(session))
	return hex.EncodeToString(sum[:])
}

// CheckLink returns a link that can still be followed, changing nothing
// (a page showing it, a link preview): a used or expired link is a
// *LinkError LinkExpired, an unknown token ErrLinkUnknown.
func (s *Service) CheckLink(token string) (store.ConnectLink, error) {
	if !s.OAuthConfigured() {
		return store.ConnectLink{}, ErrOAuthUnavailable
	}
	var l store.ConnectLink
	err := s.db.View(func(tx *store.Tx) error {
		var err error
		l, err = s.usableLink(tx, token)
		return err
	})
	return l, err
}

// usableLink is the token's link when it can be followed now.
func (s *Service) usableLink(tx *store.Tx, token string) (store.ConnectLink, error) {
	l, err := tx.ConnectLinkGet(store.ConnectLinkKey(token))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return l, ErrLinkUnknown
	case err != nil:
		return l, err
	case !l.FinishedAt.IsZero():
		return l, &LinkError{Code: LinkExpired, Link: l, Err: errors.New("the link was already used")}
	case !s.now().Before(l.ExpiresAt):
		return l, &LinkError{Code: LinkExpired, Link: l, Err: errors.New("the link expired")}
	}
	return l, nil
}

// OpenLink follows a link that CheckLink would return: it returns Google's
// consent URL (PKCE S256, offline access, login_hint, a fresh OAuth state
// bound to the link in place of an earlier one). The link stays usable
// until its callback completes (FinishLink).
func (s *Service) OpenLink(token string) (string, error) {
	if !s.OAuthConfigured() {
		return "", ErrOAuthUnavailable
	}
	state, verifier := rand.Text(), oauth2.GenerateVerifier()
	var l store.ConnectLink
	err := s.db.Update(func(tx *store.Tx) error {
		var err error
		if l, err = s.usableLink(tx, token); err != nil {
			return err
		}
		l.OpenedAt, l.Verifier = s.now().UTC(), s.db.Seal([]byte(verifier), l.ID)
		if err := tx.ConnectLinkBindState(state, &l); err != nil {
			return err
		}
		return tx.ConnectLinkPut(l)
	})
	if err != nil {
		return "", err
	}
	return s.google.ConsentURL(state, l.Email, verifier), nil
}

// Callback is what Google's redirect brought back.
type Callback struct {
	State, Code string
	// Error is Google's error parameter (access_denied, ...); empty on
	// success.
	Error string
	// Session is the admin session's secret, when the browser has one.
	Session string
}

// Finished is a consent that went through: the account's address as Gmail
// reports it and its token, for the Gmail pipeline to connect.
type Finished struct {
	Link  store.ConnectLink
	Email string
	Token google.Token
}

// FinishLink takes the state Google sent back (once) and, when the consent
// went through, exchanges the code with the link's PKCE verifier and reads
// the mailbox's address. Errors are *LinkError (the link is known) or
// ErrLinkUnknown. Record the outcome with LinkDone.
func (s *Service) FinishLink(ctx context.Context, cb Callback) (Finished, error) {
	if !s.OAuthConfigured() {
		return Finished{}, ErrOAuthUnavailable
	}
	if cb.State == "" {
		return Finished{}, ErrLinkUnknown
	}
	now := s.now().UTC()
	var l store.ConnectLink
	err := s.db.Update(func(tx *store.Tx) error {
		var err error
		if l, err = tx.ConnectLinkTakeState(cb.State); errors.Is(err, store.ErrNotFound) {
			return ErrLinkUnknown
		} else if err != nil {
			return err
		}
		if !sameSession(l, cb.Session) {
			// Not this browser's link: as if unknown, and the error
			// rolls the take back, so the admin's own callback still
			// finishes it.
			s.log.Warn("OAuth callback from another session than the one that started it; refused", "link_id", l.ID)
			return ErrLinkUnknown
		}
		if !l.FinishedAt.IsZero() {
			return &LinkError{Code: LinkExpired, Link: l, Err: errors.New("the link was already used")}
		}
		l.FinishedAt = now
		return tx.ConnectLinkPut(l)
	})
	if err != nil {
		return Finished{}, err
	}
	fail := func(code string, err error) (Finished, error) {
		s.LinkDone(l, code, "")
		return Finished{}, &LinkError{Code: code, Link: l, Err: err}
	}
	switch {
	case cb.Error == "access_denied":
		return fail(LinkDenied, errors.New("consent was refused or the sign-in cancelled"))
	case cb.Error != "":
		return fail(LinkGoogleError, fmt.Errorf("Google answered error=%.64q", cb.Error))
	case !now.Before(l.OpenedAt.Add(ConsentTTL)):
		return fail(LinkExpired, errors.New("the consent took too long"))
	case cb.Code == "":
		return fail(LinkGoogleError, errors.New("Google sent no code"))
	}
	verifier, err := s.db.Unseal(l.Verifier, l.ID)
	if err != nil {
		return fail(LinkGoogleError, fmt.Errorf("unseal the PKCE verifier: %w", err))
	}
	tok, err := s.google.ExchangeVerified(ctx, cb.Code, string(verifier))
	if err != nil {
		return fail(LinkGoogleError, err)
	}
	if tok.RefreshToken == "" {
		return fail(LinkGoogleError, errors.New("Google gave no refresh token; remove mailroom's access in the Google account and connect again"))
	}
	// The account is not known yet: its one profile call spends from a
	// budget of its own.
	gm, err := s.google.Gmail(ctx, "oauth-connect", s.google.TokenSource(tok, nil))
	if err != nil {
		return fail(LinkGoogleError, err)
	}
	email, _, err := gm.Profile(google.WithPriority(ctx, google.PriorityLive))
	if err != nil {
		return fail(LinkGoogleError, fmt.Errorf("read the mailbox's address: %w", err))
	}
	if l.Email != "" && !strings.EqualFold(strings.TrimSpace(email), l.Email) {
		s.dropGrant(ctx, l, email, tok)
		return fail(LinkWrongUser, fmt.Errorf("Google signed in %s, the link asked for %s", email, l.Email))
	}
	return Finished{Link: l, Email: email, Token: tok}, nil
}

// sameSession reports whether a callback with session may finish l: any
// callback for an API link, only the starting session's for an admin
// connect.
func sameSession(l store.ConnectLink, session string) bool {
	if l.Session == "" {
		return true
	}
	got := sessionHash(session)
	return session != "" && subtle.ConstantTimeCompare([]byte(got), []byte(l.Session)) == 1
}

// dropGrant revokes at Google the grant a wrong_user consent gave, so that
// Google does not keep an access nobody uses. An address already connected
// here keeps it: Google's revocation ends the app's grant for the Google
// account, which would cut that account off too. A failure is logged (the
// person can remove the access in the Google account).
func (s *Service) dropGrant(ctx context.Context, l store.ConnectLink, email string, tok google.Token) {
	var connected bool
	_ = s.db.View(func(tx *store.Tx) error {
		connected = len(tx.AccountIDsByEmail(email)) > 0
		return nil
	})
	if connected {
		s.log.Info("wrong_user: the address signed in is connected here; its grant is kept", "link_id", l.ID)
		return
	}
	if err := s.google.Revoke(ctx, tok); err != nil {
		s.log.Warn("wrong_user: Google did not revoke the grant it gave; the person can remove mailroom's access in the Google account", "link_id", l.ID, "revoke_url", s.google.RevokeURL(), "err", err)
		return
	}
	s.log.Info("wrong_user: the grant Google gave is revoked", "link_id", l.ID)
}

// LinkDone records a finished link's outcome (for the logs and the
// record; the link is used either way).
func (s *Service) LinkDone(l store.ConnectLink, result, accountID string) {
	err := s.db.Update(func(tx *store.Tx) error {
		cur, err := tx.ConnectLinkGet(l.Key)
		if err != nil {
			return err
		}
		cur.Result, cur.AccountID = result, accountID
		return tx.ConnectLinkPut(cur)
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		s.log.Error("record the outcome of a connect link", "link_id", l.ID, "err", err)
	}
	s.log.Info("connect link finished", "link_id", l.ID, "user_id", l.UserID, "result", result, "account_id", accountID)
}
