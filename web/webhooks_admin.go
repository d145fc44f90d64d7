package web

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/store"
)

// webhookRow is a webhook on the admin page.
type webhookRow struct {
	store.Webhook
	UserEmail   string
	Backlog     int
	BacklogMore bool
	Oldest      time.Time
}

type webhooksView struct {
	Hooks     []webhookRow
	Retention string
}

// adminPage is GET /admin/webhooks: each endpoint with its last delivery,
// its last error and what it has yet to receive.
func (h webhookHandlers) adminPage(c *gin.Context) {
	hooks, err := h.p.Webhooks("")
	if err != nil {
		h.fail(c, err)
		return
	}
	v := webhooksView{Hooks: []webhookRow{}, Retention: humanDuration(h.deps.EventsRetention)}
	for _, w := range hooks {
		row := webhookRow{Webhook: w}
		b, err := h.p.Backlog(w)
		if err != nil {
			h.fail(c, err)
			return
		}
		row.Backlog, row.BacklogMore, row.Oldest = b.Events, b.More, b.Oldest
		if w.UserID != "" {
			_ = h.deps.DB.View(func(tx *store.Tx) error {
				u, err := tx.UserGet(w.UserID)
				row.UserEmail = u.Email
				return err
			})
		}
		v.Hooks = append(v.Hooks, row)
	}
	h.render(c, http.StatusOK, "webhooks", v)
}

// adminTest is POST /admin/webhooks/{id}/test: a signed delivery of no
// events, now, and what the endpoint answered.
func (h webhookHandlers) adminTest(c *gin.Context) {
	if err := h.p.TestDelivery(c.Request.Context(), c.Param("id")); err != nil {
		h.setFlash(c, "error", fmt.Sprintf("The test delivery failed: %v", err))
	} else {
		h.setFlash(c, "ok", "The endpoint took the test delivery (a 2xx).")
	}
	redirect(c, "/admin/webhooks")
}

// adminReplay is POST /admin/webhooks/{id}/replay: every kept event the
// webhook takes is delivered again, in order.
func (h webhookHandlers) adminReplay(c *gin.Context) {
	if err := h.p.Replay(c.Param("id"), 0); err != nil {
		h.fail(c, err)
		return
	}
	h.setFlash(c, "ok", "Replaying every kept event this webhook takes, in order, after the batch in flight.")
	redirect(c, "/admin/webhooks")
}
