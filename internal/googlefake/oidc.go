package googlefake

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultPushServiceAccount is the email claim of push tokens when
// Options.PushServiceAccount is empty.
const DefaultPushServiceAccount = "gmail-push@mailroom-demo.iam.gserviceaccount.com"

// DefaultSubscription is the subscription named in push envelopes.
const DefaultSubscription = "projects/mailroom-demo/subscriptions/gmail-push"

// GoogleCertsURL is where idtoken.Validator fetches Google's keys;
// CertsHTTPClient sends it to the emulator.
const GoogleCertsURL = "https://www.googleapis.com/oauth2/v3/certs"

// IDTokenClaims are the claims of a token made by SignPushToken. Zero fields
// get Google's usual values.
type IDTokenClaims struct {
	// Issuer. Empty: "https://accounts.google.com".
	Issuer string
	// Audience (aud). Empty: Options.PushAudience, else Options.PushURL.
	Audience string
	// Email. Empty: Options.PushServiceAccount.
	Email string
	// Subject (sub). Empty: a stable number derived from Email.
	Subject string
	// IssuedAt (iat). Zero: the server clock's now.
	IssuedAt time.Time
	// Expiry (exp). Zero: IssuedAt plus one hour.
	Expiry time.Time
}

// TokenFlaw spoils a token made by SignPushToken, for tests of rejection.
type TokenFlaw int

const (
	// FlawExpired sets exp an hour in the past.
	FlawExpired TokenFlaw = iota + 1
	// FlawWrongIssuer sets iss to "https://evil.example.com".
	FlawWrongIssuer
	// FlawUnknownKey names a kid the JWKS does not publish.
	FlawUnknownKey
	// FlawBadSignature corrupts the signature.
	FlawBadSignature
	// FlawUnverifiedEmail sets email_verified to false.
	FlawUnverifiedEmail
)

// signer holds the RSA key that signs tokens, made on first use.
type signer struct {
	once sync.Once
	key  *rsa.PrivateKey
	kid  string
	err  error
}

func newSigner() *signer { return &signer{} }

func (k *signer) load() error {
	k.once.Do(func() {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			k.err = fmt.Errorf("googlefake: generate key: %w", err)
			return
		}
		sum := sha256.Sum256(key.N.Bytes())
		k.key, k.kid = key, hex.EncodeToString(sum[:20])
	})
	return k.err
}

type jwk struct {
	Kty string `json:"kty"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	Kid string `json:"kid"`
	N   string `json:"n"`
	E   string `json:"e"`
}

func (k *signer) routeCerts(r *http.Request) (*endpoint, map[string]string, error) {
	if r.Method != http.MethodGet {
		return nil, nil, errMethod()
	}
	return &endpoint{method: MethodCerts, handle: func(*call) (any, error) {
		if err := k.load(); err != nil {
			return nil, err
		}
		return struct {
			Keys []jwk `json:"keys"`
		}{[]jwk{{
			Kty: "RSA", Alg: "RS256", Use: "sig", Kid: k.kid,
			N: b64(k.key.N.Bytes()),
			E: b64(big.NewInt(int64(k.key.E)).Bytes()),
		}}}, nil
	}}, nil, nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// sign makes an RS256 JWT of c with the given flaws; now fills the defaults.
func (k *signer) sign(now time.Time, c IDTokenClaims, flaws []TokenFlaw) (string, error) {
	if err := k.load(); err != nil {
		return "", err
	}
	if c.Issuer == "" {
		c.Issuer = "https://accounts.google.com"
	}
	if c.Subject == "" {
		c.Subject = subjectOf(c.Email)
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = now
	}
	if c.Expiry.IsZero() {
		c.Expiry = c.IssuedAt.Add(time.Hour)
	}
	verified, kid, corrupt := true, k.kid, false
	for _, f := range flaws {
		switch f {
		case FlawExpired:
			c.IssuedAt = now.Add(-2 * time.Hour)
			c.Expiry = now.Add(-time.Hour)
		case FlawWrongIssuer:
			c.Issuer = "https://evil.example.com"
		case FlawUnknownKey:
			kid = "0000000000000000000000000000000000000000"
		case FlawBadSignature:
			corrupt = true
		case FlawUnverifiedEmail:
			verified = false
		}
	}
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "kid": kid, "typ": "JWT"})
	payload, _ := json.Marshal(map[string]any{
		"iss": c.Issuer, "aud": c.Audience, "azp": c.Audience, "sub": c.Subject,
		"email": c.Email, "email_verified": verified,
		"iat": c.IssuedAt.Unix(), "exp": c.Expiry.Unix(),
	})
	signed := b64(header) + "." + b64(payload)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, k.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("googlefake: sign token: %w", err)
	}
	if corrupt {
		sig[len(sig)/2] ^= 0xff
	}
	return signed + "." + b64(sig), nil
}

// SignPushToken returns an RS256 OIDC token like the one Pub/Sub puts in the
// Authorization header of a push, signed with the key that the emulator's
// JWKS publishes. Flaws spoil it for rejection tests.
func (s *Server) SignPushToken(c IDTokenClaims, flaws ...TokenFlaw) string {
	if c.Audience == "" {
		c.Audience = s.pushAudience()
	}
	if c.Email == "" {
		c.Email = s.opts.PushServiceAccount
	}
	tok, err := s.keys.sign(s.now(), c, flaws)
	if err != nil {
		// Only a broken crypto/rand gets here.
		panic(err)
	}
	return tok
}

// CertsHTTPClient returns an HTTP client that answers requests for
// GoogleCertsURL from the emulator's JWKS (in process, without Start) and
// sends every other request out unchanged. Give it to
// idtoken.NewValidator(ctx, option.WithHTTPClient(c)).
func (s *Server) CertsHTTPClient() *http.Client {
	return &http.Client{Transport: &certsTransport{s: s, next: http.DefaultTransport}, Timeout: 30 * time.Second}
}

type certsTransport struct {
	s    *Server
	next http.RoundTripper
}

func (t *certsTransport) RoundTrip(req *http.Request) (resp *http.Response, err error) {
	if req.URL.Scheme+"://"+req.URL.Host+req.URL.Path != GoogleCertsURL {
		return t.next.RoundTrip(req)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	in := req.Clone(req.Context())
	in.URL.Scheme, in.URL.Host, in.Host, in.RequestURI = "", "", "", "/oauth2/v3/certs"
	in.URL.Path = "/oauth2/v3/certs"
	in.Body = http.NoBody
	rec := httptest.NewRecorder()
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, fmt.Errorf("googlefake: certs request aborted: %v", p)
		}
	}()
	t.s.handler.ServeHTTP(rec, in)
	resp = rec.Result()
	resp.Request = req
	return resp, nil
}

// ---- Pub/Sub push ----

type pushData struct {
	EmailAddress string `json:"emailAddress"`
	HistoryID    uint64 `json:"historyId"`
}

type pushMessage struct {
	Data         string            `json:"data"`
	Attributes   map[string]string `json:"attributes,omitempty"`
	MessageID    string            `json:"messageId"`
	MessageID2   string            `json:"message_id"`
	PublishTime  string            `json:"publishTime"`
	PublishTime2 string            `json:"publish_time"`
}

type pushEnvelope struct {
	Message      pushMessage `json:"message"`
	Subscription string      `json:"subscription"`
}

// PushEnvelope returns the body Pub/Sub POSTs to a push endpoint for a Gmail
// notification: {"message":{"data":base64({"emailAddress","historyId"}),
// "messageId","publishTime",...},"subscription"}.
func (s *Server) PushEnvelope(email string, historyID uint64) []byte {
	data, _ := json.Marshal(pushData{EmailAddress: email, HistoryID: historyID})
	id := strconv.FormatUint(s.pusher.seq.Add(1)+1_000_000_000, 10)
	ts := s.now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(pushEnvelope{
		Message: pushMessage{
			Data: base64.StdEncoding.EncodeToString(data), MessageID: id, MessageID2: id,
			PublishTime: ts, PublishTime2: ts,
		},
		Subscription: DefaultSubscription,
	})
	return b
}

// SetPushURL sets (or, with "", clears) the URL that receives pushes.
func (s *Server) SetPushURL(u string) {
	s.pusher.mu.Lock()
	defer s.pusher.mu.Unlock()
	s.pusher.url = u
}

func (s *Server) pushAudience() string {
	if s.opts.PushAudience != "" {
		return s.opts.PushAudience
	}
	s.pusher.mu.Lock()
	defer s.pusher.mu.Unlock()
	return s.pusher.url
}

// PushStats counts the pushes the emulator sent.
type PushStats struct {
	// Sent is the number of pushes answered with a 2xx.
	Sent int
	// Failed is the number of pushes that failed (not retried: the app's
	// polling catches up, as with a lost Pub/Sub message).
	Failed int
	// LastError describes the last failure.
	LastError string
	// Dropped is the number of notifications not sent: above one a second
	// for a user (Options.PushMinInterval), or while the subscription is
	// expired (ExpireSubscription).
	Dropped int
}

// ExpireSubscription makes pushes stop silently, as a Pub/Sub subscription
// does when it is deleted after 31 days without activity (Pub/Sub's
// "Subscription expiration policy", default 31 days), when the topic's
// publisher grant to Gmail is removed, or when the push URL no longer
// reaches the app: Gmail's watch still answers, and no notification
// arrives. RestoreSubscription undoes it.
func (s *Server) ExpireSubscription() {
	s.pusher.mu.Lock()
	defer s.pusher.mu.Unlock()
	s.pusher.expired = true
}

// RestoreSubscription makes pushes flow again after ExpireSubscription.
func (s *Server) RestoreSubscription() {
	s.pusher.mu.Lock()
	defer s.pusher.mu.Unlock()
	s.pusher.expired = false
}

// PushStats returns the push counters.
func (s *Server) PushStats() PushStats {
	s.pusher.mu.Lock()
	defer s.pusher.mu.Unlock()
	return s.pusher.stats
}

// pusher posts push envelopes in the background, coalescing the changes of
// a mailbox into one notification carrying its latest history id.
type pusher struct {
	s   *Server
	seq atomic.Uint64

	mu      sync.Mutex
	url     string
	pending map[string]uint64
	order   []string
	stats   PushStats
	running bool
	closed  bool
	expired bool                 // ExpireSubscription
	last    map[string]time.Time // a user's last notification (PushMinInterval)
	wake    chan struct{}
	ctx     context.Context
	cancel  context.CancelFunc
	done    chan struct{}
}

func newPusher(s *Server) *pusher {
	ctx, cancel := context.WithCancel(context.Background())
	return &pusher{
		s: s, url: s.opts.PushURL, pending: make(map[string]uint64), last: make(map[string]time.Time),
		wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}),
	}
}

// notify queues a push for email at historyID when a push URL is set.
func (p *pusher) notify(email string, historyID uint64) {
	p.mu.Lock()
	if p.url == "" || p.closed {
		p.mu.Unlock()
		return
	}
	if p.drop(email) {
		p.stats.Dropped++
		p.mu.Unlock()
		return
	}
	if _, ok := p.pending[email]; !ok {
		p.order = append(p.order, email)
	}
	p.pending[email] = max(p.pending[email], historyID)
	if !p.running {
		p.running = true
		go p.loop()
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// drop reports whether the notification of a change to email's mailbox is
// lost: the subscription is expired, or the user had one less than
// PushMinInterval ago. Called with mu held.
func (p *pusher) drop(email string) bool {
	if p.expired {
		return true
	}
	interval := p.s.opts.PushMinInterval
	if interval == 0 {
		interval = time.Second
	}
	now := p.s.now()
	if interval > 0 && now.Sub(p.last[email]) < interval {
		return true
	}
	p.last[email] = now
	return false
}

func (p *pusher) loop() {
	defer close(p.done)
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			if len(p.order) == 0 {
				p.mu.Unlock()
				break
			}
			email := p.order[0]
			p.order = p.order[1:]
			hid := p.pending[email]
			delete(p.pending, email)
			target := p.url
			p.mu.Unlock()
			err := p.send(target, email, hid)
			p.mu.Lock()
			if err != nil {
				p.stats.Failed++
				p.stats.LastError = err.Error()
			} else {
				p.stats.Sent++
			}
			p.mu.Unlock()
			if p.ctx.Err() != nil {
				return
			}
		}
	}
}

func (p *pusher) send(target, email string, historyID uint64) error {
	if target == "" {
		return errors.New("googlefake: push: no push URL")
	}
	body := p.s.PushEnvelope(email, historyID)
	req, err := http.NewRequestWithContext(p.ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("googlefake: push: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.s.SignPushToken(IDTokenClaims{}))
	resp, err := p.s.opts.PushClient.Do(req)
	if err != nil {
		return fmt.Errorf("googlefake: push: %w", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("googlefake: push: %s answered %d", target, resp.StatusCode)
	}
	return nil
}

// close stops the publisher and waits for it.
func (p *pusher) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	running := p.running
	p.mu.Unlock()
	p.cancel()
	if running {
		<-p.done
	}
}
