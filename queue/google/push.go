package google

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"google.golang.org/api/idtoken"
	"google.golang.org/api/option"
)

// googleCertsURL is where idtoken fetches Google's signing keys.
const googleCertsURL = "https://www.googleapis.com/oauth2/v3/certs"

// Push token verification errors.
var (
	// ErrTokenInvalid: the push token is missing or cannot be verified
	// (malformed, bad signature, unknown key, expired, wrong issuer): 401.
	ErrTokenInvalid = errors.New("push token missing or not verifiable")
	// ErrTokenForbidden: the token verifies but is not for us (audience,
	// email, unverified email): 403.
	ErrTokenForbidden = errors.New("push token not accepted")
)

// PushVerifierConfig configures a PushVerifier.
type PushVerifierConfig struct {
	// CertsURL is the JWKS of the signing keys, MAILROOM_GOOGLE_CERTS_URL.
	// Empty: Google's.
	CertsURL string
	// Audience is the required aud claim, MAILROOM_PUSH_AUDIENCE. Required.
	Audience string
	// ServiceAccount, when set, is the required email claim,
	// MAILROOM_PUSH_SERVICE_ACCOUNT.
	ServiceAccount string
	// HTTPClient fetches the keys. Nil: a client with a 10 s timeout.
	HTTPClient *http.Client
}

// PushVerifier checks the OIDC token Pub/Sub puts on a push request: the
// signature against the JWKS, expiry, issuer, audience, email and
// email_verified (idtoken checks only the first two and the audience).
type PushVerifier struct {
	cfg PushVerifierConfig
	v   *idtoken.Validator
}

// NewPushVerifier returns a verifier for cfg.
func NewPushVerifier(ctx context.Context, cfg PushVerifierConfig) (*PushVerifier, error) {
	if cfg.Audience == "" {
		return nil, errors.New("google: push verifier needs an audience")
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.CertsURL != "" && cfg.CertsURL != googleCertsURL {
		target, err := url.Parse(cfg.CertsURL)
		if err != nil {
			return nil, fmt.Errorf("google: certs URL: %w", err)
		}
		base := hc.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		hc = &http.Client{Timeout: hc.Timeout, Transport: &certsRedirect{target: target, next: base}}
	}
	v, err := idtoken.NewValidator(ctx, option.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("google: push token validator: %w", err)
	}
	return &PushVerifier{cfg: cfg, v: v}, nil
}

// Verify checks a raw token (without "Bearer "). It returns nil, or an
// error wrapping ErrTokenInvalid or ErrTokenForbidden.
func (p *PushVerifier) Verify(ctx context.Context, token string) error {
	if token == "" {
		return fmt.Errorf("%w: no token", ErrTokenInvalid)
	}
	// The audience is checked below, after the signature: a token that
	// does not verify is a 401 whatever its audience says.
	payload, err := p.v.Validate(ctx, token, "")
	if err != nil {
		return fmt.Errorf("%w: %w", ErrTokenInvalid, err)
	}
	if payload.Issuer != "accounts.google.com" && payload.Issuer != "https://accounts.google.com" {
		return fmt.Errorf("%w: issuer %q", ErrTokenInvalid, payload.Issuer)
	}
	if payload.Audience != p.cfg.Audience {
		return fmt.Errorf("%w: audience %q", ErrTokenForbidden, payload.Audience)
	}
	email, _ := payload.Claims["email"].(string)
	if p.cfg.ServiceAccount != "" && email != p.cfg.ServiceAccount {
		return fmt.Errorf("%w: email %q", ErrTokenForbidden, email)
	}
	if verified, _ := payload.Claims["email_verified"].(bool); !verified {
		return fmt.Errorf("%w: email not verified", ErrTokenForbidden)
	}
	return nil
}

// certsRedirect sends idtoken's requests for Google's JWKS to another URL.
type certsRedirect struct {
	target *url.URL
	next   http.RoundTripper
}

func (t *certsRedirect) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.String() != googleCertsURL {
		return t.next.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	out.URL = t.target
	out.Host = t.target.Host
	return t.next.RoundTrip(out)
}
