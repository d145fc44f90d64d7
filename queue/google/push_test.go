package google

import (
	"context"
	"crypto"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testAudience = "https://mailroom.example/push/gmail"
	testAccount  = "push@project.iam.gserviceaccount.com"
	testKid      = "key-1"
)

// jwksServer publishes one RSA key as a JWKS and counts its fetches.
type jwksServer struct {
	key   *rsa.PrivateKey
	srv   *httptest.Server
	mu    sync.Mutex
	count int
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	j := &jwksServer{key: key}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.mu.Lock()
		j.count++
		j.mu.Unlock()
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": []map[string]string{{
			"kty": "RSA", "alg": "RS256", "use": "sig", "kid": testKid,
			"n": b64url(key.N.Bytes()), "e": b64url(big.NewInt(int64(key.E)).Bytes()),
		}}})
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *jwksServer) fetches() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.count
}

func b64url(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func jsonPart(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b64url(raw)
}

// goodClaims are the claims of an acceptable token at now.
func goodClaims(now time.Time) map[string]any {
	return map[string]any{
		"iss": "https://accounts.google.com", "aud": testAudience, "email": testAccount, "email_verified": true,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(), "sub": "1234",
	}
}

// signRS256 signs header and claims with key.
func signRS256(t *testing.T, key *rsa.PrivateKey, header, claims map[string]any) string {
	t.Helper()
	signed := jsonPart(t, header) + "." + jsonPart(t, claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return signed + "." + b64url(sig)
}

// recorder lets requests through and records their URLs.
type recorder struct {
	mu   sync.Mutex
	urls []string
	next http.RoundTripper
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.urls = append(r.urls, req.URL.String())
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.urls...)
}

func newTestVerifier(t *testing.T, j *jwksServer, now time.Time) (*PushVerifier, *recorder) {
	t.Helper()
	rec := &recorder{next: http.DefaultTransport}
	v, err := NewPushVerifier(context.Background(), PushVerifierConfig{
		CertsURL: j.srv.URL + "/oauth2/v3/certs", Audience: testAudience, ServiceAccount: testAccount,
		HTTPClient: &http.Client{Transport: rec, Timeout: 5 * time.Second},
		Now:        func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	return v, rec
}

// TestPushVerifierHostileTokens feeds tokens of every hostile kind: each is
// refused with ErrTokenInvalid (401) without a panic, and the ones refused
// at the header make no request at all, even with nothing cached.
func TestPushVerifierHostileTokens(t *testing.T) {
	t.Parallel()
	j := newJWKSServer(t)
	now := time.Unix(1_800_000_000, 0)
	rs := map[string]any{"alg": "RS256", "kid": testKid, "typ": "JWT"}
	with := func(base map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(out, kv[i].(string))
			} else {
				out[kv[i].(string)] = kv[i+1]
			}
		}
		return out
	}
	claims := goodClaims(now)
	hmacToken := func(alg string, secret []byte) string {
		signed := jsonPart(t, map[string]any{"alg": alg, "kid": testKid}) + "." + jsonPart(t, claims)
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(signed))
		return signed + "." + b64url(mac.Sum(nil))
	}
	rs512 := func() string {
		signed := jsonPart(t, with(rs, "alg", "RS512")) + "." + jsonPart(t, claims)
		sum := sha512.Sum512([]byte(signed))
		sig, err := rsa.SignPKCS1v15(rand.Reader, j.key, crypto.SHA512, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		return signed + "." + b64url(sig)
	}()
	good := signRS256(t, j.key, rs, claims)
	goodParts := strings.Split(good, ".")

	// Refused at the header or the token's shape: no request is made.
	beforeFetch := []struct{ name, token string }{
		{"empty", ""},
		{"one part", "abc"},
		{"two parts", goodParts[0] + "." + goodParts[1]},
		{"four parts", good + ".x"},
		{"header not base64", "%%%." + goodParts[1] + "." + goodParts[2]},
		{"header not json", b64url([]byte("nope")) + "." + goodParts[1] + "." + goodParts[2]},
		{"header an array", b64url([]byte("[1]")) + "." + goodParts[1] + "." + goodParts[2]},
		{"alg none", jsonPart(t, map[string]any{"alg": "none", "kid": testKid}) + "." + goodParts[1] + "."},
		{"alg none no kid", jsonPart(t, map[string]any{"alg": "none"}) + "." + goodParts[1] + "." + goodParts[2]},
		{"alg None", jsonPart(t, map[string]any{"alg": "None", "kid": testKid}) + "." + goodParts[1] + "." + goodParts[2]},
		{"alg lower rs256", jsonPart(t, with(rs, "alg", "rs256")) + "." + goodParts[1] + "." + goodParts[2]},
		{"alg HS256 with the public key as secret", hmacToken("HS256", j.key.N.Bytes())},
		// idtoken's ES256 path panics on this and fetches Google's IAP keys.
		{"ES256 one-byte signature", jsonPart(t, map[string]any{"alg": "ES256", "kid": "0oeLcQ"}) + "." + goodParts[1] + "." + b64url([]byte{1})},
		{"ES256 empty signature", jsonPart(t, map[string]any{"alg": "ES256", "kid": "0oeLcQ"}) + "." + goodParts[1] + "."},
		{"RS512", rs512},
		{"PS256", jsonPart(t, with(rs, "alg", "PS256")) + "." + goodParts[1] + "." + goodParts[2]},
		{"alg not a string", jsonPart(t, with(rs, "alg", 256)) + "." + goodParts[1] + "." + goodParts[2]},
		{"no alg", jsonPart(t, with(rs, "alg", nil)) + "." + goodParts[1] + "." + goodParts[2]},
		{"no kid", signRS256(t, j.key, with(rs, "kid", nil), claims)},
		{"empty kid", signRS256(t, j.key, with(rs, "kid", ""), claims)},
		{"kid not a string", jsonPart(t, with(rs, "kid", 7)) + "." + goodParts[1] + "." + goodParts[2]},
		{"crit header", signRS256(t, j.key, with(rs, "crit", []string{"exp"}), claims)},
		{"jku header pointing elsewhere is still no kid", signRS256(t, j.key, with(rs, "kid", nil, "jku", "https://evil.example/jwks"), claims)},
		{"empty signature", goodParts[0] + "." + goodParts[1] + "."},
		{"signature not base64", goodParts[0] + "." + goodParts[1] + ".%%%"},
		{"oversized", goodParts[0] + "." + strings.Repeat("A", 9000) + "." + goodParts[2]},
	}
	v, rec := newTestVerifier(t, j, now)
	for _, tc := range beforeFetch {
		err := v.Verify(context.Background(), tc.token)
		if !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("%s: %v, want ErrTokenInvalid", tc.name, err)
		}
	}
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("tokens refused at the header made requests: %v", got)
	}

	// Refused after the signature check or at the claims (401).
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	afterFetch := []struct{ name, token string }{
		{"unknown kid", signRS256(t, j.key, with(rs, "kid", "key-2"), claims)},
		{"signed by another key", signRS256(t, other, rs, claims)},
		{"short signature", goodParts[0] + "." + goodParts[1] + "." + b64url([]byte{1})},
		{"claims changed after signing", goodParts[0] + "." + jsonPart(t, with(claims, "aud", "x")) + "." + goodParts[2]},
		{"expired", signRS256(t, j.key, rs, with(claims, "exp", now.Add(-2*time.Minute).Unix()))},
		{"no exp", signRS256(t, j.key, rs, with(claims, "exp", nil))},
		{"exp not a number", signRS256(t, j.key, rs, with(claims, "exp", "soon"))},
		{"no iat", signRS256(t, j.key, rs, with(claims, "iat", nil))},
		{"iat in the future", signRS256(t, j.key, rs, with(claims, "iat", now.Add(2*time.Minute).Unix()))},
		{"nbf in the future", signRS256(t, j.key, rs, with(claims, "nbf", now.Add(2*time.Minute).Unix()))},
		{"iat huge", signRS256(t, j.key, rs, with(claims, "iat", 1e300))},
		{"wrong issuer", signRS256(t, j.key, rs, with(claims, "iss", "https://evil.example.com"))},
		{"payload not json", goodParts[0] + "." + b64url([]byte("x")) + "." + goodParts[2]},
	}
	for _, tc := range afterFetch {
		err := v.Verify(context.Background(), tc.token)
		if !errors.Is(err, ErrTokenInvalid) {
			t.Errorf("%s: %v, want ErrTokenInvalid", tc.name, err)
		}
	}
	// Verifies, but not for us (403).
	forbidden := []struct{ name, token string }{
		{"wrong audience", signRS256(t, j.key, rs, with(claims, "aud", "https://evil.example"))},
		{"audience a list", signRS256(t, j.key, rs, with(claims, "aud", []string{testAudience}))},
		{"wrong email", signRS256(t, j.key, rs, with(claims, "email", "evil@attacker.iam.gserviceaccount.com"))},
		{"no email", signRS256(t, j.key, rs, with(claims, "email", nil))},
		{"email not verified", signRS256(t, j.key, rs, with(claims, "email_verified", false))},
		{"email_verified a string", signRS256(t, j.key, rs, with(claims, "email_verified", "true"))},
	}
	for _, tc := range forbidden {
		err := v.Verify(context.Background(), tc.token)
		if !errors.Is(err, ErrTokenForbidden) {
			t.Errorf("%s: %v, want ErrTokenForbidden", tc.name, err)
		}
	}
	// The good token, and ones within a minute of skew, pass.
	accepted := []struct{ name, token string }{
		{"good", good},
		{"iat 30s ahead", signRS256(t, j.key, rs, with(claims, "iat", now.Add(30*time.Second).Unix()))},
		{"nbf 30s ahead", signRS256(t, j.key, rs, with(claims, "nbf", now.Add(30*time.Second).Unix()))},
		{"issuer without scheme", signRS256(t, j.key, rs, with(claims, "iss", "accounts.google.com"))},
	}
	for _, tc := range accepted {
		if err := v.Verify(context.Background(), tc.token); err != nil {
			t.Errorf("%s: %v, want nil", tc.name, err)
		}
	}
	// Every request went to the configured certs URL, and once: the keys
	// are cached for the answer's max-age, and an unknown kid does not
	// refetch them.
	want := j.srv.URL + "/oauth2/v3/certs"
	got := rec.seen()
	if len(got) != 1 || got[0] != want {
		t.Errorf("requests %v, want exactly one to %s", got, want)
	}
	if n := j.fetches(); n != 1 {
		t.Errorf("JWKS fetched %d times, want 1", n)
	}
}

// TestPushVerifierKeyCache checks that the keys are fetched again once their
// max-age has passed, and that a failed fetch is not repeated on every
// token.
func TestPushVerifierKeyCache(t *testing.T) {
	t.Parallel()
	j := newJWKSServer(t)
	now := time.Unix(1_800_000_000, 0)
	clock := now
	rec := &recorder{next: http.DefaultTransport}
	v, err := NewPushVerifier(context.Background(), PushVerifierConfig{
		CertsURL: j.srv.URL, Audience: testAudience, ServiceAccount: testAccount,
		HTTPClient: &http.Client{Transport: rec, Timeout: 5 * time.Second},
		Now:        func() time.Time { return clock },
	})
	if err != nil {
		t.Fatal(err)
	}
	rs := map[string]any{"alg": "RS256", "kid": testKid}
	if err := v.Verify(context.Background(), signRS256(t, j.key, rs, goodClaims(clock))); err != nil {
		t.Fatal(err)
	}
	clock = now.Add(59 * time.Minute)
	if err := v.Verify(context.Background(), signRS256(t, j.key, rs, goodClaims(clock))); err != nil {
		t.Fatal(err)
	}
	if n := j.fetches(); n != 1 {
		t.Fatalf("fetches within max-age: %d, want 1", n)
	}
	clock = now.Add(61 * time.Minute)
	if err := v.Verify(context.Background(), signRS256(t, j.key, rs, goodClaims(clock))); err != nil {
		t.Fatal(err)
	}
	if n := j.fetches(); n != 2 {
		t.Fatalf("fetches after max-age: %d, want 2", n)
	}
	// The JWKS goes away: stale keys keep serving, and the failing fetch
	// is tried at most once per keysRetryAfter.
	j.srv.Close()
	clock = now.Add(3 * time.Hour)
	for range 5 {
		if err := v.Verify(context.Background(), signRS256(t, j.key, rs, goodClaims(clock))); err != nil {
			t.Fatalf("with stale keys: %v", err)
		}
	}
	if n := len(rec.seen()); n != 3 {
		t.Errorf("requests while the JWKS is down: %d in all, want 3", n)
	}
}

// TestPushVerifierNeedsServiceAccount: an audience alone would accept any
// Google service account's token.
func TestPushVerifierNeedsServiceAccount(t *testing.T) {
	t.Parallel()
	if _, err := NewPushVerifier(context.Background(), PushVerifierConfig{Audience: testAudience}); err == nil {
		t.Fatal("a verifier without a service account was made")
	}
}

// TestPushVerifierKeyServerBlackholes: a key server that never answers
// costs one fetch, however many pushes arrive meanwhile. Each fetch here
// moves the verifier's clock on by 10 s (a slow Google with a 10 s client
// timeout) and then hangs until the client gives up. Four concurrent
// pushes share that one fetch and all end with it (before, each fetched
// in turn under the lock and the fourth waited four timeouts), the
// failure is stamped at the fetch's end so the next push within the
// back-off makes no request, and a push whose context ends first returns
// then.
func TestPushVerifierKeyServerBlackholes(t *testing.T) {
	t.Parallel()
	const clientTimeout = 400 * time.Millisecond
	var (
		mu      sync.Mutex
		offset  time.Duration
		fetches int
	)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetches++
		offset += 10 * time.Second
		mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	base := time.Now()
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return base.Add(time.Since(base) + offset)
	}
	v, err := NewPushVerifier(context.Background(), PushVerifierConfig{
		CertsURL: srv.URL, Audience: testAudience, ServiceAccount: testAccount,
		HTTPClient: &http.Client{Timeout: clientTimeout},
		Now:        clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	token := signRS256(t, key, map[string]any{"alg": "RS256", "kid": testKid}, goodClaims(time.Now()))

	start := time.Now()
	var wg sync.WaitGroup
	took := make([]time.Duration, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			errs[i] = v.Verify(context.Background(), token)
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	for i := range 4 {
		if !errors.Is(errs[i], ErrTokenInvalid) {
			t.Errorf("push %d: %v, want ErrTokenInvalid", i, errs[i])
		}
		if took[i] > 3*clientTimeout {
			t.Errorf("push %d waited %s, want about one fetch timeout (%s)", i, took[i], clientTimeout)
		}
	}
	mu.Lock()
	n := fetches
	mu.Unlock()
	if n != 1 {
		t.Errorf("fetches for four concurrent pushes: %d, want 1", n)
	}

	// Within the back-off, counted from the fetch's end: no fetch, no wait.
	t0 := time.Now()
	if err := v.Verify(context.Background(), token); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("push in the back-off: %v, want ErrTokenInvalid", err)
	}
	if d := time.Since(t0); d > clientTimeout/2 {
		t.Errorf("push in the back-off waited %s", d)
	}
	mu.Lock()
	n = fetches
	offset += keysRetryAfter // the back-off passes
	mu.Unlock()
	if n != 1 {
		t.Errorf("fetches after a push in the back-off: %d, want 1", n)
	}

	// After it, a new fetch hangs again; a push with a short deadline
	// leaves when its context ends, not when the fetch does.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	t0 = time.Now()
	err = v.Verify(ctx, token)
	if !errors.Is(err, ErrTokenInvalid) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("push with a short deadline: %v, want ErrTokenInvalid wrapping the deadline", err)
	}
	if d := time.Since(t0); d > clientTimeout/2 {
		t.Errorf("push with a 50ms deadline waited %s", d)
	}
}
