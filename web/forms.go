package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/sheets"
)

// formsHandlers are the Google Sheets pipeline's routes: the forms API of
// the contract (forms and submissions) and the admin Forms page.
type formsHandlers struct {
	*server
	p FormsPipeline
}

// mapFormsError turns the Sheets pipeline's errors into the contract's
// answers; nil for others.
func mapFormsError(err error) *httpError {
	var (
		invalid *sheets.InputError
		waiting *sheets.WaitingError
		limited *sheets.SubmitLimitError
		full    *sheets.BacklogFullError
		kept    *sheets.UserBytesError
	)
	switch {
	case errors.As(err, &limited):
		// The field names whose allowance is spent: the form (the path's
		// id) or its user.
		whose, field, setting := "this form", "id", "MAILROOM_SUBMISSIONS_PER_FORM"
		if limited.Scope == "user" {
			whose, field, setting = "the forms of this form's user together", "userId", "MAILROOM_SUBMISSIONS_PER_USER"
		}
		return &httpError{Status: http.StatusTooManyRequests, Code: "rate_limited", Field: field, RetryAfter: limited.RetryAfter, Err: err,
			Message: fmt.Sprintf("Too many submissions: %s took its allowance of %d at once, which refills at %d per %s (%s); retry after the time in Retry-After.", whose, limited.Limit, limited.Limit, timeSpan(limited.Window), setting)}
	case errors.As(err, &kept):
		return &httpError{Status: http.StatusTooManyRequests, Code: "rate_limited", Field: "userId", RetryAfter: kept.RetryAfter, Err: err,
			Message: fmt.Sprintf("The forms of this form's user keep %d bytes of submissions, the most one user may (MAILROOM_SUBMISSIONS_USER_BYTES); written rows are deleted after MAILROOM_SHEETS_RETENTION, or delete a form whose rows are written. Nothing accepted is lost.", kept.Stored)}
	case errors.As(err, &full):
		msg := fmt.Sprintf("%d rows of this form wait to be written to its sheet, the most one form may have waiting; new submissions are refused until rows are written (nothing accepted is lost).", full.Waiting)
		if full.LastError != "" {
			msg += " The form is in error: " + full.LastError + " Fix the sheet, then POST /api/v1/forms/{id}/retry."
		}
		return &httpError{Status: http.StatusConflict, Code: "form_backlog_full", Field: "id", Message: msg, Err: err}
	case errors.As(err, &invalid):
		return &httpError{Status: http.StatusBadRequest, Code: invalid.Code, Message: invalid.Message, Field: invalid.Field}
	case errors.Is(err, sheets.ErrFormNotFound):
		return &httpError{Status: http.StatusNotFound, Code: "not_found", Message: "There is no such form.", Err: err}
	case errors.As(err, &waiting):
		return &httpError{Status: http.StatusConflict, Code: "rows_waiting", Err: err,
			Message: fmt.Sprintf("%d rows of this form still wait to be written to the sheet; delete it once they are written (GET shows buffered), or add ?discardWaiting=true to drop them.", waiting.Rows)}
	case errors.Is(err, sheets.ErrSheetTaken):
		return &httpError{Status: http.StatusConflict, Code: "conflict", Field: "sheet", Message: "Another form already writes this sheet; give each form its own sheet.", Err: err}
	case errors.Is(err, sheets.ErrGoogleUnavailable):
		return &httpError{Status: http.StatusServiceUnavailable, Code: "google_unavailable", RetryAfter: 5 * time.Second,
			Message: "Google Sheets did not answer while the spreadsheet was checked; try again.", Err: err}
	}
	return nil
}

func (e *formsHandlers) apiCreate(c *gin.Context) {
	var in sheets.FormInput
	if err := bindJSON(c, &in); err != nil {
		e.fail(c, err)
		return
	}
	f, err := e.p.CreateForm(c.Request.Context(), in)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusCreated, f)
}

func (e *formsHandlers) apiList(c *gin.Context) {
	forms, err := e.p.Forms(c.Query("userId"))
	if err != nil {
		e.fail(c, err)
		return
	}
	if forms == nil {
		forms = []sheets.FormView{}
	}
	e.p.WithQuota(c.Request.Context(), forms)
	e.writeJSON(c, http.StatusOK, gin.H{"forms": forms})
}

func (e *formsHandlers) apiGet(c *gin.Context) {
	f, err := e.p.Form(c.Param("id"))
	if err != nil {
		e.fail(c, err)
		return
	}
	one := []sheets.FormView{f}
	e.p.WithQuota(c.Request.Context(), one)
	e.writeJSON(c, http.StatusOK, one[0])
}

// apiRepoint is PUT /api/v1/forms/{id} {"spreadsheetId","sheet"}: 200
// with the form; the rows not yet written go to that sheet from now on.
func (e *formsHandlers) apiRepoint(c *gin.Context) {
	var in sheets.FormTarget
	if err := bindJSON(c, &in); err != nil {
		e.fail(c, err)
		return
	}
	f, err := e.p.Repoint(c.Request.Context(), c.Param("id"), in)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusOK, f)
}

// apiRetry is POST /api/v1/forms/{id}/retry: 202; the form (one in error
// above all) is checked and flushed at once.
func (e *formsHandlers) apiRetry(c *gin.Context) {
	f, err := e.p.Retry(c.Param("id"))
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusAccepted, f)
}

// apiDelete is DELETE /api/v1/forms/{id}[?discardWaiting=true]: 204.
func (e *formsHandlers) apiDelete(c *gin.Context) {
	discard, err := boolParam(c, "discardWaiting")
	if err != nil {
		e.fail(c, err)
		return
	}
	dropAtMost := 0
	if discard != nil && *discard {
		dropAtMost = math.MaxInt
	}
	if _, err := e.p.DeleteForm(c.Param("id"), dropAtMost); err != nil {
		e.fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// submissionRequest is the body of POST /api/v1/forms/{id}/submissions.
type submissionRequest struct {
	Answers map[string]json.RawMessage `json:"answers"`
}

func (e *formsHandlers) apiSubmit(c *gin.Context) {
	var req submissionRequest
	if err := bindJSON(c, &req); err != nil {
		e.fail(c, err)
		return
	}
	s, err := e.p.Submit(c.Request.Context(), c.Param("id"), req.Answers)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.writeJSON(c, http.StatusAccepted, gin.H{"id": s.ID})
}
