package googlefake

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// The method names used by Calls, InjectFault and the counters.
const (
	MethodGetProfile          = "gmail.getProfile"
	MethodWatch               = "gmail.watch"
	MethodStop                = "gmail.stop"
	MethodMessagesList        = "gmail.messages.list"
	MethodMessagesGet         = "gmail.messages.get"
	MethodMessagesModify      = "gmail.messages.modify"
	MethodMessagesBatchModify = "gmail.messages.batchModify"
	MethodMessagesTrash       = "gmail.messages.trash"
	MethodMessagesUntrash     = "gmail.messages.untrash"
	MethodMessagesDelete      = "gmail.messages.delete"
	MethodHistoryList         = "gmail.history.list"
	MethodLabelsList          = "gmail.labels.list"
	MethodLabelsGet           = "gmail.labels.get"
	MethodLabelsCreate        = "gmail.labels.create"

	MethodToken   = "oauth.token"
	MethodConsent = "oauth.auth"
	MethodRevoke  = "oauth.revoke"
	MethodCerts   = "oauth.certs"

	MethodSheetsGet         = "sheets.get"
	MethodValuesGet         = "sheets.values.get"
	MethodValuesAppend      = "sheets.values.append"
	MethodValuesUpdate      = "sheets.values.update"
	MethodValuesBatchUpdate = "sheets.values.batchUpdate"
	MethodValuesClear       = "sheets.values.clear"
)

// knownMethod reports whether m is one of the Method constants.
func knownMethod(m string) bool {
	return slices.Contains(gmailMethods(), m) || slices.Contains(sheetsMethods(), m) ||
		m == MethodToken || m == MethodConsent || m == MethodRevoke || m == MethodCerts
}

// Fault makes matching requests slow or fail. A request matches when every
// non-empty selector (Method, Account, MessageID) matches it.
type Fault struct {
	// Method selects one method (a Method constant). Empty: every method.
	Method string
	// Account selects calls made with this account's token. Empty: any.
	Account string
	// MessageID selects Gmail calls naming this message: get, modify, trash,
	// untrash, delete, or a batchModify whose ids include it. Empty: any.
	MessageID string

	// Latency delays the answer (before the call takes effect).
	Latency time.Duration
	// Code is the HTTP status to answer with: 429, 500, 503, 403, 404, ...
	// Zero with Drop unset: no error, only Latency.
	Code int
	// Reason is errors[0].reason of the answer. Empty: Google's usual one for
	// Code (403: rateLimitExceeded, 429: rateLimitExceeded, 5xx: backendError).
	Reason string
	// Message is the error message. Empty: Google's usual one for Code.
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds).
	// With Refusal, it is also the time a shape's "Retry after <time>"
	// names (a minute when unset).
	RetryAfter time.Duration
	// Refusal, when set, answers with Gmail's quota refusal in that shape
	// (status, reason, domain and message as Google words it; see
	// RefusalShape): Code, Reason and Message must be left empty. Like
	// every fault it acts after the quota admitted the call, so the call's
	// units are counted.
	Refusal RefusalShape
	// Drop closes the connection without an answer instead of answering Code.
	// (net/http may resend an idempotent GET once on a dropped connection.)
	Drop bool
	// AfterWrite lets the call take effect first and then fails it (Code or
	// Drop): the write lands but the client sees an error.
	AfterWrite bool

	// Times is how many matching calls fail before the fault is spent.
	// Zero: every matching call until it is removed.
	Times int
	// Probability is the chance that a matching call fails, in (0, 1].
	// Zero: 1.
	Probability float64
}

// FaultHandle is an injected fault: count its firings or remove it.
type FaultHandle struct {
	set   *faultSet
	fault Fault
	// guarded by set.mu
	left  int // remaining firings when fault.Times > 0
	fired int
	gone  bool
}

// Fired returns how many calls the fault has affected so far.
func (h *FaultHandle) Fired() int {
	h.set.mu.Lock()
	defer h.set.mu.Unlock()
	return h.fired
}

// Remove takes the fault out; calls already affected are not undone.
func (h *FaultHandle) Remove() {
	h.set.mu.Lock()
	defer h.set.mu.Unlock()
	h.gone = true
	for i, f := range h.set.faults {
		if f == h {
			h.set.faults = append(h.set.faults[:i], h.set.faults[i+1:]...)
			break
		}
	}
}

// InjectFault adds a fault and returns its handle. Faults are tried in the
// order they were added; the first that fires on a call decides it.
func (s *Server) InjectFault(f Fault) (*FaultHandle, error) {
	if f.Method != "" && !knownMethod(f.Method) {
		return nil, fmt.Errorf("googlefake: inject fault: unknown method %q", f.Method)
	}
	if f.Code != 0 && (f.Code < 400 || f.Code > 599) {
		return nil, fmt.Errorf("googlefake: inject fault: code %d is not an error status", f.Code)
	}
	if f.Refusal != "" {
		e, ok := f.Refusal.refusal(time.Time{})
		if !ok {
			return nil, fmt.Errorf("googlefake: inject fault: unknown refusal shape %q", f.Refusal)
		}
		if f.Code != 0 || f.Reason != "" || f.Message != "" || f.Drop {
			return nil, fmt.Errorf("googlefake: inject fault: a refusal shape sets the answer (leave Code, Reason, Message and Drop unset)")
		}
		f.Code = e.Code
	}
	if f.Code == 0 && !f.Drop && f.Latency <= 0 {
		return nil, fmt.Errorf("googlefake: inject fault: no effect (set Code, Drop or Latency)")
	}
	if f.Probability < 0 || f.Probability > 1 {
		return nil, fmt.Errorf("googlefake: inject fault: probability %v outside [0, 1]", f.Probability)
	}
	if f.Times < 0 {
		return nil, fmt.Errorf("googlefake: inject fault: negative times %d", f.Times)
	}
	h := &FaultHandle{set: s.faults, fault: f, left: f.Times}
	s.faults.mu.Lock()
	s.faults.now = s.now
	s.faults.faults = append(s.faults.faults, h)
	s.faults.mu.Unlock()
	return h, nil
}

// ClearFaults removes every injected fault.
func (s *Server) ClearFaults() {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	for _, h := range s.faults.faults {
		h.gone = true
	}
	s.faults.faults = nil
}

type faultSet struct {
	mu     sync.Mutex
	rng    *rand.Rand
	faults []*FaultHandle
	now    func() time.Time // the server's clock, for the times refusals name
}

func newFaultSet(rng *rand.Rand) *faultSet { return &faultSet{rng: rng} }

// firing is the decision for one call: the fault that fired on it.
type firing struct {
	Fault
	now func() time.Time
}

func (f *firing) fails() bool { return f.Code != 0 || f.Drop }

// match finds the first fault that fires on c, consuming one of its Times.
func (fs *faultSet) match(c *call) *firing {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.faults) == 0 {
		return nil
	}
	var ids []string
	idsDone := false
	for i := 0; i < len(fs.faults); i++ {
		h := fs.faults[i]
		f := h.fault
		if f.Method != "" && f.Method != c.ep.method {
			continue
		}
		if f.Account != "" && !sameEmail(f.Account, c.account) {
			continue
		}
		if f.MessageID != "" {
			if !idsDone {
				ids, idsDone = c.messageIDs(), true
			}
			found := false
			for _, id := range ids {
				if id == f.MessageID {
					found = true
					break
				}
			}
			if !found {
				continue
			}
		}
		if f.Probability > 0 && f.Probability < 1 && fs.rng.Float64() >= f.Probability {
			continue
		}
		h.fired++
		if f.Times > 0 {
			h.left--
			if h.left <= 0 {
				h.gone = true
				fs.faults = append(fs.faults[:i], fs.faults[i+1:]...)
			}
		}
		return &firing{Fault: f, now: fs.now}
	}
	return nil
}

// messageIDs returns the Gmail message ids a call names.
func (c *call) messageIDs() []string {
	if id := c.params["id"]; id != "" && c.ep.method != MethodLabelsGet {
		return []string{id}
	}
	if c.ep.method == MethodMessagesBatchModify {
		var req struct {
			IDs []string `json:"ids"`
		}
		if c.decodeBody(&req) == nil {
			return req.IDs
		}
	}
	return nil
}

// answer writes the fault's failure: an error in Google's shape, or a
// dropped connection.
func (f *firing) answer(w http.ResponseWriter, oauth bool) {
	if f.Drop {
		// The server closes the connection without a response.
		panic(http.ErrAbortHandler)
	}
	status, reason, msg := statusFor(f.Code)
	if f.Reason != "" {
		reason = f.Reason
	}
	if f.Message != "" {
		msg = f.Message
	}
	e := &apiError{Code: f.Code, Status: status, Reason: reason, Message: msg}
	if f.Refusal != "" {
		retry := f.RetryAfter
		if retry <= 0 {
			retry = time.Minute
		}
		e, _ = f.Refusal.refusal(f.now().Add(retry))
	}
	if f.RetryAfter > 0 {
		secs := int((f.RetryAfter + time.Second - 1) / time.Second)
		e.Header = http.Header{"Retry-After": {strconv.Itoa(secs)}}
	}
	writeError(w, e, oauth)
}
