package gmail

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"mailroom/queue"
	"mailroom/queue/google"
	"mailroom/store"
)

// MaxPushBody is the largest push body accepted (64 KiB).
const MaxPushBody = 64 << 10

// Push errors; the web layer answers them with 401, 403, 413 and 400.
var (
	ErrPushUnauthorized = errors.New("gmail: push: missing or unverifiable token")
	ErrPushForbidden    = errors.New("gmail: push: token not accepted")
	ErrPushTooLarge     = errors.New("gmail: push: body too large")
	ErrPushMalformed    = errors.New("gmail: push: malformed body")
)

// Notification is what a Gmail push says: this mailbox changed up to this
// history id.
type Notification struct {
	EmailAddress string
	HistoryID    uint64
}

// pushEnvelope is Pub/Sub's push body.
type pushEnvelope struct {
	Message *struct {
		Data      *string `json:"data"`
		MessageID string  `json:"messageId"`
	} `json:"message"`
	Subscription string `json:"subscription"`
}

// historyID decodes a JSON number or a string of digits.
type historyID uint64

func (h *historyID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(strings.TrimSpace(s))
	}
	n, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("historyId %s is not a whole number", b)
	}
	*h = historyID(n)
	return nil
}

type pushData struct {
	EmailAddress *string    `json:"emailAddress"`
	HistoryID    *historyID `json:"historyId"`
}

// malformed wraps ErrPushMalformed with what is wrong.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrPushMalformed, fmt.Sprintf(format, args...))
}

// DecodePush decodes a Pub/Sub push envelope carrying a Gmail notification.
// Every problem is an error wrapping ErrPushMalformed.
func DecodePush(body []byte) (Notification, error) {
	var env pushEnvelope
	if err := json.Unmarshal(body, &env); err != nil {
		return Notification{}, malformed("body is not a push envelope: %v", err)
	}
	if env.Message == nil {
		return Notification{}, malformed("message is missing")
	}
	if env.Message.Data == nil || *env.Message.Data == "" {
		return Notification{}, malformed("message.data is missing")
	}
	raw, err := decodeBase64(*env.Message.Data)
	if err != nil {
		return Notification{}, malformed("message.data is not base64")
	}
	var d pushData
	if err := json.Unmarshal(raw, &d); err != nil {
		return Notification{}, malformed("message.data is not a Gmail notification: %v", err)
	}
	if d.EmailAddress == nil || strings.TrimSpace(*d.EmailAddress) == "" {
		return Notification{}, malformed("emailAddress is missing")
	}
	if d.HistoryID == nil || *d.HistoryID == 0 {
		return Notification{}, malformed("historyId is missing")
	}
	return Notification{EmailAddress: strings.TrimSpace(*d.EmailAddress), HistoryID: uint64(*d.HistoryID)}, nil
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// PushRequest is a push as the web layer received it.
type PushRequest struct {
	// Authorization is the Authorization header.
	Authorization string
	// Token is the ?token= query parameter.
	Token string
	// Body is the request body, read up to MaxPushBody+1 bytes.
	Body []byte
	// TooLarge is set when the body was over MaxPushBody.
	TooLarge bool
}

// Push takes a Gmail push: auth first (401, 403), then the body (413,
// 400), then, in one transaction, for each account of that address, the
// wanted history id is raised and one gmail:sync recorded. No Gmail call is
// made. A nil error means the notification is durably recorded (or was for
// an address no account has, which is counted and dropped).
func (p *Pipeline) Push(ctx context.Context, r PushRequest) error {
	err := p.push(ctx, r)
	switch {
	case err == nil:
	case errors.Is(err, ErrPushUnauthorized):
		p.metrics.push.WithLabelValues(outcomeUnauthorized).Inc()
	case errors.Is(err, ErrPushForbidden):
		p.metrics.push.WithLabelValues(outcomeForbidden).Inc()
	case errors.Is(err, ErrPushMalformed), errors.Is(err, ErrPushTooLarge):
		p.metrics.push.WithLabelValues(outcomeBadRequest).Inc()
	}
	return err
}

func (p *Pipeline) push(ctx context.Context, r PushRequest) error {
	if err := p.authorizePush(ctx, r); err != nil {
		return err
	}
	if r.TooLarge || len(r.Body) > MaxPushBody {
		return fmt.Errorf("%w: over %d bytes", ErrPushTooLarge, MaxPushBody)
	}
	n, err := DecodePush(r.Body)
	if err != nil {
		return err
	}
	known, err := p.Notify(n)
	if err != nil {
		return err
	}
	if known {
		p.metrics.push.WithLabelValues(outcomeAccepted).Inc()
	} else {
		p.metrics.push.WithLabelValues(outcomeUnknownAddress).Inc()
		p.log.Info("push for an address no account has; dropped", "email", n.EmailAddress)
	}
	return nil
}

// authorizePush checks the shared ?token= or the OIDC bearer token.
func (p *Pipeline) authorizePush(ctx context.Context, r PushRequest) error {
	if p.cfg.PushToken == "" && p.verifier == nil {
		return fmt.Errorf("%w: push intake is not configured (set MAILROOM_PUSH_AUDIENCE or MAILROOM_PUSH_TOKEN)", ErrPushForbidden)
	}
	if r.Token != "" && p.cfg.PushToken != "" {
		if subtle.ConstantTimeCompare([]byte(r.Token), []byte(p.cfg.PushToken)) == 1 {
			return nil
		}
		return fmt.Errorf("%w: wrong push token", ErrPushUnauthorized)
	}
	// The scheme is case-insensitive (RFC 9110 §11.1), as the API's.
	scheme, bearer, _ := strings.Cut(strings.TrimSpace(r.Authorization), " ")
	if !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(bearer) == "" || p.verifier == nil {
		return fmt.Errorf("%w: no token", ErrPushUnauthorized)
	}
	err := p.verifier.Verify(ctx, strings.TrimSpace(bearer))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, google.ErrTokenForbidden):
		return fmt.Errorf("%w: %w", ErrPushForbidden, err)
	default:
		return fmt.Errorf("%w: %w", ErrPushUnauthorized, err)
	}
}

// Notify records a notification: for each syncing account of the address
// whose watermark is below the history id, the wanted id is raised and a
// sync recorded (one per account: a sync already waiting takes it).
// Accounts in error or disconnected are skipped (reconnecting syncs them).
// Every account of the address has its LastPushAt stamped, at most once a
// second (pushStampEvery). It reports whether any account has that
// address. Duplicates and redeliveries within that second cost a read
// transaction.
func (p *Pipeline) Notify(n Notification) (known bool, err error) {
	var ids []string
	now := p.now()
	needed := false
	err = p.db.View(func(tx *store.Tx) error {
		ids = tx.AccountIDsByEmail(n.EmailAddress)
		for _, id := range ids {
			acc, err := tx.AccountGet(id)
			if err != nil {
				return err
			}
			needed = needed || needsSync(acc, n.HistoryID) || stalePush(acc, now)
		}
		return nil
	})
	if err != nil || !needed {
		return len(ids) > 0, err
	}
	err = p.writes.Do(func(tx *store.Tx) error {
		for _, id := range tx.AccountIDsByEmail(n.EmailAddress) {
			acc, err := tx.AccountGet(id)
			if err != nil {
				return err
			}
			if err := p.notifyAccount(tx, acc, n.HistoryID, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return true, fmt.Errorf("gmail: record push for %s: %w", n.EmailAddress, err)
	}
	return true, nil
}

// notifyAccount records a push at hid for acc: when it came (to the
// second), and when acc is behind it the wanted id, since when it is
// wanted, and a sync.
func (p *Pipeline) notifyAccount(tx *store.Tx, acc store.Account, hid uint64, now time.Time) error {
	changed := stalePush(acc, now)
	if changed {
		acc.LastPushAt = now
	}
	sync := needsSync(acc, hid)
	if sync && hid > acc.WantedHistoryID {
		if from, _ := liveFrom(acc); acc.WantedHistoryID <= from || acc.WantedAt.IsZero() {
			acc.WantedAt = p.now()
		}
		acc.WantedHistoryID, changed = hid, true
	}
	if changed {
		if err := tx.AccountPut(acc); err != nil {
			return err
		}
	}
	if !sync {
		return nil
	}
	return p.enqueueSync(tx, acc.ID, triggerPush)
}

// pushStampEvery is how often at most a push writes its account's
// LastPushAt.
const pushStampEvery = time.Second

// stalePush reports whether a push at now must stamp acc's LastPushAt.
func stalePush(acc store.Account, now time.Time) bool {
	return now.Sub(acc.LastPushAt) >= pushStampEvery
}

// needsSync reports whether a push at hid must make sure a sync is
// recorded: the account is behind it and may sync.
func needsSync(acc store.Account, hid uint64) bool {
	if !active(acc) {
		return false
	}
	from, ok := liveFrom(acc)
	return !ok || hid > from
}

// active reports whether the account syncs (not in error or disconnected).
func active(acc store.Account) bool {
	return acc.Status == store.AccountSyncing || acc.Status == store.AccountReady
}

// Sync triggers, recorded in sync runs.
const (
	triggerConnect = "connect"
	triggerPush    = "push"
	triggerPoll    = "poll"
	triggerResync  = "resync"
	triggerTooOld  = "too_old"
	triggerFull    = "full_sync" // the history after a full sync
	// triggerLag: read again for a push that Gmail's history had not
	// reached; triggerTrailing: the read a few seconds after pushes that
	// catches a change whose push was dropped.
	triggerLag      = "history_lag"
	triggerTrailing = "trailing"
)

type syncPayload struct {
	AccountID string `json:"accountId"`
	Trigger   string `json:"trigger,omitempty"`
}

func syncKey(accountID string) string { return "gmail:sync:" + accountID }

// enqueueSync records the account's sync unless one is waiting.
func (p *Pipeline) enqueueSync(tx *store.Tx, accountID, trigger string) error {
	// BringForward: a follow-up sync waiting for its time runs now.
	_, _, err := p.queue.Enqueue(tx, TypeSync, syncPayload{AccountID: accountID, Trigger: trigger},
		queue.Key(syncKey(accountID)), queue.BringForward())
	return err
}
