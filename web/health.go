package web

import (
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func (s *server) healthz(c *gin.Context) { c.String(http.StatusOK, "ok") }

// Unready is a Deps.Ready failure: Part (such as "store", "broker" or
// "task servers") is said on the public /readyz, Err only in the logs.
type Unready struct {
	Part string
	Err  error
}

func (e *Unready) Error() string { return e.Part + " unavailable: " + e.Err.Error() }

func (e *Unready) Unwrap() error { return e.Err }

// readyz is 200 "ready" when Deps.Ready (or, without it, a store ping)
// passes, else 503 naming the part that is down ("broker unavailable").
// /readyz is public: the cause (an address, a Redis error) goes to the
// log, never into the answer.
func (s *server) readyz(c *gin.Context) {
	ctx, cancel := s.ctx(c, 3*time.Second)
	defer cancel()
	var err error
	if s.deps.Ready != nil {
		err = s.deps.Ready(ctx)
	} else if err = s.deps.DB.Ping(); err != nil {
		err = &Unready{Part: "store", Err: err}
	}
	if err != nil {
		part := "a required part"
		var u *Unready
		if errors.As(err, &u) && u.Part != "" {
			part = u.Part
		}
		s.log.Warn("not ready", "part", part, "err", err)
		s.fail(c, &httpError{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "Not ready: " + part + " unavailable.", RetryAfter: time.Second})
		return
	}
	c.String(http.StatusOK, "ready")
}

func (s *server) metricsHandler() gin.HandlerFunc {
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return gin.WrapH(h)
}
