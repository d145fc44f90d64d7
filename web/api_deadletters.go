package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue"
	"mailroom/store"
)

// Dead-letter page sizes.
const (
	defaultDeadLetterLimit = 50
	maxDeadLetterLimit     = 500
	maxRedriveIDs          = 1000
)

type deadLetterJSON struct {
	ID            string          `json:"id"`
	Type          string          `json:"type"`
	Queue         string          `json:"queue"`
	Payload       json.RawMessage `json:"payload"`
	Error         string          `json:"error"`
	Attempts      int             `json:"attempts"`
	FirstFailedAt time.Time       `json:"firstFailedAt"`
	LastFailedAt  time.Time       `json:"lastFailedAt"`
}

func toDeadLetterJSON(d queue.DeadLetter) deadLetterJSON {
	return deadLetterJSON{
		ID: d.ID, Type: d.Type, Queue: d.Queue, Payload: payloadJSON(d.Payload), Error: d.Error,
		Attempts: d.Attempts, FirstFailedAt: d.FirstFailedAt, LastFailedAt: d.LastFailedAt,
	}
}

// payloadJSON makes sure a stored payload encodes: JSON as it is, anything
// else as a JSON string, nothing as null.
func payloadJSON(p json.RawMessage) json.RawMessage {
	switch {
	case len(p) == 0:
		return json.RawMessage("null")
	case json.Valid(p):
		return p
	}
	raw, _ := json.Marshal(string(p))
	return raw
}

// deadLetterQuery is a validated list request.
type deadLetterQuery struct {
	Type   string
	Cursor string
	Limit  int
}

func (s *server) parseDeadLetterQuery(c *gin.Context) (deadLetterQuery, error) {
	q := deadLetterQuery{Type: c.Query("type"), Cursor: c.Query("cursor"), Limit: defaultDeadLetterLimit}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxDeadLetterLimit {
			return q, invalid("limit", fmt.Sprintf("limit must be a whole number from 1 to %d.", maxDeadLetterLimit))
		}
		q.Limit = n
	}
	if q.Cursor != "" {
		if _, err := store.Seq(q.Cursor); err != nil {
			return q, invalid("cursor", "cursor is not one this server gave out; use the \"next\" value of the previous page.")
		}
	}
	if q.Type != "" && !s.knownType(q.Type) {
		return q, invalid("type", fmt.Sprintf("There is no task type %q.", q.Type))
	}
	return q, nil
}

// knownType reports whether typ is in the task table (any type when the
// queue is not wired: nothing is read then).
func (s *server) knownType(typ string) bool {
	if s.deps.Queue == nil {
		return true
	}
	_, ok := s.deps.Queue.Table().Lookup(typ)
	return ok
}

// The dead-letter archive is the queue's: it is read, discarded and
// redriven through it, and without a queue there is none to show.
func (s *server) deadLetters(q deadLetterQuery) (list []queue.DeadLetter, next string, err error) {
	if s.deps.Queue == nil {
		return nil, "", errNoQueue()
	}
	list, next, err = s.deps.Queue.DeadLetters(q.Type, q.Cursor, q.Limit)
	if err != nil {
		return nil, "", fmt.Errorf("web: list dead letters: %w", err)
	}
	return list, next, nil
}

func (s *server) deadLetter(id string) (queue.DeadLetter, error) {
	if s.deps.Queue == nil {
		return queue.DeadLetter{}, errNoQueue()
	}
	d, err := s.deps.Queue.DeadLetter(id)
	if errors.Is(err, store.ErrNotFound) {
		return d, notFound(fmt.Sprintf("There is no dead letter %q (it may have been redriven or discarded).", id))
	}
	return d, err
}

func (s *server) discard(id string) error {
	if s.deps.Queue == nil {
		return errNoQueue()
	}
	err := s.deps.Queue.Discard(id)
	if errors.Is(err, store.ErrNotFound) {
		return notFound(fmt.Sprintf("There is no dead letter %q (it may have been redriven or discarded).", id))
	}
	return err
}

func errNoQueue() error {
	return unavailable("The task queues are not running, so their dead letters cannot be read, redriven or discarded now.")
}

func (s *server) redriveIDs(ids []string) (int, []string, error) {
	if s.deps.Queue == nil {
		return 0, nil, errNoQueue()
	}
	n, missing, err := s.deps.Queue.Redrive(ids)
	if err != nil {
		return 0, nil, fmt.Errorf("web: redrive: %w", err)
	}
	return n, missing, nil
}

func (s *server) redriveType(typ string) (int, error) {
	if s.deps.Queue == nil {
		return 0, errNoQueue()
	}
	if !s.knownType(typ) {
		return 0, invalid("type", fmt.Sprintf("There is no task type %q.", typ))
	}
	n, err := s.deps.Queue.RedriveType(typ)
	if err != nil {
		return 0, fmt.Errorf("web: redrive type %s: %w", typ, err)
	}
	return n, nil
}

func (s *server) apiListDeadLetters(c *gin.Context) {
	q, err := s.parseDeadLetterQuery(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	list, next, err := s.deadLetters(q)
	if err != nil {
		s.fail(c, err)
		return
	}
	out := make([]deadLetterJSON, 0, len(list))
	for _, d := range list {
		out = append(out, toDeadLetterJSON(d))
	}
	s.writeJSON(c, http.StatusOK, gin.H{"deadletters": out, "next": next})
}

func (s *server) apiGetDeadLetter(c *gin.Context) {
	d, err := s.deadLetter(c.Param("id"))
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeJSON(c, http.StatusOK, toDeadLetterJSON(d))
}

func (s *server) apiDiscardDeadLetter(c *gin.Context) {
	if err := s.discard(c.Param("id")); err != nil {
		s.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

type redriveAnswer struct {
	Redriven int      `json:"redriven"`
	Missing  []string `json:"missing,omitempty"`
}

func (s *server) apiRedriveOne(c *gin.Context) {
	id := c.Param("id")
	n, _, err := s.redriveIDs([]string{id})
	if err != nil {
		s.fail(c, err)
		return
	}
	if n == 0 {
		s.fail(c, notFound(fmt.Sprintf("There is no dead letter %q (it may have been redriven or discarded).", id)))
		return
	}
	s.writeJSON(c, http.StatusAccepted, redriveAnswer{Redriven: n})
}

type redriveRequest struct {
	Type *string   `json:"type"`
	IDs  *[]string `json:"ids"`
}

func (r redriveRequest) validate() error {
	switch {
	case r.Type == nil && r.IDs == nil:
		return invalid("type", `Send {"type":"T"} to redrive every dead letter of a type, or {"ids":[...]} for some.`)
	case r.Type != nil && r.IDs != nil:
		return invalid("ids", `Send either "type" or "ids", not both.`)
	case r.Type != nil && *r.Type == "":
		return invalid("type", "type must not be empty.")
	case r.IDs != nil && len(*r.IDs) == 0:
		return invalid("ids", "ids must hold at least one id.")
	case r.IDs != nil && len(*r.IDs) > maxRedriveIDs:
		return invalid("ids", fmt.Sprintf("ids may hold at most %d ids; redrive in several calls.", maxRedriveIDs))
	}
	return nil
}

func (s *server) apiRedrive(c *gin.Context) {
	var req redriveRequest
	if err := bindJSON(c, &req); err != nil {
		s.fail(c, err)
		return
	}
	if err := req.validate(); err != nil {
		s.fail(c, err)
		return
	}
	var ans redriveAnswer
	var err error
	if req.Type != nil {
		ans.Redriven, err = s.redriveType(*req.Type)
	} else {
		ans.Redriven, ans.Missing, err = s.redriveIDs(*req.IDs)
	}
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeJSON(c, http.StatusOK, ans)
}

func (s *server) apiQueues(c *gin.Context) {
	stats, err := s.queueStats(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	s.writeJSON(c, http.StatusOK, gin.H{"queues": stats})
}
