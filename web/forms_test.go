package web

import (
	"time"

	"mailroom/queue/sheets"
)

// Sample data of the Forms page for TestRenderEveryTemplate.
func formsSample(at time.Time) formsPage {
	f := sheets.FormView{ID: "f1", UserID: "u1", AccountID: "a1", SpreadsheetID: "1AbC", Sheet: "Responses <2>",
		Columns: []string{"name", "email"}, StartRow: 2, NextRow: 502, CreatedAt: at, Buffered: 7, RowsWritten: 500,
		WriteCalls: 2, LastFlushAt: at.Format(time.RFC3339), State: "error", LastError: "Google says the spreadsheet <1AbC> does not exist; point the form at another sheet."}
	idle := f
	idle.ID, idle.LastFlushAt, idle.LastError, idle.WriteCalls, idle.RowsWritten, idle.State = "f2", "", "google: 503 <backend>", 0, 0, "ok"
	perMinute := make([]int, 60)
	perMinute[59], perMinute[30] = 500, 12
	return formsPage{
		Forms: []formRow{
			{FormView: f, Email: "ann@example.com", SheetURL: "https://docs.google.com/spreadsheets/d/1AbC/edit", ColumnList: "name, email", LastFlush: at},
			{FormView: idle, SheetURL: "https://docs.google.com/spreadsheets/d/1AbC/edit"},
		},
		Accounts: []quotaRow{
			{AccountQuota: sheets.AccountQuota{AccountID: "a1", Email: "ann@example.com", Forms: 2, QuotaUse: sheets.QuotaUse{Used: 60, Limit: 60, Waiting: 3}, Reads: sheets.QuotaUse{Used: 12, Limit: 60}},
				Meter: quotaMeter(60, 60, "writes"), ReadMeter: quotaMeter(12, 60, "reads")},
			{AccountQuota: sheets.AccountQuota{AccountID: "a2", Forms: 1, QuotaUse: sheets.QuotaUse{Used: 3, Limit: 60}, Reads: sheets.QuotaUse{Limit: 60}, Err: "broker down"},
				Meter: quotaMeter(3, 60, "writes"), ReadMeter: quotaMeter(0, 60, "reads")},
		},
		Project:      sheets.ProjectQuota{Writes: 63, WritesLimit: 300, Reads: 12, ReadsLimit: 300, SpentUntil: at.Add(30 * time.Second)},
		ProjectMeter: quotaMeter(63, 300, "writes"), ProjectReadMeter: quotaMeter(12, 300, "reads"), ReadsPerMinute: 60,
		Chart: rowsChart(perMinute), RowsLastHour: 512, PeakPerMinute: 500, Buffered: 7, Written: 500, Calls: 2, RowsPerCall: "250.0",
		Delay: 10 * time.Second, Threshold: 500, WritesPerMinute: 60, QuotaWindow: time.Minute,
	}
}
