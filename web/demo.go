package web

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// DemoSource is the simulated Google of `serve --demo` as the demo pages
// read it. The cmd package adapts the emulator to it; these pages exist
// only in demo mode.
type DemoSource interface {
	// DemoMailboxes lists the emulated Gmail accounts, demo accounts first.
	DemoMailboxes() []DemoMailbox
	// DemoMessages returns one page of a mailbox's messages, newest first,
	// and how many it holds. Unknown email: none.
	DemoMessages(email string, offset, limit int) (page []DemoMessage, total int)
	// DemoSheets lists the emulated spreadsheets with their newest rows
	// (at most rows of them, newest first).
	DemoSheets(rows int) []DemoSheet
	// DemoAlerts lists what the demo's alert webhook received, newest first.
	DemoAlerts() []DemoAlert
	// DemoReceiver is what the demo's built-in events webhook receiver
	// took and verified.
	DemoReceiver() DemoReceiver
}

// DemoReceiver is the demo's built-in webhook receiver: deliveries taken,
// the events in those whose signature verified, and those refused.
type DemoReceiver struct {
	URL        string
	WebhookID  string // empty until the seed registers it
	Deliveries int
	Verified   int // events
	Refused    int // deliveries
	Last       time.Time
}

// DemoMailbox is one emulated Gmail account.
type DemoMailbox struct {
	Email     string
	Note      string // what the account is for in the demo
	Messages  int
	Unread    int
	Trashed   int
	HistoryID uint64
	// WatchExpires is the end of the mailbox's users.watch; zero: none.
	WatchExpires time.Time
}

// DemoMessage is one emulated Gmail message.
type DemoMessage struct {
	ID       string
	ThreadID string
	From     string
	To       string
	Subject  string
	Snippet  string
	Labels   []DemoLabel
	Unread   bool
	Trashed  bool
	Date     time.Time
}

// DemoLabel is a message label: a user label by name, or a system label by
// its id (INBOX, UNREAD, CATEGORY_UPDATES, ...).
type DemoLabel struct {
	Name string
	User bool
}

// DemoSheet is one emulated spreadsheet's sheet.
type DemoSheet struct {
	SpreadsheetID string
	Title         string
	Sheet         string
	Owner         string // the Google account that writes it
	Columns       []string
	Rows          int // rows holding data
	Newest        []DemoRow
	Error         string // why the rows could not be read
}

// DemoRow is one sheet row; Number is 1-based as in the spreadsheet.
type DemoRow struct {
	Number int
	Cells  []string
}

// DemoAlert is one message the demo's alert webhook received.
type DemoAlert struct {
	At   time.Time
	Text string
}

// demoPages are the demo-only admin pages: the emulated mailboxes with
// their labels, the emulated spreadsheets, and the alerts the demo webhook
// received.
type demoPages struct {
	*server
	src DemoSource
}

const (
	demoPageSize  = 50
	demoSheetRows = 25
)

type demoMailboxView struct {
	Mailboxes []DemoMailbox
	Current   DemoMailbox
	Messages  []DemoMessage
	Total     int
	Page      int
	Pages     int
	PrevURL   string
	NextURL   string
	Live      bool // the first page refreshes itself
}

func (d demoPages) mailbox(c *gin.Context) {
	boxes := d.src.DemoMailboxes()
	v := demoMailboxView{Mailboxes: boxes, Page: 1}
	if len(boxes) == 0 {
		d.render(c, http.StatusOK, "demo_mailbox", v)
		return
	}
	v.Current = boxes[0]
	if want := c.Query("account"); want != "" {
		i := slices.IndexFunc(boxes, func(b DemoMailbox) bool { return b.Email == want })
		if i < 0 {
			d.fail(c, notFound("The demo has no mailbox "+want+"."))
			return
		}
		v.Current = boxes[i]
	}
	page, err := strconv.Atoi(c.DefaultQuery("page", "1"))
	if err != nil || page < 1 {
		d.fail(c, invalid("page", "page must be a whole number from 1."))
		return
	}
	v.Page = page
	v.Messages, v.Total = d.src.DemoMessages(v.Current.Email, (v.Page-1)*demoPageSize, demoPageSize)
	v.Pages = max(1, (v.Total+demoPageSize-1)/demoPageSize)
	link := func(page int) string {
		return "/admin/demo/mailbox?account=" + url.QueryEscape(v.Current.Email) + "&page=" + strconv.Itoa(page)
	}
	if v.Page > 1 {
		v.PrevURL = link(v.Page - 1)
	}
	if v.Page < v.Pages {
		v.NextURL = link(v.Page + 1)
	}
	v.Live = v.Page == 1
	d.render(c, http.StatusOK, "demo_mailbox", v)
}

type demoSheetsView struct {
	Sheets []DemoSheet
	Shown  int
}

func (d demoPages) sheets(c *gin.Context) {
	d.render(c, http.StatusOK, "demo_sheets", demoSheetsView{Sheets: d.src.DemoSheets(demoSheetRows), Shown: demoSheetRows})
}

type demoAlertsView struct {
	Alerts   []DemoAlert
	Receiver DemoReceiver
}

func (d demoPages) alerts(c *gin.Context) {
	d.render(c, http.StatusOK, "demo_alerts", demoAlertsView{Alerts: d.src.DemoAlerts(), Receiver: d.src.DemoReceiver()})
}
