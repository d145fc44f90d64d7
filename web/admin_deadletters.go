package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/gin-gonic/gin"

	"mailroom/queue"
)

type typeCount struct {
	Type  string
	Count int
}

type deadLettersView struct {
	Types      []typeCount
	Type       string
	Total      int // in the archive, of every type
	Items      []queue.DeadLetter
	Cursor     string
	Next       string
	CanRedrive bool
	CanAlert   bool
	// Redriven are the tasks a redrive from this page just made, with
	// what became of them; Settling is set while one has not finished.
	Redriven []redrivenRow
	Settling bool
}

// redrivenRow is a redriven task and its outcome.
type redrivenRow struct {
	TaskID string
	queue.TaskOutcome
}

// maxRedrivenShown is how many redriven tasks the page follows.
const maxRedrivenShown = 20

// redrivenRows reads ?redriven=ID,ID (the tasks a redrive made) and says
// what became of each.
func (s *server) redrivenRows(c *gin.Context) ([]redrivenRow, bool, error) {
	raw := c.Query("redriven")
	if raw == "" || s.deps.Queue == nil {
		return nil, false, nil
	}
	var rows []redrivenRow
	settling := false
	for _, id := range strings.Split(raw, ",") {
		if id == "" || len(id) > 64 || len(rows) == maxRedrivenShown {
			continue
		}
		o, err := s.deps.Queue.Outcome(id)
		if err != nil {
			return nil, false, err
		}
		settling = settling || o.State == queue.OutcomeWaiting || o.State == queue.OutcomeRetrying
		rows = append(rows, redrivenRow{TaskID: id, TaskOutcome: o})
	}
	return rows, settling, nil
}

type deadLetterView struct {
	Letter     queue.DeadLetter
	Payload    string
	CanRedrive bool
}

// typeCounts lists the table's types and any other type in the archive,
// with how many dead letters each has.
func (s *server) typeCounts() ([]typeCount, int, error) {
	if s.deps.Queue == nil {
		return nil, 0, errNoQueue()
	}
	counts, err := s.deps.Queue.DeadLetterCounts()
	if err != nil {
		return nil, 0, fmt.Errorf("web: %w", err)
	}
	var out []typeCount
	seen := map[string]bool{}
	total := 0
	for _, tt := range s.deps.Queue.Table().Types() {
		out = append(out, typeCount{Type: tt.Name, Count: counts[tt.Name]})
		seen[tt.Name] = true
	}
	var others []typeCount
	for typ, n := range counts {
		total += n
		if !seen[typ] {
			others = append(others, typeCount{Type: typ, Count: n})
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].Type < others[j].Type })
	return append(out, others...), total, nil
}

func (s *server) deadLettersPage(c *gin.Context) {
	q, err := s.parseDeadLetterQuery(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	types, total, err := s.typeCounts()
	if err != nil {
		s.fail(c, err)
		return
	}
	items, next, err := s.deadLetters(q)
	if err != nil {
		s.fail(c, err)
		return
	}
	redriven, settling, err := s.redrivenRows(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.render(c, http.StatusOK, "deadletters", deadLettersView{
		Types: types, Type: q.Type, Total: total, Items: items, Cursor: q.Cursor, Next: next,
		CanRedrive: s.deps.Queue != nil, CanAlert: s.deps.Alerts != nil, Redriven: redriven, Settling: settling,
	})
}

func (s *server) deadLetterPage(c *gin.Context) {
	d, err := s.deadLetter(c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	s.render(c, http.StatusOK, "deadletter", deadLetterView{Letter: d, Payload: prettyJSON(payloadJSON(d.Payload)), CanRedrive: s.deps.Queue != nil})
}

// adminRedriveOne sends one dead letter again, then follows its new task
// on the dead letters page until it succeeds or fails again.
func (s *server) adminRedriveOne(c *gin.Context) {
	id := c.Param("id")
	if s.deps.Queue == nil {
		s.fail(c, errNoQueue())
		return
	}
	tasks, _, err := s.deps.Queue.RedriveTasks([]string{id})
	if err != nil {
		s.fail(c, fmt.Errorf("web: redrive: %w", err))
		return
	}
	if len(tasks) == 0 {
		s.setFlash(c, "error", fmt.Sprintf("Dead letter %s is gone: it was already redriven or discarded.", id))
		redirect(c, "/admin/deadletters")
		return
	}
	s.setFlash(c, "ok", fmt.Sprintf("Dead letter %s is queued again; its outcome shows below.", id))
	redirect(c, "/admin/deadletters?redriven="+url.QueryEscape(tasks[0].TaskID))
}

func (s *server) adminDiscard(c *gin.Context) {
	id := c.Param("id")
	err := s.discard(id)
	var e *httpError
	switch {
	case errors.As(err, &e) && e.Status == 404:
		s.setFlash(c, "error", fmt.Sprintf("Dead letter %s is gone: it was already redriven or discarded.", id))
	case err != nil:
		s.fail(c, err)
		return
	default:
		s.setFlash(c, "ok", fmt.Sprintf("Dead letter %s is discarded.", id))
	}
	redirect(c, "/admin/deadletters")
}

func (s *server) adminRedriveType(c *gin.Context) {
	typ := c.PostForm("type")
	if typ == "" {
		s.fail(c, invalid("type", "Choose a task type to redrive."))
		return
	}
	n, err := s.redriveType(typ)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.setFlash(c, "ok", fmt.Sprintf("%s of type %s queued again.", plural(n, "dead letter", "dead letters"), typ))
	redirect(c, "/admin/deadletters?type="+url.QueryEscape(typ))
}

func (s *server) adminTestAlert(c *gin.Context) {
	if s.deps.Alerts == nil {
		s.fail(c, unavailable("Alerts are not wired in this server."))
		return
	}
	kind, text := sendTestAlert(c.Request.Context(), s.deps.Alerts)
	s.setFlash(c, kind, text)
	redirect(c, "/admin/deadletters")
}
