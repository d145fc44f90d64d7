package web

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/gmail"
	"mailroom/queue/google/accounts"
	"mailroom/store"
)

// accountsView is the data of the Accounts page.
type accountsView struct {
	Accounts []gmail.AccountView
	Users    []store.User
	// Project is the project's Gmail quota use (any account's view has
	// it); nil without accounts or a budget.
	Project *gmail.QuotaView
	// OAuth: connecting through Google's consent page is possible.
	OAuth bool
	// Watch: push notifications are set up (a Pub/Sub topic); without it
	// accounts are kept in sync by polling alone.
	Watch            bool
	PollInterval     time.Duration
	FastPollInterval time.Duration
	PushURL          string
	PushAudience     string
	PushToken        bool
}

// accountPageView is the data of one account's page.
type accountPageView struct {
	Account          gmail.AccountDetail
	User             store.User
	Watch            bool
	PollInterval     time.Duration
	FastPollInterval time.Duration
}

func (g *gmailHandlers) accountsPage(c *gin.Context) {
	accs, err := g.p.Accounts()
	if err == nil {
		err = g.p.WithQuota(c.Request.Context(), accs)
	}
	if err != nil {
		g.fail(c, err)
		return
	}
	var users []store.User
	if err := g.server.deps.DB.View(func(tx *store.Tx) (err error) { users, err = tx.Users(); return err }); err != nil {
		g.fail(c, fmt.Errorf("web: list users: %w", err))
		return
	}
	for i := range accs {
		accs[i].StatusReason = statusReasonText(accs[i].StatusReason)
	}
	var project *gmail.QuotaView
	if len(accs) > 0 {
		project = accs[0].GmailQuota
	}
	g.render(c, http.StatusOK, "accounts", accountsView{
		Accounts: accs, Users: users, Project: project, OAuth: g.p.OAuthConfigured(), Watch: g.p.WatchEnabled(),
		PollInterval: g.p.PollInterval(), FastPollInterval: g.p.FastPollInterval(), PushURL: g.opts.PublicURL + "/push/gmail",
		PushAudience: g.opts.PushAudience, PushToken: g.opts.PushToken,
	})
}

func (g *gmailHandlers) accountPage(c *gin.Context) {
	d, err := g.p.Detail(c.Param("id"), 30)
	if err != nil {
		g.fail(c, err)
		return
	}
	if d.GmailQuota, err = g.p.Quota(c.Request.Context(), d.ID); err != nil {
		g.fail(c, err)
		return
	}
	d.StatusReason = statusReasonText(d.StatusReason)
	v := accountPageView{Account: d, Watch: g.p.WatchEnabled(), PollInterval: g.p.PollInterval(), FastPollInterval: g.p.FastPollInterval()}
	_ = g.server.deps.DB.View(func(tx *store.Tx) (err error) { v.User, err = tx.UserGet(d.UserID); return err })
	g.render(c, http.StatusOK, "account", v)
}

// statusReasonText is an account's statusReason as a page says it (the
// API gives the code).
func statusReasonText(reason string) string {
	if reason == accounts.ReauthRequired {
		return accounts.ReauthText
	}
	return reason
}

func (g *gmailHandlers) adminResync(c *gin.Context) {
	id := c.Param("id")
	if err := g.p.Resync(c.Request.Context(), id); err != nil {
		g.fail(c, err)
		return
	}
	g.setFlash(c, "ok", "A full sync is queued.")
	redirect(c, "/admin/accounts/"+id)
}

func (g *gmailHandlers) adminDelete(c *gin.Context) {
	v, err := g.p.Account(c.Param("id"))
	if err != nil {
		g.fail(c, err)
		return
	}
	d, err := g.p.Delete(c.Request.Context(), v.ID)
	if err != nil {
		g.fail(c, err)
		return
	}
	if d.RevokeErr != nil {
		g.setFlash(c, "error", v.Email+" is disconnected and its mirror deleted, but Google did not revoke mailroom's access ("+d.RevokeErr.Error()+"); remove it in the Google account's security settings.")
	} else {
		g.setFlash(c, "ok", v.Email+" is disconnected, its mirror deleted and its Google grant revoked.")
	}
	redirect(c, "/admin/accounts")
}

// gmailOverview is the Gmail quota on the overview page: the project's units in
// the last minute and today, and the accounts waiting for quota.
func gmailOverview(ctx context.Context, p GmailPipeline) (overviewPanel, error) {
	accs, err := p.Accounts()
	if err == nil {
		err = p.WithQuota(ctx, accs)
	}
	if err != nil || len(accs) == 0 || accs[0].GmailQuota == nil {
		return overviewPanel{}, err
	}
	q := accs[0].GmailQuota
	waiting, busiest, top := 0, "", -1
	for _, a := range accs {
		if len(a.GmailQuota.Waiting) > 0 {
			waiting++
		}
		if a.GmailQuota.UnitsLastMinute > top {
			busiest, top = a.Email, a.GmailQuota.UnitsLastMinute
		}
	}
	return overviewPanel{Title: "Gmail quota", Figures: []overviewFigure{
		{Label: "Gmail units, last minute", Value: thousands(q.ProjectUnitsLastMinute),
			Note: fmt.Sprintf("of the project's %s; busiest %s (%s of %s)", thousands(q.ProjectLimit), busiest, thousands(top), thousands(q.Setting)), Link: "/admin/accounts"},
		{Label: "Gmail units today (UTC)", Value: thousands(int(q.ProjectUnitsToday)),
			Note: "of Google's daily billing threshold, " + thousands(int(q.DailyThreshold)), Alert: q.NearDailyThreshold},
		{Label: "Accounts waiting for Gmail quota", Value: fmt.Sprintf("%d", waiting), Note: fmt.Sprintf("of %d", len(accs)),
			Alert: waiting > 0, Link: "/admin/accounts"},
	}}, nil
}
