package web

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/webhooks"
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
	Users     []store.User
	Types     []string
	// New is the webhook just made, with its secret, shown this once.
	New   *createdWebhook
	Error string
	Field string
	Form  webhookForm
}

type createdWebhook struct {
	ID, URL, Secret string
}

// webhookForm is the add form's values, kept after an error.
type webhookForm struct {
	URL    string
	UserID string
	Types  map[string]bool
}

// adminPage is GET /admin/webhooks: each endpoint with its last delivery,
// its last error and what it has yet to receive, and the add form.
func (h webhookHandlers) adminPage(c *gin.Context) { h.renderList(c, http.StatusOK, webhooksView{}) }

func (h webhookHandlers) renderList(c *gin.Context, status int, v webhooksView) {
	hooks, err := h.p.Webhooks("")
	if err != nil {
		h.fail(c, err)
		return
	}
	v.Hooks, v.Retention, v.Types = []webhookRow{}, humanDuration(h.deps.EventsRetention), store.EventTypes()
	if err := h.deps.DB.View(func(tx *store.Tx) (err error) { v.Users, err = tx.Users(); return err }); err != nil {
		h.fail(c, fmt.Errorf("web: list users: %w", err))
		return
	}
	for _, w := range hooks {
		row, err := h.row(w)
		if err != nil {
			h.fail(c, err)
			return
		}
		v.Hooks = append(v.Hooks, row)
	}
	h.render(c, status, "webhooks", v)
}

// row is w with what the page says of it.
func (h webhookHandlers) row(w store.Webhook) (webhookRow, error) {
	row := webhookRow{Webhook: w}
	b, err := h.p.Backlog(w)
	if err != nil {
		return row, err
	}
	row.Backlog, row.BacklogMore, row.Oldest = b.Events, b.More, b.Oldest
	if w.UserID != "" {
		_ = h.deps.DB.View(func(tx *store.Tx) error {
			u, err := tx.UserGet(w.UserID)
			row.UserEmail = u.Email
			return err
		})
	}
	return row, nil
}

// adminCreate is POST /admin/webhooks: a new webhook, its secret shown
// once on the page that answers.
func (h webhookHandlers) adminCreate(c *gin.Context) {
	form := webhookForm{URL: strings.TrimSpace(c.PostForm("url")), UserID: c.PostForm("userId"), Types: map[string]bool{}}
	types := c.PostFormArray("types")
	for _, t := range types {
		form.Types[t] = true
	}
	if form.UserID != "" && !h.userExists(form.UserID) {
		h.renderList(c, http.StatusNotFound, webhooksView{Error: "There is no such user.", Field: "userId", Form: form})
		return
	}
	w, secret, err := h.p.Create(c.Request.Context(), webhooks.CreateRequest{URL: form.URL, Types: types, UserID: form.UserID})
	var inv *webhooks.InvalidError
	if errors.As(err, &inv) {
		h.renderList(c, http.StatusBadRequest, webhooksView{Error: inv.Message, Field: inv.Field, Form: form})
		return
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	h.log.Info("webhook created", "webhook_id", w.ID, "user_id", w.UserID)
	h.renderList(c, http.StatusCreated, webhooksView{New: &createdWebhook{ID: w.ID, URL: w.URL, Secret: secret}})
}

// webhookView is one webhook's page: its delivery log, newest first.
type webhookView struct {
	Hook       webhookRow
	Deliveries []store.Delivery
	Next       string // the cursor of the older attempts
	Paged      bool   // this is not the first page
	Retention  string
	// Replays are the times a replay may start from, in people's words.
	Replays []replayChoice
}

type replayChoice struct {
	Value, Label string
}

// replayChoices are the replay starts the page offers: the last quarter
// hour to the last day, and everything kept.
func replayChoices(retention time.Duration) []replayChoice {
	var out []replayChoice
	for _, d := range []time.Duration{15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour} {
		if retention <= 0 || d < retention {
			out = append(out, replayChoice{d.String(), "the last " + timeSpan(d)})
		}
	}
	return append(out, replayChoice{"all", "everything kept"})
}

// adminWebhookPage is GET /admin/webhooks/{id}: the webhook, its actions
// and its delivery log.
func (h webhookHandlers) adminWebhookPage(c *gin.Context) {
	w, err := h.p.Webhook(c.Param("id"))
	if err != nil {
		h.fail(c, err)
		return
	}
	v := webhookView{Retention: humanDuration(h.deps.EventsRetention), Replays: replayChoices(h.deps.EventsRetention)}
	if v.Hook, err = h.row(w); err != nil {
		h.fail(c, err)
		return
	}
	var before uint64
	if cur := c.Query("cursor"); cur != "" {
		if before, v.Paged = store.ParseDeliveryCursor(cur); !v.Paged {
			h.fail(c, invalid("cursor", "This page of the delivery log is not one this server gave out."))
			return
		}
	}
	list, next, err := h.p.Deliveries(w.ID, before, defaultDeliveriesLimit)
	if err != nil {
		h.fail(c, err)
		return
	}
	v.Deliveries = list
	if next != 0 {
		v.Next = store.DeliveryCursor(next)
	}
	h.render(c, http.StatusOK, "webhook", v)
}

// adminTest is POST /admin/webhooks/{id}/test: one webhook.test event to
// this webhook, delivered (and logged) as any other.
func (h webhookHandlers) adminTest(c *gin.Context) {
	id := c.Param("id")
	if _, err := h.p.SendTest(id); err != nil {
		h.fail(c, err)
		return
	}
	h.setFlash(c, "ok", "A webhook.test event is on its way to this endpoint, after the batch in flight; its delivery shows below.")
	redirect(c, "/admin/webhooks/"+id)
}

// adminReplay is POST /admin/webhooks/{id}/replay: the kept events the
// webhook takes since the chosen time ("all": every kept one) are
// delivered again, in order.
func (h webhookHandlers) adminReplay(c *gin.Context) {
	id, from := c.Param("id"), c.PostForm("since")
	var err error
	switch d, perr := time.ParseDuration(from); {
	case from == "" || from == "all":
		err = h.p.Replay(id, 0)
	case perr == nil && d > 0:
		err = h.p.ReplaySince(id, h.now().Add(-d))
	default:
		err = invalid("since", "Choose how far back to replay from.")
	}
	if err != nil {
		h.fail(c, err)
		return
	}
	h.setFlash(c, "ok", "Replaying the kept events this webhook takes from then on, in order, after the batch in flight.")
	redirect(c, "/admin/webhooks/"+id)
}

// adminDelete is POST /admin/webhooks/{id}/delete.
func (h webhookHandlers) adminDelete(c *gin.Context) {
	if err := h.p.Delete(c.Param("id")); err != nil {
		h.fail(c, err)
		return
	}
	h.setFlash(c, "ok", "The webhook is deleted; it receives nothing more.")
	redirect(c, "/admin/webhooks")
}
