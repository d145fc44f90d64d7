package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Token is an account's OAuth token as mailroom stores it (sealed).
type Token struct {
	AccessToken  string    `json:"accessToken,omitempty"`
	TokenType    string    `json:"tokenType,omitempty"`
	RefreshToken string    `json:"refreshToken"`
	Expiry       time.Time `json:"expiry,omitzero"`
}

func tokenFrom(t *oauth2.Token) Token {
	return Token{AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry}
}

func (t Token) oauth() *oauth2.Token {
	return &oauth2.Token{AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry}
}

// TokenSaver stores a refreshed token. It runs outside any transaction of
// the caller's, during an API call.
type TokenSaver func(Token) error

// TokenSource is the token source of one account: it keeps the access
// token, refreshes it when it expires (or when Invalidate says the server
// refused it) within the client's RefreshTimeout, and saves every new token
// through its saver. x/oauth2 has no save hook; this is it.
type TokenSource struct {
	c    *Client
	save TokenSaver

	mu      sync.Mutex
	tok     *oauth2.Token
	revoked func(error)
}

var _ oauth2.TokenSource = (*TokenSource)(nil)

// TokenSource returns the token source of an account whose stored token is
// tok. save may be nil.
func (c *Client) TokenSource(tok Token, save TokenSaver) *TokenSource {
	return &TokenSource{c: c, save: save, tok: tok.oauth()}
}

// Token returns a valid access token, refreshing it when needed. A revoked
// grant surfaces as an *oauth2.RetrieveError (invalid_grant); Classify maps
// it to a permanent ErrRevoked.
func (s *TokenSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok.Valid() {
		return s.tok, nil
	}
	if s.tok.RefreshToken == "" {
		return nil, fmt.Errorf("google: %w: no refresh token", ErrRevoked)
	}
	if s.c.cfg.ClientID == "" && s.c.oauth.Endpoint.TokenURL == googleTokenURL {
		return nil, fmt.Errorf("google: refresh token: %w", ErrNoOAuthClient)
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), oauth2.HTTPClient, s.c.hc), s.c.cfg.RefreshTimeout)
	defer cancel()
	t, err := s.c.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: s.tok.RefreshToken}).Token()
	if err != nil {
		err = fmt.Errorf("google: refresh token: %w", err)
		if errors.Is(Classify(err), ErrRevoked) && s.revoked != nil {
			s.revoked(err)
		}
		return nil, err
	}
	if t.RefreshToken == "" {
		t.RefreshToken = s.tok.RefreshToken
	}
	if s.save != nil {
		if err := s.save(tokenFrom(t)); err != nil {
			return nil, fmt.Errorf("google: save refreshed token: %w", err)
		}
	}
	s.tok = t
	return t, nil
}

// Invalidate forgets the access token, so the next call refreshes it (after
// the server refused it with 401 before its expiry).
func (s *TokenSource) Invalidate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tok = &oauth2.Token{RefreshToken: s.tok.RefreshToken}
}

// OnRevoked sets fn to be called when Google refuses the account's grant
// (invalid_grant at refresh, or 401 right after a refresh), so that the
// owner can mark the account. Set it before the first call.
func (s *TokenSource) OnRevoked(fn func(error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked = fn
}

func (s *TokenSource) reportRevoked(err error) {
	s.mu.Lock()
	fn := s.revoked
	s.mu.Unlock()
	if fn != nil {
		fn(err)
	}
}

// Current returns the token as the source holds it now.
func (s *TokenSource) Current() Token {
	s.mu.Lock()
	defer s.mu.Unlock()
	return tokenFrom(s.tok)
}

// httpClient returns an *http.Client that authorizes requests with ts over
// the client's transport and timeout.
func (c *Client) httpClient(ts oauth2.TokenSource) *http.Client {
	base := c.hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{
		Transport: &oauth2.Transport{Source: ts, Base: base},
		Timeout:   c.hc.Timeout,
		Jar:       c.hc.Jar,
	}
}
