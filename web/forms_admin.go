package web

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"mailroom/queue/sheets"
)

// adminDelete deletes a form from the Forms page. It drops at most the
// waiting rows the page showed when the admin confirmed (dropWaiting);
// more rows waiting now make it refuse.
func (e *formsHandlers) adminDelete(c *gin.Context) {
	seen, _ := strconv.Atoi(c.PostForm("dropWaiting"))
	dropped, err := e.p.DeleteForm(c.Param("id"), max(seen, 0))
	var waiting *sheets.WaitingError
	switch {
	case errors.As(err, &waiting):
		e.setFlash(c, "error", fmt.Sprintf("The form was not deleted: %d rows wait to be written now; look again and confirm.", waiting.Rows))
	case err != nil:
		e.fail(c, err)
		return
	case dropped > 0:
		e.setFlash(c, "ok", fmt.Sprintf("Form %s deleted; %d waiting rows dropped. The rows already in the sheet stay.", c.Param("id"), dropped))
	default:
		e.setFlash(c, "ok", fmt.Sprintf("Form %s deleted. The rows already in the sheet stay.", c.Param("id")))
	}
	redirect(c, "/admin/forms")
}

// adminRetry is the Forms page's "Retry now": the form is checked at once.
func (e *formsHandlers) adminRetry(c *gin.Context) {
	if _, err := e.p.Retry(c.Param("id")); err != nil {
		e.fail(c, err)
		return
	}
	e.setFlash(c, "ok", fmt.Sprintf("Form %s is being checked now; reload in a moment.", c.Param("id")))
	redirect(c, "/admin/forms")
}

// formRow is one form on the admin Forms page.
type formRow struct {
	sheets.FormView
	Email      string
	SheetURL   string
	ColumnList string
	LastFlush  time.Time
}

// quotaRow is one Google account's quota use on the Forms page: its write
// and read meters.
type quotaRow struct {
	sheets.AccountQuota
	Meter, ReadMeter template.HTML
}

type formsPage struct {
	Forms    []formRow
	Accounts []quotaRow
	// Project is the project's use of its Sheets quotas, with its meters.
	Project                        sheets.ProjectQuota
	ProjectMeter, ProjectReadMeter template.HTML
	ReadsPerMinute                 int
	Chart                          template.HTML
	RowsLastHour                   int
	PeakPerMinute                  int
	Buffered                       int
	Written                        int
	Calls                          int
	RowsPerCall                    string
	Delay                          time.Duration
	Threshold                      int
	WritesPerMinute                int
	QuotaWindow                    time.Duration
}

func (e *formsHandlers) formsPage(c *gin.Context) {
	o, err := e.p.Overview(c.Request.Context())
	if err != nil {
		e.fail(c, err)
		return
	}
	cfg := e.p.Config()
	d := formsPage{
		Chart: rowsChart(o.RowsPerMinute), Delay: cfg.FlushDelay, Threshold: cfg.Threshold,
		WritesPerMinute: cfg.WritesPerMinute, ReadsPerMinute: cfg.ReadsPerMinute, QuotaWindow: cfg.QuotaWindow,
		Project:      o.Project,
		ProjectMeter: quotaMeter(o.Project.Writes, o.Project.WritesLimit, "writes"), ProjectReadMeter: quotaMeter(o.Project.Reads, o.Project.ReadsLimit, "reads"),
	}
	for _, n := range o.RowsPerMinute {
		d.RowsLastHour += n
		d.PeakPerMinute = max(d.PeakPerMinute, n)
	}
	for _, f := range o.Forms {
		r := formRow{FormView: f, Email: o.Emails[f.AccountID],
			SheetURL:   e.sheetURL(f.SpreadsheetID),
			ColumnList: strings.Join(f.Columns, ", ")}
		if f.LastFlushAt != "" {
			r.LastFlush, _ = time.Parse(time.RFC3339, f.LastFlushAt)
		}
		d.Forms = append(d.Forms, r)
		d.Buffered += f.Buffered
		d.Written += f.RowsWritten
		d.Calls += f.WriteCalls
	}
	if d.Calls > 0 {
		d.RowsPerCall = fmt.Sprintf("%.1f", float64(d.Written)/float64(d.Calls))
	}
	for _, a := range o.Accounts {
		d.Accounts = append(d.Accounts, quotaRow{AccountQuota: a, Meter: quotaMeter(a.Used, a.Limit, "writes"), ReadMeter: quotaMeter(a.Reads.Used, a.Reads.Limit, "reads")})
	}
	e.render(c, http.StatusOK, "forms", d)
}

// sheetURL links a form's spreadsheet: Google's page, or with --demo the
// emulated spreadsheet on the Demo sheets page.
func (e *formsHandlers) sheetURL(spreadsheetID string) string {
	if e.deps.DemoSource != nil {
		return "/admin/demo/sheets#sheet-" + url.PathEscape(spreadsheetID)
	}
	return "https://docs.google.com/spreadsheets/d/" + url.PathEscape(spreadsheetID) + "/edit"
}

// Chart geometry, in SVG user units.
const (
	formsChartW   = 600.0
	formsChartH   = 120.0
	formsChartPad = 4.0
)

// rowsChart draws rows written per minute over the last hour as inline SVG
// bars, oldest on the left. It is built from numbers only, so it is safe as
// HTML.
func rowsChart(perMinute []int) template.HTML {
	top, sum := 1, 0
	for _, v := range perMinute {
		top = max(top, v)
		sum += v
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="rows-chart" viewBox="0 0 %g %g" preserveAspectRatio="none" width="100%%" height="%g" role="img" aria-label="rows written per minute, last hour: %d in all, peak %d">`,
		formsChartW, formsChartH, formsChartH, sum, top)
	fmt.Fprintf(&b, `<title>Rows written per minute over the last hour: %d in all, peak %d a minute</title>`, sum, top)
	fmt.Fprintf(&b, `<line class="spark-base" x1="0" y1="%g" x2="%g" y2="%g" stroke="currentColor" stroke-opacity="0.25"/>`, formsChartH-formsChartPad, formsChartW, formsChartH-formsChartPad)
	if n := len(perMinute); n > 0 {
		step := formsChartW / float64(n)
		for i, v := range perMinute {
			if v == 0 {
				continue
			}
			h := float64(v) / float64(top) * (formsChartH - 2*formsChartPad)
			fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %s</title></rect>`,
				float64(i)*step+1, formsChartH-formsChartPad-h, max(step-2, 1), h, minutesAgo(n-1-i), plural(v, "row", "rows"))
		}
	}
	b.WriteString(`</svg>`)
	fmt.Fprintf(&b, `<div class="chart-axis" aria-hidden="true"><span>an hour ago</span><span>peak %s a minute</span><span>now</span></div>`, plural(top, "row", "rows"))
	return template.HTML(b.String()) //nolint:gosec // numbers only
}

// minutesAgo says n minutes back in words: "1 minute ago", "12 minutes
// ago"; "this minute" for 0.
func minutesAgo(n int) string {
	if n == 0 {
		return "this minute"
	}
	return plural(n, "minute", "minutes") + " ago"
}

// quotaMeter draws used of limit (calls of what: writes or reads) as a
// small inline SVG bar.
func quotaMeter(used, limit int, what string) template.HTML {
	frac := 0.0
	if limit > 0 {
		frac = min(float64(used)/float64(limit), 1)
	}
	cls := "meter-fill"
	if frac >= 1 {
		cls = "meter-full"
	}
	return template.HTML(fmt.Sprintf( //nolint:gosec // numbers only
		`<svg class="quota-meter" viewBox="0 0 100 10" preserveAspectRatio="none" width="120" height="10" role="img" aria-label="%s of %s %s used"><rect class="meter-track" x="0" y="0" width="100" height="10" rx="2"/><rect class="%s" x="0" y="0" width="%.1f" height="10" rx="2"/></svg>`,
		num(used), num(limit), template.HTMLEscapeString(what), cls, frac*100))
}
