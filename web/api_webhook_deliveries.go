package web

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

// The delivery log's page sizes.
const (
	defaultDeliveriesLimit = 50
	maxDeliveriesLimit     = 1000
)

// deliveryJSON is one delivery attempt as the API shows it.
type deliveryJSON struct {
	ID        string    `json:"id"`
	Attempt   int       `json:"attempt"`
	At        time.Time `json:"at"`
	Status    *int      `json:"status"` // null: no answer
	LatencyMs int64     `json:"latencyMs"`
	Events    int       `json:"events"`
	Response  string    `json:"response"`
	Error     string    `json:"error"`
}

func toDeliveryJSON(d store.Delivery) deliveryJSON {
	j := deliveryJSON{
		ID: d.ID(), Attempt: d.Attempt, At: d.At, LatencyMs: d.Latency.Milliseconds(),
		Events: d.Events, Response: d.Response, Error: d.Error,
	}
	if d.Status != 0 {
		j.Status = &d.Status
	}
	return j
}

// apiDeliveries is GET /api/v1/webhooks/{id}/deliveries?limit=N&cursor=C:
// the webhook's delivery attempts, newest first.
func (h webhookHandlers) apiDeliveries(c *gin.Context) {
	limit := defaultDeliveriesLimit
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDeliveriesLimit {
			h.fail(c, invalid("limit", "limit must be a whole number from 1 to 1000."))
			return
		}
		limit = n
	}
	var before uint64
	if v := c.Query("cursor"); v != "" {
		seq, ok := store.ParseDeliveryCursor(v)
		if !ok {
			h.fail(c, invalid("cursor", `cursor must be a cursor this server gave out (an answer's "next").`))
			return
		}
		before = seq
	}
	list, next, err := h.p.Deliveries(c.Param("id"), before, limit)
	if err != nil {
		h.fail(c, err)
		return
	}
	out := make([]deliveryJSON, 0, len(list))
	for _, d := range list {
		out = append(out, toDeliveryJSON(d))
	}
	cursor := ""
	if next != 0 {
		cursor = store.DeliveryCursor(next)
	}
	h.writeJSON(c, http.StatusOK, gin.H{"deliveries": out, "next": cursor})
}

// apiTest is POST /api/v1/webhooks/{id}/test: one webhook.test event, to
// this webhook alone.
func (h webhookHandlers) apiTest(c *gin.Context) {
	e, err := h.p.SendTest(c.Param("id"))
	if err != nil {
		h.fail(c, err)
		return
	}
	h.writeJSON(c, http.StatusAccepted, gin.H{"eventId": e.ID()})
}

// replayOneOf checks that a replay names exactly one of after and since.
func replayOneOf(after, since string) error {
	switch {
	case after != "" && since != "":
		return invalid("since", "Give after (a cursor) or since (a time), not both.")
	case after == "" && since == "":
		return invalid("since", `Say where to replay from: since (an RFC 3339 time such as "2026-05-01T09:00:00Z") or after (a cursor from the events feed).`)
	}
	return nil
}

// parseSince reads a replay's since: an RFC 3339 time, not in the future.
func parseSince(v string, now time.Time) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return t, invalid("since", `since must be an RFC 3339 time, such as "2026-05-01T09:00:00Z".`)
	}
	if t.After(now) {
		return t, invalid("since", "since is in the future: there is nothing to replay from it yet.")
	}
	return t, nil
}

// apiReplaySince is a replay from a time: every kept event the webhook
// takes that occurred at or after since (from the oldest kept when since
// is older).
func (h webhookHandlers) apiReplaySince(c *gin.Context, v string) {
	since, err := parseSince(v, h.now())
	if err == nil {
		err = h.p.ReplaySince(c.Param("id"), since)
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	h.writeJSON(c, http.StatusAccepted, gin.H{"replaying": true})
}
