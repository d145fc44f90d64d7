package google

import (
	"context"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// googleCertsURL is Google's JWKS of the keys that sign its OIDC tokens.
const googleCertsURL = "https://www.googleapis.com/oauth2/v3/certs"

// Limits of the push token verifier.
const (
	// maxPushTokenLen bounds a token before anything is decoded (Google's
	// are about 1 KiB).
	maxPushTokenLen = 8 << 10
	// pushClockSkew is how far iat and nbf may lie in the future, and exp
	// in the past.
	pushClockSkew = time.Minute
	// maxJWKSBody bounds the JWKS answer.
	maxJWKSBody = 1 << 20
	// Keys are cached for the JWKS answer's max-age, within these bounds
	// (the default when it gives none).
	minKeysTTL, defaultKeysTTL, maxKeysTTL = time.Minute, 5 * time.Minute, 24 * time.Hour
	// keysRetryAfter is how long a failed JWKS fetch is not repeated,
	// counted from the fetch's end.
	keysRetryAfter = 5 * time.Second
	// keysFetchTimeout bounds one JWKS fetch, whatever the HTTP client's
	// own timeout.
	keysFetchTimeout = 10 * time.Second
	// minRSABits is the smallest signing key accepted.
	minRSABits = 2048
)

// Push token verification errors.
var (
	// ErrTokenInvalid: the push token is missing or cannot be verified
	// (malformed, not RS256, bad signature, unknown key, expired, issued
	// in the future, wrong issuer): 401.
	ErrTokenInvalid = errors.New("push token missing or not verifiable")
	// ErrTokenForbidden: the token verifies but is not for us (audience,
	// email, unverified email): 403.
	ErrTokenForbidden = errors.New("push token not accepted")
)

// PushVerifierConfig configures a PushVerifier.
type PushVerifierConfig struct {
	// CertsURL is the JWKS of the signing keys, MAILROOM_GOOGLE_CERTS_URL.
	// Empty: Google's. It is the only URL the verifier ever requests.
	CertsURL string
	// Audience is the required aud claim, MAILROOM_PUSH_AUDIENCE. Required.
	Audience string
	// ServiceAccount is the required email claim,
	// MAILROOM_PUSH_SERVICE_ACCOUNT. Required: without it any Google
	// service account could mint a token for the (public) audience.
	ServiceAccount string
	// HTTPClient fetches the keys. Nil: a client with a 10 s timeout.
	HTTPClient *http.Client
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
}

// PushVerifier checks the OIDC token Pub/Sub puts on a push request. It
// refuses before any parsing beyond the header what it does not verify:
// only RS256 tokens signed by a key of the configured JWKS are checked,
// and any other alg, a missing or unknown kid, or a token over 8 KiB is a
// 401 without an outbound request. Then the signature, exp, iat and nbf
// (a minute of skew), the issuer, the audience, the email and
// email_verified. The JWKS is fetched from CertsURL only, and cached for
// its max-age.
type PushVerifier struct {
	cfg PushVerifierConfig
	hc  *http.Client
	now func() time.Time

	mu        sync.Mutex
	keys      map[string]*rsa.PublicKey
	expires   time.Time // keys are fresh until then
	failedAt  time.Time // end of the last failed fetch
	failedErr error
	fetching  chan struct{} // non-nil while a fetch runs; closed when it ends
}

// NewPushVerifier returns a verifier for cfg. It makes no request: the
// keys are fetched on the first token that passes the header checks.
func NewPushVerifier(_ context.Context, cfg PushVerifierConfig) (*PushVerifier, error) {
	if cfg.Audience == "" {
		return nil, errors.New("google: push verifier needs an audience")
	}
	if cfg.ServiceAccount == "" {
		return nil, errors.New("google: push verifier needs a service account (any Google service account can mint a token for an audience)")
	}
	if cfg.CertsURL == "" {
		cfg.CertsURL = googleCertsURL
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &PushVerifier{cfg: cfg, hc: hc, now: now}, nil
}

type jwtHeader struct {
	Alg  string          `json:"alg"`
	Kid  string          `json:"kid"`
	Crit json.RawMessage `json:"crit"`
}

type jwtClaims struct {
	Iss           string   `json:"iss"`
	Aud           any      `json:"aud"`
	Email         string   `json:"email"`
	EmailVerified any      `json:"email_verified"`
	Exp           *float64 `json:"exp"`
	Iat           *float64 `json:"iat"`
	Nbf           *float64 `json:"nbf"`
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTokenInvalid, fmt.Sprintf(format, args...))
}

// Verify checks a raw token (without "Bearer "). It returns nil, or an
// error wrapping ErrTokenInvalid or ErrTokenForbidden.
func (p *PushVerifier) Verify(ctx context.Context, token string) error {
	if token == "" {
		return invalid("no token")
	}
	if len(token) > maxPushTokenLen {
		return invalid("token longer than %d bytes", maxPushTokenLen)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return invalid("not a signed JWT (want 3 parts, got %d)", len(parts))
	}
	rawHeader, err := base64.RawURLEncoding.DecodeString(parts[0])
	if err != nil {
		return invalid("header is not base64url")
	}
	var h jwtHeader
	if err := json.Unmarshal(rawHeader, &h); err != nil {
		return invalid("header is not a JSON object")
	}
	if h.Alg != "RS256" {
		return invalid("alg %.20q is not RS256", h.Alg)
	}
	if h.Kid == "" {
		return invalid("no kid")
	}
	if h.Crit != nil {
		return invalid("critical header extensions are not supported")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(sig) == 0 {
		return invalid("signature is not base64url")
	}
	key, err := p.key(ctx, h.Kid)
	if err != nil {
		return err
	}
	if len(sig) != key.Size() {
		return invalid("signature is %d bytes, want %d", len(sig), key.Size())
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig); err != nil {
		return invalid("bad signature")
	}
	rawClaims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return invalid("payload is not base64url")
	}
	var c jwtClaims
	if err := json.Unmarshal(rawClaims, &c); err != nil {
		return invalid("payload is not a JSON object")
	}
	now := p.now()
	switch {
	case c.Exp == nil:
		return invalid("no exp")
	case c.Iat == nil:
		return invalid("no iat")
	case now.After(unixTime(*c.Exp).Add(pushClockSkew)):
		return invalid("expired")
	case unixTime(*c.Iat).After(now.Add(pushClockSkew)):
		return invalid("issued in the future")
	case c.Nbf != nil && unixTime(*c.Nbf).After(now.Add(pushClockSkew)):
		return invalid("not valid yet")
	}
	if c.Iss != "accounts.google.com" && c.Iss != "https://accounts.google.com" {
		return invalid("issuer %.60q", c.Iss)
	}
	if aud, _ := c.Aud.(string); aud != p.cfg.Audience {
		return fmt.Errorf("%w: audience %.100q", ErrTokenForbidden, fmt.Sprint(c.Aud))
	}
	if c.Email != p.cfg.ServiceAccount {
		return fmt.Errorf("%w: email %.100q", ErrTokenForbidden, c.Email)
	}
	if verified, _ := c.EmailVerified.(bool); !verified {
		return fmt.Errorf("%w: email not verified", ErrTokenForbidden)
	}
	return nil
}

func unixTime(f float64) time.Time {
	// Clamp so a huge value cannot overflow into the past.
	const maxUnix = 1 << 40
	return time.Unix(int64(max(min(f, maxUnix), -maxUnix)), 0)
}

// key returns the JWKS key kid, fetching the JWKS when the cache is stale.
// An unknown kid with fresh keys is refused without a fetch.
//
// One fetch runs at a time, outside the lock, under its own timeout (not
// the caller's context, so a caller that gives up does not fail the fetch
// for the others). Callers that need it wait for its end or their own
// context, whichever comes first. A failed fetch is stamped when it ends,
// and is not repeated for keysRetryAfter: a key server that hangs costs
// one fetch timeout per back-off, never one per caller.
func (p *PushVerifier) key(ctx context.Context, kid string) (*rsa.PublicKey, error) {
	for {
		p.mu.Lock()
		now := p.now()
		stale := p.keys == nil || !now.Before(p.expires)
		recentlyFailed := p.failedErr != nil && now.Sub(p.failedAt) < keysRetryAfter
		// Stale keys, when there are some, serve while a fetch runs and
		// until one works.
		if k := p.keys[kid]; k != nil && (!stale || recentlyFailed || p.fetching != nil) {
			p.mu.Unlock()
			return k, nil
		}
		if !stale || recentlyFailed {
			keys, failedErr := p.keys, p.failedErr
			p.mu.Unlock()
			if keys == nil {
				return nil, fmt.Errorf("%w: signing keys unavailable: %w", ErrTokenInvalid, failedErr)
			}
			return nil, invalid("unknown kid %.60q", kid)
		}
		done := p.fetching
		if done == nil {
			done = make(chan struct{})
			p.fetching = done
			go p.refresh(context.WithoutCancel(ctx), done)
		}
		p.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: waiting for the signing keys: %w", ErrTokenInvalid, ctx.Err())
		}
	}
}

// refresh fetches the JWKS once and records the outcome, stamped at the
// fetch's end, then closes done.
func (p *PushVerifier) refresh(ctx context.Context, done chan struct{}) {
	ctx, cancel := context.WithTimeout(ctx, keysFetchTimeout)
	defer cancel()
	keys, ttl, err := p.fetch(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if err != nil {
		p.failedAt, p.failedErr = now, err
	} else {
		p.keys, p.expires, p.failedErr = keys, now.Add(ttl), nil
	}
	p.fetching = nil
	close(done)
}

type jwk struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

// fetch reads the JWKS: the RS256 signing keys by kid and how long to
// keep them.
func (p *PushVerifier) fetch(ctx context.Context) (map[string]*rsa.PublicKey, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.CertsURL, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("google: certs request: %w", err)
	}
	resp, err := p.hc.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("google: fetch certs: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("google: fetch certs: %s", resp.Status)
	}
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJWKSBody)).Decode(&set); err != nil {
		return nil, 0, fmt.Errorf("google: certs are not a JWKS: %w", err)
	}
	keys := map[string]*rsa.PublicKey{}
	for _, k := range set.Keys {
		if k.Kty != "RSA" || k.Kid == "" || (k.Alg != "" && k.Alg != "RS256") || (k.Use != "" && k.Use != "sig") {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			continue
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < minRSABits || pub.E < 3 {
			continue
		}
		keys[k.Kid] = pub
	}
	if len(keys) == 0 {
		return nil, 0, errors.New("google: certs hold no RS256 signing key")
	}
	return keys, cacheTTL(resp.Header.Get("Cache-Control")), nil
}

// cacheTTL reads max-age from Cache-Control, within the cache bounds.
func cacheTTL(cc string) time.Duration {
	for part := range strings.SplitSeq(cc, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "max-age="); ok {
			if secs, err := strconv.Atoi(v); err == nil {
				return min(max(time.Duration(secs)*time.Second, minKeysTTL), maxKeysTTL)
			}
		}
	}
	return defaultKeysTTL
}
