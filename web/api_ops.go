package web

import (
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"
)

// apiBackup streams a consistent copy of the bbolt file (GET
// /api/v1/backup, admin tokens only: it holds every secret mailroom keeps).
func (s *server) apiBackup(c *gin.Context) {
	name := fmt.Sprintf("mailroom-%s.db", s.now().UTC().Format("20060102-150405"))
	c.Header("Content-Type", "application/octet-stream")
	c.Header("Content-Disposition", `attachment; filename="`+name+`"`)
	c.Status(http.StatusOK)
	if _, err := s.deps.DB.Backup(c.Writer); err != nil {
		s.log.Error("backup", "err", err)
		// The status is sent; cut the stream so the client sees a short copy.
		panic(http.ErrAbortHandler)
	}
}

type debugTasksRequest struct {
	Count   int    `json:"count"`
	Fail    string `json:"fail"`
	SleepMS int    `json:"sleepMs"`
}

// apiDebugTasks is POST /api/v1/debug/tasks (--debug-tasks only).
func (s *server) apiDebugTasks(c *gin.Context) {
	var req debugTasksRequest
	if err := bindJSON(c, &req); err != nil {
		s.fail(c, err)
		return
	}
	switch {
	case req.Count < 1 || req.Count > 1_000_000:
		s.fail(c, invalid("count", "count must be between 1 and 1,000,000."))
		return
	case req.Fail != "" && req.Fail != "retry" && req.Fail != "permanent":
		s.fail(c, invalid("fail", `fail must be "", "retry" or "permanent".`))
		return
	case req.SleepMS < 0 || req.SleepMS > 60_000:
		s.fail(c, invalid("sleepMs", "sleepMs must be between 0 and 60000."))
		return
	}
	n, err := s.deps.DebugTasks.EnqueueDebug(req.Count, req.Fail, req.SleepMS)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeJSON(c, http.StatusAccepted, gin.H{"enqueued": n})
}
