package web

import "github.com/gin-gonic/gin"

// routes registers every route of this package, one a line, then the
// extensions'.
func (s *server) routes(e *gin.Engine) {
	e.GET("/healthz", s.healthz)
	e.HEAD("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.HEAD("/readyz", s.readyz)
	e.GET("/metrics", s.metricsHandler())
	e.GET("/static/*filepath", s.serveStatic)
	e.GET("/", func(c *gin.Context) { Redirect(c, "/admin") })

	api := e.Group("/api/v1", s.apiAuth)
	api.POST("/users", s.createUser)
	api.GET("/users", s.listUsers)
	api.GET("/deadletters", s.apiListDeadLetters)
	api.POST("/deadletters/redrive", s.apiRedrive)
	api.GET("/deadletters/:id", s.apiGetDeadLetter)
	api.DELETE("/deadletters/:id", s.apiDiscardDeadLetter)
	api.POST("/deadletters/:id/redrive", s.apiRedriveOne)
	api.GET("/queues", s.apiQueues)

	e.GET("/admin/login", s.loginPage)
	e.POST("/admin/login", s.login)

	admin := e.Group("/admin", s.requireAdmin)
	admin.GET("", s.overviewPage)
	admin.GET("/overview.json", s.overviewJSON)
	admin.GET("/logout", s.logoutPage)
	admin.POST("/logout", s.logout)
	admin.GET("/deadletters", s.deadLettersPage)
	admin.POST("/deadletters/redrive", s.adminRedriveType)
	admin.GET("/deadletters/:id", s.deadLetterPage)
	admin.POST("/deadletters/:id/redrive", s.adminRedriveOne)
	admin.POST("/deadletters/:id/discard", s.adminDiscard)
	admin.POST("/alerts/test", s.adminTestAlert)
	admin.GET("/tokens", s.tokensPage)
	admin.POST("/tokens", s.createToken)
	admin.POST("/tokens/:id/revoke", s.revokeToken)

	r := Routers{API: api, Admin: admin, Public: &e.RouterGroup, RequireAdmin: s.requireAdmin}
	for _, ext := range s.deps.Extensions {
		ext.Routes(r)
	}
}
