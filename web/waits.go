package web

import (
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The bounds on long polls (GET /api/v1/events with wait): each held wait
// is a goroutine, a connection and an open file until it answers, so one
// token, one client address and everyone together may hold only so many.
const (
	// DefaultEventsWaitsPerToken is how many waits one API token may hold.
	DefaultEventsWaitsPerToken = 4
	// DefaultEventsWaitsPerAddress is how many waits one client address
	// may hold, whatever its tokens.
	DefaultEventsWaitsPerAddress = 8
	// DefaultEventsWaits is how many waits the server holds in all.
	DefaultEventsWaits = 256
	// eventsWaitRetryAfter is the Retry-After of a wait refused: a held
	// wait ends within 30s, most much sooner.
	eventsWaitRetryAfter = time.Second
)

// waitLimiter counts the long polls held, by token, by client address and
// in all, and refuses one past a bound.
type waitLimiter struct {
	perToken, perAddress, total int

	mu     sync.Mutex
	tokens map[string]int
	addrs  map[string]int
	held   int
}

func newWaitLimiter(perToken, perAddress, total int) *waitLimiter {
	if perToken <= 0 {
		perToken = DefaultEventsWaitsPerToken
	}
	if perAddress <= 0 {
		perAddress = DefaultEventsWaitsPerAddress
	}
	if total <= 0 {
		total = DefaultEventsWaits
	}
	return &waitLimiter{perToken: perToken, perAddress: perAddress, total: total, tokens: map[string]int{}, addrs: map[string]int{}}
}

// acquire holds a wait for token from addr, or answers the 429 that
// refuses it. release gives the wait back; call it once the wait is over.
func (l *waitLimiter) acquire(token, addr string) (release func(), refused *httpError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var whose string
	switch {
	case l.tokens[token] >= l.perToken:
		whose = fmt.Sprintf("this token holds %d", l.perToken)
	case l.addrs[addr] >= l.perAddress:
		whose = fmt.Sprintf("this client address holds %d", l.perAddress)
	case l.held >= l.total:
		whose = fmt.Sprintf("the server holds %d", l.total)
	}
	if whose != "" {
		return nil, &httpError{Status: http.StatusTooManyRequests, Code: "rate_limited", Field: "wait", RetryAfter: eventsWaitRetryAfter,
			Message: "Too many waiting event reads: " + whose + " already; read without wait, or retry after the time in Retry-After."}
	}
	l.tokens[token]++
	l.addrs[addr]++
	l.held++
	var once sync.Once
	return func() { once.Do(func() { l.release(token, addr) }) }, nil
}

func (l *waitLimiter) release(token, addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held--
	if l.tokens[token]--; l.tokens[token] <= 0 {
		delete(l.tokens, token)
	}
	if l.addrs[addr]--; l.addrs[addr] <= 0 {
		delete(l.addrs, addr)
	}
}
