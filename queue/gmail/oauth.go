package gmail

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"sync"
	"time"

	"golang.org/x/oauth2"

	"mailroom/queue/google"
	"mailroom/store"
)

// ---- OAuth consent flow ----

// OAuthStateTTL is how long a consent round trip may take.
const OAuthStateTTL = 10 * time.Minute

// maxPendingConsents bounds the consents waiting for their callback; past
// it the one expiring soonest is dropped.
const maxPendingConsents = 1000

// pendingConsent is a consent round trip started and not yet finished: the
// state names it, once.
type pendingConsent struct {
	userID   string
	session  [sha256.Size]byte // hash of the admin session that started it
	verifier string            // PKCE code verifier (S256 challenge sent)
	expires  time.Time
}

// consents are the pending consent round trips by state. They live in
// memory: a restart asks the admin to start again.
type consents struct {
	mu      sync.Mutex
	pending map[string]pendingConsent
}

func (cs *consents) put(state string, pc pendingConsent, now time.Time) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	soonest := ""
	for k, v := range cs.pending {
		if !now.Before(v.expires) {
			delete(cs.pending, k)
		} else if soonest == "" || v.expires.Before(cs.pending[soonest].expires) {
			soonest = k
		}
	}
	if len(cs.pending) >= maxPendingConsents {
		delete(cs.pending, soonest)
	}
	cs.pending[state] = pc
}

// take removes and returns the consent of state: a state is used once,
// whatever the callback's outcome.
func (cs *consents) take(state string) (pendingConsent, bool) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	pc, ok := cs.pending[state]
	delete(cs.pending, state)
	return pc, ok
}

// OAuthConfigured reports whether accounts can be connected through
// Google's consent page.
func (p *Pipeline) OAuthConfigured() bool { return p.google.OAuthConfigured() }

// OAuthStart returns the consent page URL that connects an account to the
// user. session identifies the admin session starting it (a secret of that
// session, such as its CSRF token): only the same session can finish it.
// The URL's state is random, used once, and expires after OAuthStateTTL;
// the consent asks for a PKCE (S256) challenge whose verifier never leaves
// mailroom until the code is exchanged.
func (p *Pipeline) OAuthStart(userID, loginHint, session string) (string, error) {
	if !p.OAuthConfigured() {
		return "", ErrOAuthUnavailable
	}
	if session == "" {
		return "", &InvalidError{Field: "state", Message: "sign in to the admin page first"}
	}
	err := p.db.View(func(tx *store.Tx) error { _, err := tx.UserGet(userID); return err })
	if errors.Is(err, store.ErrNotFound) {
		return "", &InvalidError{Field: "userId", Message: "no user has that id"}
	}
	if err != nil {
		return "", err
	}
	state := rand.Text()
	verifier := oauth2.GenerateVerifier()
	now := p.cfg.Now()
	p.consents.put(state, pendingConsent{userID: userID, session: sha256.Sum256([]byte(session)), verifier: verifier, expires: now.Add(OAuthStateTTL)}, now)
	return p.google.ConsentURL(state, loginHint, verifier), nil
}

// errBadState is the answer to a state that is unknown, used, or another
// session's.
var errBadState = &InvalidError{Field: "state", Message: "the sign-in state is not valid or was already used; start again"}

// OAuthCallback finishes the consent flow started by OAuthStart in the same
// admin session: the code is exchanged with the PKCE verifier, the
// mailbox's address read from Gmail, and the account connected.
func (p *Pipeline) OAuthCallback(ctx context.Context, code, state, session string) (store.Account, error) {
	if !p.OAuthConfigured() {
		return store.Account{}, ErrOAuthUnavailable
	}
	pc, ok := p.consents.take(state)
	if !ok || state == "" {
		return store.Account{}, errBadState
	}
	got := sha256.Sum256([]byte(session))
	if session == "" || subtle.ConstantTimeCompare(got[:], pc.session[:]) != 1 {
		p.log.Warn("OAuth callback from another session than the one that started it; refused")
		return store.Account{}, errBadState
	}
	if !p.cfg.Now().Before(pc.expires) {
		return store.Account{}, &InvalidError{Field: "state", Message: "the sign-in took too long; start again"}
	}
	if code == "" {
		return store.Account{}, &InvalidError{Field: "code", Message: "Google did not send a code"}
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.GoogleTimeout)
	defer cancel()
	tok, err := p.google.ExchangeVerified(ctx, code, pc.verifier)
	if err != nil {
		return store.Account{}, err
	}
	if tok.RefreshToken == "" {
		return store.Account{}, &InvalidError{Field: "code", Message: "Google gave no refresh token; remove mailroom's access in your Google account and connect again"}
	}
	// The account is not known yet: its one profile call spends from a
	// budget of its own.
	gm, err := p.google.Gmail(ctx, "oauth-connect", p.google.TokenSource(tok, nil))
	if err != nil {
		return store.Account{}, err
	}
	email, _, err := gm.Profile(google.WithPriority(ctx, google.PriorityLive))
	if err != nil {
		return store.Account{}, err
	}
	acc, _, err := p.Connect(ctx, ConnectRequest{UserID: pc.userID, Email: email, Token: tok})
	return acc, err
}
