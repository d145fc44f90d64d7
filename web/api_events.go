package web

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

// The events feed's limits (CONTRACT.md, "Events").
const (
	defaultEventsLimit = 100
	maxEventsLimit     = 1000
	maxEventsWait      = 30 * time.Second
	// eventsScan bounds the events one read looks at when a filter skips
	// most of them; the answer's next continues from where it stopped.
	eventsScan = 10000
)

// eventsQuery is a validated GET /api/v1/events.
type eventsQuery struct {
	q    store.EventQuery
	now  bool // after=now: from the head at the time of the request
	wait time.Duration
}

func parseEventsQuery(c *gin.Context) (eventsQuery, error) {
	var e eventsQuery
	e.q.Limit = defaultEventsLimit
	e.q.Scan = eventsScan
	e.q.UserID = c.Query("userId")
	switch after := c.Query("after"); after {
	case "":
	case "now":
		e.now = true
	default:
		seq, ok := store.ParseEventCursor(after)
		if !ok {
			return e, invalid("after", `after must be a cursor this server gave out (an answer's "next"), or "now".`)
		}
		e.q.After = seq
	}
	if v := c.Query("types"); v != "" {
		known := map[string]bool{}
		for _, t := range store.EventTypes() {
			known[t] = true
		}
		e.q.Types = map[string]bool{}
		for _, t := range strings.Split(v, ",") {
			t = strings.TrimSpace(t)
			if !known[t] {
				return e, invalid("types", "types must be a comma-separated list of event types ("+strings.Join(store.EventTypes(), ", ")+"); "+strconv.Quote(t)+" is not one.")
			}
			e.q.Types[t] = true
		}
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEventsLimit {
			return e, invalid("limit", "limit must be a whole number from 1 to 1000.")
		}
		e.q.Limit = n
	}
	if v := c.Query("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > maxEventsWait {
			return e, invalid("wait", `wait must be a duration from 0s to 30s, such as "20s".`)
		}
		e.wait = d
	}
	return e, nil
}

// apiEvents is GET /api/v1/events: the events after a cursor, oldest
// first; with wait, it answers as soon as one arrives, or empty once the
// wait is over. A user token's query is its own user's (scope inQuery).
// The waits held at once are bounded per token, per client address and in
// all (s.waits): past one, 429.
func (s *server) apiEvents(c *gin.Context) {
	e, err := parseEventsQuery(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if e.wait > 0 {
		release, refused := s.waits.acquire("token "+callerOf(c).tokenID, c.ClientIP())
		if refused != nil {
			s.fail(c, refused)
			return
		}
		defer release()
	}
	deadline := time.Now().Add(e.wait)
	for {
		// The wake-up is taken before the read, so an event committed
		// between the read and the wait is not missed; a user's read is
		// woken only by that user's events.
		changed := s.deps.DB.EventsChangedFor(e.q.UserID)
		var events []store.Event
		var next, head uint64
		err := s.deps.DB.View(func(tx *store.Tx) (err error) {
			head = tx.EventsHead()
			if e.now {
				e.q.After, e.now = head, false
			}
			events, next, err = tx.Events(e.q)
			return err
		})
		if errors.Is(err, store.ErrCursorExpired) {
			s.fail(c, &httpError{Status: http.StatusGone, Code: "cursor_expired", Field: "after",
				Message: "The events after this cursor are older than MAILROOM_EVENTS_RETENTION and no longer kept; start again without after (from the oldest kept) or with after=now."})
			return
		}
		if err != nil {
			s.fail(c, err)
			return
		}
		e.q.After = next
		if len(events) > 0 || next < head {
			// Found some, or a filter stopped the scan early: answer, and
			// the reader continues from next.
			s.writeJSON(c, http.StatusOK, gin.H{"events": events, "next": store.EventCursor(next)})
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			s.writeJSON(c, http.StatusOK, gin.H{"events": events, "next": store.EventCursor(next)})
			return
		}
		s.log.Debug("events read waits", "user_id", e.q.UserID, "left", left)
		t := time.NewTimer(left)
		select {
		case <-changed:
			s.log.Debug("events read woken", "user_id", e.q.UserID)
		case <-t.C:
		case <-c.Request.Context().Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}
