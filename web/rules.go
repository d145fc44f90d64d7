package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/rules"
	"mailroom/store"
)

// rulesHandlers are the label rules pipeline's routes: the rules API of
// the contract and the admin Rules page.
type rulesHandlers struct {
	*server
	p RulesPipeline
}

// mapRulesError turns the rules pipeline's errors into the contract's
// answers (cfg words the rate limit); nil for others.
func mapRulesError(cfg rules.Config, err error) *httpError {
	var (
		invalid *rules.ValidationError
		refused *rules.RefusedError
	)
	switch {
	case errors.As(err, &invalid):
		code := invalid.Code
		if code == "" {
			code = "invalid"
		}
		return &httpError{Status: http.StatusBadRequest, Code: code, Message: invalid.Message, Field: invalid.Field}
	case errors.As(err, &refused):
		return &httpError{Status: http.StatusTooManyRequests, Code: "rate_limited", RetryAfter: refused.RetryAfter,
			Message: fmt.Sprintf("Too many rule saves: at most %d per %s for a user. Try again in %d seconds.",
				cfg.SaveLimit, humanWindow(cfg.SaveWindow), int(math.Ceil(refused.RetryAfter.Seconds())))}
	case errors.Is(err, rules.ErrLabelTaken):
		return &httpError{Status: http.StatusConflict, Code: "conflict", Field: "label", Message: "This user already has a rule for that label; edit that rule instead."}
	case errors.Is(err, rules.ErrNotFound):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "There is no such user or rule.", Err: err}
	}
	return nil
}

func humanWindow(d time.Duration) string {
	switch {
	case d == time.Minute:
		return "minute"
	case d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%d seconds", d/time.Second)
	}
	return d.String()
}

type ruleJSON struct {
	ID         string            `json:"id"`
	UserID     string            `json:"userId"`
	Label      string            `json:"label"`
	Match      string            `json:"match"`
	Conditions []rules.Condition `json:"conditions"`
	Actions    rules.Actions     `json:"actions"`
	Version    int               `json:"version"`
	CreatedAt  time.Time         `json:"createdAt"`
	UpdatedAt  time.Time         `json:"updatedAt"`
}

func toRuleJSON(r rules.Rule) ruleJSON {
	conds := r.Spec.Conditions
	if conds == nil {
		conds = []rules.Condition{}
	}
	return ruleJSON{ID: r.ID, UserID: r.UserID, Label: r.Spec.Label, Match: r.Spec.Match, Conditions: conds,
		Actions: r.Spec.Actions, Version: r.Version, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

type reclassifyPendingJSON struct {
	State     string    `json:"state"`
	RuleIDs   []string  `json:"ruleIds"`
	FiresAt   time.Time `json:"firesAt"`
	FirstSave time.Time `json:"firstSave"`
	LastSave  time.Time `json:"lastSave"`
}

func toPendingJSON(p store.ReclassifyPending) *reclassifyPendingJSON {
	return &reclassifyPendingJSON{State: "pending", RuleIDs: p.RuleIDs, FiresAt: p.FiresAt, FirstSave: p.FirstSave, LastSave: p.LastSave}
}

type savedJSON struct {
	Rule       ruleJSON               `json:"rule"`
	Reclassify *reclassifyPendingJSON `json:"reclassify"`
}

// readRule reads a rule from the request body: at most maxBodyBytes, one
// JSON value, parsed strictly so that errors name the field as a path
// ("conditions[2].value").
func (e *rulesHandlers) readRule(c *gin.Context) (rules.Spec, error) {
	var raw json.RawMessage
	if err := bindJSON(c, &raw); err != nil {
		return rules.Spec{}, err
	}
	return e.p.ParseSpec(raw)
}

func (e *rulesHandlers) apiList(c *gin.Context) {
	rs, err := e.p.Rules(c.Param("uid"))
	if err != nil {
		e.fail(c, err)
		return
	}
	out := make([]ruleJSON, 0, len(rs))
	for _, r := range rs {
		out = append(out, toRuleJSON(r))
	}
	e.writeJSON(c, http.StatusOK, gin.H{"rules": out})
}

func (e *rulesHandlers) apiGet(c *gin.Context) {
	r, err := e.p.Rule(c.Param("id"))
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusOK, toRuleJSON(r))
}

func (e *rulesHandlers) apiCreate(c *gin.Context) {
	spec, err := e.readRule(c)
	if err != nil {
		e.fail(c, err)
		return
	}
	saved, err := e.p.Create(c.Request.Context(), c.Param("uid"), spec)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusCreated, savedJSON{Rule: toRuleJSON(saved.Rule), Reclassify: toPendingJSON(saved.Pending)})
}

func (e *rulesHandlers) apiUpdate(c *gin.Context) {
	spec, err := e.readRule(c)
	if err != nil {
		e.fail(c, err)
		return
	}
	saved, err := e.p.Update(c.Request.Context(), c.Param("id"), spec)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusOK, savedJSON{Rule: toRuleJSON(saved.Rule), Reclassify: toPendingJSON(saved.Pending)})
}

func (e *rulesHandlers) apiDelete(c *gin.Context) {
	if _, err := e.p.Delete(c.Request.Context(), c.Param("id")); err != nil {
		e.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

type reclassifyJobJSON struct {
	JobID               string     `json:"jobId"`
	RuleIDs             []string   `json:"ruleIds"`
	State               string     `json:"state"`
	Threads             int        `json:"threads"`
	Batches             int        `json:"batches"`
	BatchesDone         int        `json:"batchesDone"`
	BatchesSkippedStale int        `json:"batchesSkippedStale"`
	BatchesFailed       int        `json:"batchesFailed"`
	RulesSkipped        int        `json:"rulesSkipped"`
	ThreadsLabeled      int        `json:"threadsLabeled"`
	ThreadsUnlabeled    int        `json:"threadsUnlabeled"`
	MessagesLabeled     int        `json:"messagesLabeled"`
	MessagesUnlabeled   int        `json:"messagesUnlabeled"`
	GmailCalls          int        `json:"gmailCalls"`
	StartedAt           time.Time  `json:"startedAt"`
	FinishedAt          *time.Time `json:"finishedAt"`
}

type reclassifyJSON struct {
	Pending *reclassifyPendingJSON `json:"pending"`
	Jobs    []reclassifyJobJSON    `json:"jobs"`
}

func toReclassifyJSON(st rules.Status) reclassifyJSON {
	out := reclassifyJSON{Jobs: make([]reclassifyJobJSON, 0, len(st.Jobs))}
	if st.Pending != nil {
		out.Pending = toPendingJSON(*st.Pending)
	}
	for _, j := range st.Jobs {
		jj := reclassifyJobJSON{
			JobID: j.ID, RuleIDs: j.RuleIDs, State: j.State, Threads: j.Threads, Batches: j.Batches,
			BatchesDone: j.BatchesDone, BatchesSkippedStale: j.BatchesSkippedStale, BatchesFailed: j.BatchesFailed, RulesSkipped: j.RulesSkipped,
			ThreadsLabeled: j.ThreadsLabeled, ThreadsUnlabeled: j.ThreadsUnlabeled,
			MessagesLabeled: j.MessagesLabeled, MessagesUnlabeled: j.MessagesUnlabeled, GmailCalls: j.GmailCalls,
			StartedAt: j.StartedAt,
		}
		if !j.FinishedAt.IsZero() {
			at := j.FinishedAt
			jj.FinishedAt = &at
		}
		out.Jobs = append(out.Jobs, jj)
	}
	return out
}

// recentJobs is how many jobs the status shows.
const recentJobs = 20

func (e *rulesHandlers) apiStatus(c *gin.Context) {
	st, err := e.p.Status(c.Param("uid"), recentJobs)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusOK, toReclassifyJSON(st))
}
