package web

import "github.com/gin-gonic/gin"

// routes registers every route of the app, one a line, grouped by who may
// call it. Who may call is decided here, by each group's middleware and, for
// the user-scoped API, by the scope named on the line; handlers never check.
//
//   - public: anyone (health, metrics with its own token when set, static
//     files, the login form);
//   - push: Google's Pub/Sub (its OIDC token or the shared ?token=,
//     checked by the Gmail pipeline; failed tokens rate limited per client
//     IP and subscription, apart from the API's and /metrics' counters);
//   - admin session: the admin page (a session cookie; CSRF on every
//     state-changing method);
//   - API, admin only: an admin token (a user token: 403 forbidden);
//   - API, user-scoped: an admin token, or a user token for its own user
//     (another user's resource: 404 not_found, as if it did not exist).
func (s *server) routes(e *gin.Engine) {
	h := handlers{gm: &gmailHandlers{server: s, p: s.deps.Gmail, opts: s.deps.GmailOptions}, rl: &rulesHandlers{server: s, p: s.deps.Rules}, fm: &formsHandlers{server: s, p: s.deps.Forms}, cn: s.connectHandlers()}
	s.publicRoutes(e, h)
	s.adminRoutes(e, h)
	api := e.Group("/api/v1", s.apiAuth)
	s.adminAPIRoutes(api.Group("", s.adminOnly))
	s.userAPIRoutes(api, h)
}

// handlers are the pipelines' route handlers.
type handlers struct {
	gm *gmailHandlers
	rl *rulesHandlers
	fm *formsHandlers
	cn *connectHandlers // nil without Gmail or Deps.Connect
}

// publicRoutes: anyone, and Google's push.
func (s *server) publicRoutes(e *gin.Engine, h handlers) {
	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.HEAD("/readyz", s.readyz)
	e.GET("/metrics", s.metricsAuth, s.metricsHandler())
	e.GET("/static/*filepath", s.serveStatic)
	e.GET("/", func(c *gin.Context) { redirect(c, "/admin") })
	e.GET("/admin/login", s.loginPage)
	e.POST("/admin/login", s.login)
	e.GET("/api/v1/openapi.json", s.openAPIDoc)

	// Push: the Gmail pipeline checks the token; failures are limited here.
	if s.deps.Gmail != nil {
		e.POST("/push/gmail", s.pushLimit, h.gm.push)
	}
	// Connect links (the token in the path is the secret; the page's
	// continue button posts with a form token bound to a cookie) and Google's
	// redirect after consent (its state names the link; an admin-page
	// connect also needs the session that started it).
	if h.cn != nil {
		e.GET("/connect/:token", h.cn.open)
		e.POST("/connect/:token", h.cn.follow)
		e.GET("/oauth/google/callback", h.cn.callback)
	}
}

// adminRoutes: the admin page, with a session (and CSRF on every
// state-changing method).
func (s *server) adminRoutes(e *gin.Engine, h handlers) {
	gm, rl, fm := h.gm, h.rl, h.fm
	admin := e.Group("/admin", s.requireAdmin)
	admin.GET("", s.overviewPage)
	admin.GET("/overview.json", s.overviewJSON)
	admin.GET("/logout", s.logoutPage)
	admin.POST("/logout", s.logout)
	admin.POST("/sessions/end", s.endSessions)
	admin.POST("/sessions/:id/end", s.endSession)
	admin.GET("/deadletters", s.deadLettersPage)
	admin.POST("/deadletters/redrive", s.adminRedriveType)
	admin.GET("/deadletters/:id", s.deadLetterPage)
	admin.POST("/deadletters/:id/redrive", s.adminRedriveOne)
	admin.POST("/deadletters/:id/discard", s.adminDiscard)
	admin.POST("/alerts/test", s.adminTestAlert)
	admin.GET("/tokens", s.tokensPage)
	if p := s.deps.Webhooks; p != nil {
		wh := webhookHandlers{server: s, p: p}
		admin.GET("/webhooks", wh.adminPage)
		admin.POST("/webhooks", wh.adminCreate)
		admin.GET("/webhooks/:id", wh.adminWebhookPage)
		admin.POST("/webhooks/:id/test", wh.adminTest)
		admin.POST("/webhooks/:id/replay", wh.adminReplay)
		admin.POST("/webhooks/:id/delete", wh.adminDelete)
	}
	admin.POST("/tokens", s.createToken)
	admin.POST("/tokens/:id/revoke", s.revokeToken)
	if h.cn != nil {
		e.POST("/oauth/google/start", s.requireAdmin, h.cn.adminStart)
		admin.POST("/accounts/:id/connect-link", h.cn.adminLink)
	}
	if s.deps.Gmail != nil {
		admin.GET("/accounts", gm.accountsPage)
		admin.GET("/accounts/:id", gm.accountPage)
		admin.POST("/accounts/:id/resync", gm.adminResync)
		admin.POST("/accounts/:id/delete", gm.adminDelete)
	}
	if s.deps.Rules != nil {
		admin.GET("/rules", rl.usersPage)
		admin.GET("/rules/:uid", rl.rulesPage)
		admin.POST("/rules/:uid/save", rl.saveForm)
		admin.POST("/rules/:uid/delete", rl.deleteForm)
		admin.POST("/rules/:uid/preview.json", rl.previewJSON)
		admin.GET("/rules/:uid/status.json", rl.statusJSON)
	}
	if s.deps.Forms != nil {
		admin.GET("/forms", fm.formsPage)
		admin.POST("/forms/:id/delete", fm.adminDelete)
		admin.POST("/forms/:id/retry", fm.adminRetry)
	}
	if d := s.deps.DemoSource; d != nil {
		dp := demoPages{server: s, src: d}
		admin.GET("/demo", dp.mailbox)
		admin.GET("/demo/mailbox", dp.mailbox)
		admin.GET("/demo/sheets", dp.sheets)
		admin.GET("/demo/alerts", dp.alerts)
	}
	if o := s.deps.Setup; o != nil {
		x := &setupHandlers{server: s, opts: *o}
		admin.GET("/setup", x.page)
		admin.POST("/setup/alert", x.testAlert)
		admin.POST("/setup/google", x.checkGoogle)
	}
}

// adminAPIRoutes: the API for admin tokens only (a user token: 403).
func (s *server) adminAPIRoutes(adm *gin.RouterGroup) {
	adm.POST("/users", s.createUser)
	adm.GET("/users", s.listUsers)
	adm.POST("/tokens", s.apiCreateToken)
	adm.GET("/tokens", s.apiListTokens)
	adm.DELETE("/tokens/:id", s.apiDeleteToken)
	adm.GET("/deadletters", s.apiListDeadLetters)
	adm.POST("/deadletters/redrive", s.apiRedrive)
	adm.GET("/deadletters/:id", s.apiGetDeadLetter)
	adm.DELETE("/deadletters/:id", s.apiDiscardDeadLetter)
	adm.POST("/deadletters/:id/redrive", s.apiRedriveOne)
	adm.GET("/queues", s.apiQueues)
	adm.GET("/backup", s.apiBackup)
	if s.deps.DebugTasks != nil {
		adm.POST("/debug/tasks", s.apiDebugTasks)
	}
}

// userAPIRoutes: the API for admin tokens and user tokens, each line
// naming how a user token's reach is checked (another user's: 404).
func (s *server) userAPIRoutes(api *gin.RouterGroup, h handlers) {
	gm, rl, fm := h.gm, h.rl, h.fm
	api.GET("/events", s.scope(inQuery("userId")), s.apiEvents)
	if p := s.deps.Webhooks; p != nil {
		wh := webhookHandlers{server: s, p: p}
		api.POST("/webhooks", s.scope(inBody), wh.apiCreate)
		api.GET("/webhooks", s.scope(inQuery("userId")), wh.apiList)
		api.GET("/webhooks/:id", s.scope(webhookIn("id")), wh.apiGet)
		api.DELETE("/webhooks/:id", s.scope(webhookIn("id")), wh.apiDelete)
		api.POST("/webhooks/:id/replay", s.scope(webhookIn("id")), wh.apiReplay)
		api.POST("/webhooks/:id/test", s.scope(webhookIn("id")), wh.apiTest)
		api.GET("/webhooks/:id/deliveries", s.scope(webhookIn("id")), wh.apiDeliveries)
	}
	if s.deps.Gmail != nil {
		api.POST("/accounts", s.scope(inBody), gm.apiConnect)
		api.GET("/accounts", s.scope(inQuery("userId")), gm.apiAccounts)
		api.GET("/accounts/:id", s.scope(accountIn("id")), gm.apiAccount)
		api.POST("/accounts/:id/resync", s.scope(accountIn("id")), gm.apiResync)
		api.DELETE("/accounts/:id", s.scope(accountIn("id")), gm.apiDelete)
		api.GET("/accounts/:id/messages", s.scope(accountIn("id")), gm.apiMessages)
		api.GET("/accounts/:id/messages/:messageId", s.scope(accountIn("id")), gm.apiMessage)
	}
	if h.cn != nil {
		api.POST("/users/:uid/connect", s.scope(userIn("uid")), h.cn.apiCreate)
	}
	if s.deps.Rules != nil {
		api.GET("/users/:uid/rules", s.scope(userIn("uid")), rl.apiList)
		api.POST("/users/:uid/rules", s.scope(userIn("uid")), rl.apiCreate)
		api.GET("/users/:uid/reclassify", s.scope(userIn("uid")), rl.apiStatus)
		api.GET("/rules/:id", s.scope(ruleIn("id")), rl.apiGet)
		api.PUT("/rules/:id", s.scope(ruleIn("id")), rl.apiUpdate)
		api.DELETE("/rules/:id", s.scope(ruleIn("id")), rl.apiDelete)
	}
	if s.deps.Forms != nil {
		api.POST("/forms", s.scope(inBody), fm.apiCreate)
		api.GET("/forms", s.scope(inQuery("userId")), fm.apiList)
		api.GET("/forms/:id", s.scope(formIn("id")), fm.apiGet)
		api.PUT("/forms/:id", s.scope(formIn("id")), fm.apiRepoint)
		api.DELETE("/forms/:id", s.scope(formIn("id")), fm.apiDelete)
		api.POST("/forms/:id/retry", s.scope(formIn("id")), fm.apiRetry)
		api.POST("/forms/:id/submissions", s.scope(formIn("id")), fm.apiSubmit)
	}
}

// buildNav is the admin navigation, in the order of the pages above.
func (s *server) buildNav() []navItem {
	nav := []navItem{{Title: "Overview", Path: "/admin"}, {Title: "Dead letters", Path: "/admin/deadletters"}}
	if s.deps.DemoSource != nil {
		nav = append(nav, navItem{Title: "Demo mailbox", Path: "/admin/demo"}, navItem{Title: "Demo sheets", Path: "/admin/demo/sheets"})
	}
	if s.deps.Gmail != nil {
		nav = append(nav, navItem{Title: "Accounts", Path: "/admin/accounts"})
	}
	if s.deps.Rules != nil {
		nav = append(nav, navItem{Title: "Rules", Path: "/admin/rules"})
	}
	if s.deps.Forms != nil {
		nav = append(nav, navItem{Title: "Forms", Path: "/admin/forms"})
	}
	if s.deps.Webhooks != nil {
		nav = append(nav, navItem{Title: "Webhooks", Path: "/admin/webhooks"})
	}
	if s.deps.Setup != nil {
		nav = append(nav, navItem{Title: "Setup", Path: "/admin/setup"})
	}
	return append(nav, navItem{Title: "API tokens", Path: "/admin/tokens"})
}
