package app

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/web"
)

// buildWeb builds the HTTP handler over the app's parts, with the
// extensions the pipelines registered and the operations routes.
func (a *App) buildWeb() error {
	generated, err := web.EnsureAdminPassword(a.db, a.cfg.AdminPassword)
	if err != nil {
		return err
	}
	a.generatedPassword = generated
	exts := append(append([]web.Extension{opsExtension{a}}, a.extensions...), a.setupExtension())
	h, err := web.New(web.Deps{
		Logger:         a.log,
		DB:             a.db,
		Queue:          a.queue,
		Gatherer:       a.registry,
		Ready:          a.ready,
		APIToken:       a.cfg.APIToken,
		AdminPassword:  a.cfg.AdminPassword,
		PublicURL:      a.cfg.BaseURL(),
		TrustedProxies: a.cfg.TrustedProxies,
		Demo:           a.cfg.Demo,
		Alerts:         a.alerts,
		Extensions:     exts,
	})
	if err != nil {
		return err
	}
	a.handler = h
	return nil
}

// opsExtension adds the operations routes: the hot backup and, with
// --debug-tasks, the debug task API used by the process-level tests.
type opsExtension struct{ a *App }

func (o opsExtension) Nav() []web.NavItem { return nil }

func (o opsExtension) Routes(r web.Routers) {
	r.API.GET("/backup", o.backup)
	if o.a.debug != nil {
		r.API.POST("/debug/tasks", o.debugEnqueue)
	}
}

// backup streams a consistent copy of the bbolt file (GET /api/v1/backup).
func (o opsExtension) backup(c *gin.Context) {
	name := fmt.Sprintf("mailroom-%s.db", time.Now().UTC().Format("20060102-150405"))
	c.Header("Content-Type", "application/octet-stream")
	c.Header("Content-Disposition", `attachment; filename="`+name+`"`)
	c.Status(http.StatusOK)
	if _, err := o.a.db.Backup(c.Writer); err != nil {
		o.a.log.Error("backup", "err", err)
		// The status is sent; cut the stream so the client sees a short copy.
		panic(http.ErrAbortHandler)
	}
}

type debugEnqueueRequest struct {
	Count   int    `json:"count"`
	Fail    string `json:"fail"`
	SleepMS int    `json:"sleepMs"`
}

func (o opsExtension) debugEnqueue(c *gin.Context) {
	var req debugEnqueueRequest
	if err := web.BindJSON(c, &req); err != nil {
		web.Fail(c, err)
		return
	}
	if req.Count < 1 || req.Count > 1_000_000 {
		web.Fail(c, web.Invalid("count", "count must be between 1 and 1,000,000"))
		return
	}
	if req.Fail != "" && req.Fail != "retry" && req.Fail != "permanent" {
		web.Fail(c, web.Invalid("fail", `fail must be "", "retry" or "permanent"`))
		return
	}
	n, err := o.a.debug.enqueue(req.Count, debugPayload{Fail: req.Fail, SleepMS: req.SleepMS})
	if err != nil {
		web.Fail(c, err)
		return
	}
	web.JSON(c, http.StatusAccepted, gin.H{"enqueued": n, "log": strconv.Quote(DebugLogName)})
}
