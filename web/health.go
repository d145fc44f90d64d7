package web

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (s *server) healthz(c *gin.Context) { c.String(http.StatusOK, "ok") }

// readyz is 200 "ready" when Deps.Ready (or, without it, a store ping)
// passes, else 503 with the reason.
func (s *server) readyz(c *gin.Context) {
	ctx, cancel := s.ctx(c, 3*time.Second)
	defer cancel()
	var err error
	if s.deps.Ready != nil {
		err = s.deps.Ready(ctx)
	} else {
		err = s.deps.DB.Ping()
	}
	if err != nil {
		s.fail(c, &httpError{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "Not ready: " + err.Error(), RetryAfter: time.Second, Err: err})
		return
	}
	c.String(http.StatusOK, "ready")
}

func (s *server) metricsHandler() gin.HandlerFunc {
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return gin.WrapH(h)
}
