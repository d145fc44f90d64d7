package googlefake

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	sheetsapi "google.golang.org/api/sheets/v4"
)

// Cell is one spreadsheet cell: its text, and whether it was entered as a
// formula (USER_ENTERED text starting with "="). The emulator does not
// evaluate formulas: values.get returns their text.
type Cell struct {
	Value   string
	Formula bool
}

// SheetsStats are the Sheets counters.
type SheetsStats struct {
	// WriteCalls counts accepted write calls (values append, update,
	// batchUpdate, clear, and spreadsheets.batchUpdate).
	WriteCalls int
	// ReadCalls counts accepted read calls (spreadsheets.get, values.get).
	ReadCalls int
	// RejectedWrites and RejectedReads count calls refused with 429 by a
	// quota (the account's or the project's).
	RejectedWrites, RejectedReads int
	// RowsWritten counts rows written by accepted calls.
	RowsWritten int
	// GridGrows counts spreadsheets.batchUpdate calls that made a grid
	// larger.
	GridGrows int
	// MaxWritesInWindow and MaxReadsInWindow are the most accepted calls
	// one account made within any Options.SheetsWindow.
	MaxWritesInWindow, MaxReadsInWindow int
	// ProjectMaxWritesInWindow and ProjectMaxReadsInWindow are the most
	// accepted calls of all accounts together within any window.
	ProjectMaxWritesInWindow, ProjectMaxReadsInWindow int
}

// Sheets holds the spreadsheets and the read and write quotas.
type Sheets struct {
	s   *Server
	eps map[string]*endpoint // by method, built once

	mu    sync.RWMutex
	books map[string]*spreadsheet

	quotaMu sync.Mutex
	windows map[windowKey]*callWindow
	stats   SheetsStats
}

// quotaKind is what a call spends: Google counts read and write requests
// apart.
type quotaKind int

const (
	readCall quotaKind = iota
	writeCall
)

// windowKey names one rolling window: a kind of call, for an account or,
// with account "", for the project.
type windowKey struct {
	kind    quotaKind
	account string
}

type callWindow struct {
	// times are the calls within the window that count against its limit,
	// refused ones too, oldest first (at most the limit's newest: whether
	// a call is admitted depends on no more).
	times []time.Time
	// accepted are the accepted calls within the window, for max.
	accepted []time.Time
	max      int
}

// count records a call at now against w's limit (limit <= 0: none).
func (w *callWindow) count(now time.Time, limit int) {
	if limit <= 0 {
		return
	}
	w.times = append(w.times, now)
	if len(w.times) > limit {
		w.times = w.times[len(w.times)-limit:]
	}
}

type spreadsheet struct {
	mu        sync.Mutex
	id, title string
	owner     string
	// access holds every account that may open the spreadsheet, its
	// owner included (Unshare may take the owner's away too).
	access      map[string]bool
	sheets      []*sheet
	nextSheetID int64
}

// sheet is one tab. rowCount x colCount is its grid: no cell outside it
// can be written or read (rows holds the cells with data, and is never
// longer than the grid).
type sheet struct {
	id                 int64
	title              string
	rows               [][]Cell
	rowCount, colCount int
}

// Grid limits (Google Sheets API: "Spreadsheets limits" in the Sheets
// help center, and the spreadsheets.batchUpdate reference).
const (
	// DefaultGridRows and DefaultGridColumns are the grid of a new sheet.
	DefaultGridRows, DefaultGridColumns = 1000, 26
	// MaxCells is the most cells a spreadsheet holds over all its sheets.
	MaxCells = 10_000_000
	// maxColumns is column ZZZ, the last one an A1 reference can name.
	maxColumns = 18278
)

// MethodSpreadsheetsBatchUpdate names spreadsheets.batchUpdate in faults
// and call counts.
const MethodSpreadsheetsBatchUpdate = "sheets.batchUpdate"

// sheetsDefaults gives the Sheets options their defaults.
func (o *Options) sheetsDefaults() {
	for _, l := range []struct {
		v   *int
		def int
	}{
		{&o.SheetsWriteLimit, 60}, {&o.SheetsReadLimit, 60}, {&o.SheetsProjectWriteLimit, 300},
		{&o.SheetsProjectReadLimit, 300}, {&o.SheetsGridRows, DefaultGridRows}, {&o.SheetsGridColumns, DefaultGridColumns},
	} {
		if *l.v == 0 {
			*l.v = l.def
		}
	}
	o.SheetsGridRows, o.SheetsGridColumns = max(o.SheetsGridRows, 1), max(o.SheetsGridColumns, 1)
}

func newSheets(s *Server) *Sheets {
	sh := &Sheets{s: s, eps: make(map[string]*endpoint), books: make(map[string]*spreadsheet), windows: make(map[windowKey]*callWindow)}
	for _, m := range sheetsMethods() {
		sh.eps[m] = sh.newEndpoint(m)
	}
	return sh
}

// spreadsheetID makes a 44-character id like Google's from a sequence number.
func spreadsheetID(n uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	sum := sha256.Sum256(b[:])
	return ("1" + base64.RawURLEncoding.EncodeToString(sum[:]))[:44]
}

// CreateSpreadsheet creates a spreadsheet owned by owner (the account whose
// token may read and write it) with the named sheets (default "Sheet1") and
// returns its id.
func (sh *Sheets) CreateSpreadsheet(owner, title string, sheetNames ...string) (string, error) {
	if len(sheetNames) == 0 {
		sheetNames = []string{"Sheet1"}
	}
	book := &spreadsheet{
		id: spreadsheetID(sh.s.newID()), title: title, owner: normEmail(owner),
		access: map[string]bool{normEmail(owner): true}, nextSheetID: 1_000_001,
	}
	for i, name := range sheetNames {
		if name == "" || slices.ContainsFunc(book.sheets, func(s *sheet) bool { return strings.EqualFold(s.title, name) }) {
			return "", fmt.Errorf("googlefake: create spreadsheet: bad or duplicate sheet name %q", name)
		}
		id := int64(0)
		if i > 0 {
			id = book.nextSheetID
			book.nextSheetID += 7919
		}
		book.sheets = append(book.sheets, &sheet{id: id, title: name, rowCount: sh.s.opts.SheetsGridRows, colCount: sh.s.opts.SheetsGridColumns})
	}
	sh.mu.Lock()
	sh.books[book.id] = book
	sh.mu.Unlock()
	return book.id, nil
}

// Share lets an account read and write the spreadsheet (again).
func (sh *Sheets) Share(spreadsheetID, email string) error {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	book.access[normEmail(email)] = true
	return nil
}

// Unshare takes an account's access away, the owner's too (as when the
// owner moves the file out of the account's Drive): its calls get 403
// PERMISSION_DENIED until Share.
func (sh *Sheets) Unshare(spreadsheetID, email string) error {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	delete(book.access, normEmail(email))
	return nil
}

// DeleteSpreadsheet deletes a spreadsheet: every call on it gets 404.
func (sh *Sheets) DeleteSpreadsheet(spreadsheetID string) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.books[spreadsheetID] == nil {
		return fmt.Errorf("%w: %s", ErrUnknownSpreadsheet, spreadsheetID)
	}
	delete(sh.books, spreadsheetID)
	return nil
}

// RenameSheet renames a tab (a range naming the old title then gets 400
// "Unable to parse range"); an empty newTitle deletes the tab.
func (sh *Sheets) RenameSheet(spreadsheetID, title, newTitle string) error {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	s := book.sheet(title)
	if s == nil {
		return fmt.Errorf("%w: %s", ErrUnknownSheet, title)
	}
	if newTitle == "" {
		if len(book.sheets) == 1 {
			return errors.New("googlefake: a spreadsheet keeps at least one sheet")
		}
		book.sheets = slices.DeleteFunc(book.sheets, func(x *sheet) bool { return x == s })
		return nil
	}
	if o := book.sheet(newTitle); o != nil && o != s {
		return fmt.Errorf("googlefake: a sheet named %q exists", newTitle)
	}
	s.title = newTitle
	return nil
}

// AddSheet adds a tab with the default grid.
func (sh *Sheets) AddSheet(spreadsheetID, title string) error {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	if title == "" || book.sheet(title) != nil {
		return fmt.Errorf("googlefake: bad or duplicate sheet name %q", title)
	}
	book.sheets = append(book.sheets, &sheet{id: book.nextSheetID, title: title, rowCount: sh.s.opts.SheetsGridRows, colCount: sh.s.opts.SheetsGridColumns})
	book.nextSheetID += 7919
	return nil
}

// GridSize returns a tab's grid: its rows and columns.
func (sh *Sheets) GridSize(spreadsheetID, title string) (rows, cols int, err error) {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return 0, 0, err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	s := book.sheet(title)
	if s == nil {
		return 0, 0, fmt.Errorf("%w: %s", ErrUnknownSheet, title)
	}
	return s.rowCount, s.colCount, nil
}

// SetGridSize sets a tab's grid, as a test needs it (cells outside the new
// grid are dropped, as Google drops them). The spreadsheet's cell cap
// holds.
func (sh *Sheets) SetGridSize(spreadsheetID, title string, rows, cols int) error {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	s := book.sheet(title)
	if s == nil {
		return fmt.Errorf("%w: %s", ErrUnknownSheet, title)
	}
	if rows < 1 || cols < 1 || cols > maxColumns || book.cells()-s.rowCount*s.colCount+rows*cols > MaxCells {
		return fmt.Errorf("googlefake: grid %dx%d refused", rows, cols)
	}
	s.resize(rows, cols)
	return nil
}

// Fill appends rows of text below the data of a tab, as a person typing
// into a sheet in use would (no quota is spent, nothing is counted), and
// returns the row the first one went to. It refuses rows that would pass
// the tab's grid, as Google's grid does.
func (sh *Sheets) Fill(spreadsheetID, title string, rows [][]string) (int, error) {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return 0, err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	s := book.sheet(title)
	if s == nil {
		return 0, fmt.Errorf("%w: %s", ErrUnknownSheet, title)
	}
	first := len(s.rows) + 1
	if len(s.rows)+len(rows) > s.rowCount {
		return 0, fmt.Errorf("googlefake: fill: %d rows below row %d pass the grid of %d rows", len(rows), first-1, s.rowCount)
	}
	for _, r := range rows {
		if len(r) > s.colCount {
			return 0, fmt.Errorf("googlefake: fill: a row of %d cells passes the grid of %d columns", len(r), s.colCount)
		}
		cells := make([]Cell, len(r))
		for i, v := range r {
			cells[i] = Cell{Value: v}
		}
		s.rows = append(s.rows, cells)
	}
	return first, nil
}

// cells is the number of cells of the spreadsheet's grids.
func (b *spreadsheet) cells() int {
	n := 0
	for _, s := range b.sheets {
		n += s.rowCount * s.colCount
	}
	return n
}

// resize sets the grid, dropping the cells outside it.
func (s *sheet) resize(rows, cols int) {
	s.rowCount, s.colCount = rows, cols
	if len(s.rows) > rows {
		s.rows = s.rows[:rows]
	}
	for i, r := range s.rows {
		if len(r) > cols {
			s.rows[i] = r[:cols]
		}
	}
}

func errCellCap() *apiError {
	return errInvalid(fmt.Sprintf("This action would increase the number of cells in the workbook above the limit of %d cells.", MaxCells))
}

func (sh *Sheets) book(id string) (*spreadsheet, error) {
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	b := sh.books[id]
	if b == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSpreadsheet, id)
	}
	return b, nil
}

func (b *spreadsheet) sheet(name string) *sheet {
	for _, s := range b.sheets {
		if s.title == name {
			return s
		}
	}
	for _, s := range b.sheets {
		if strings.EqualFold(s.title, name) {
			return s
		}
	}
	return nil
}

func (b *spreadsheet) sheetByID(id int64) *sheet {
	for _, s := range b.sheets {
		if s.id == id {
			return s
		}
	}
	return nil
}

// Cells returns a copy of a sheet's cells, row by row (rows and cells past
// the last non-empty one are left out).
func (sh *Sheets) Cells(spreadsheetID, sheetName string) ([][]Cell, error) {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return nil, err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	s := book.sheet(sheetName)
	if s == nil {
		return nil, fmt.Errorf("%w: %s", ErrUnknownSheet, sheetName)
	}
	out := make([][]Cell, len(s.rows))
	for i, r := range s.rows {
		out[i] = slices.Clone(r)
	}
	return trimRows(out), nil
}

// Rows returns the text of a sheet's cells, row by row.
func (sh *Sheets) Rows(spreadsheetID, sheetName string) ([][]string, error) {
	cells, err := sh.Cells(spreadsheetID, sheetName)
	if err != nil {
		return nil, err
	}
	out := make([][]string, len(cells))
	for i, r := range cells {
		out[i] = make([]string, len(r))
		for j, c := range r {
			out[i][j] = c.Value
		}
	}
	return out, nil
}

// Stats returns the Sheets counters.
func (sh *Sheets) Stats() SheetsStats {
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	return sh.stats
}

// MaxWritesInWindow returns the most accepted write calls the account made
// within any Options.SheetsWindow.
func (sh *Sheets) MaxWritesInWindow(email string) int {
	return sh.maxInWindow(windowKey{writeCall, normEmail(email)})
}

// MaxReadsInWindow returns the most accepted read calls the account made
// within any Options.SheetsWindow.
func (sh *Sheets) MaxReadsInWindow(email string) int {
	return sh.maxInWindow(windowKey{readCall, normEmail(email)})
}

func (sh *Sheets) maxInWindow(k windowKey) int {
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	if w := sh.windows[k]; w != nil {
		return w.max
	}
	return 0
}

func (sh *Sheets) resetStats() {
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	sh.stats = SheetsStats{}
	for _, w := range sh.windows {
		w.max = len(w.accepted)
	}
}

// admit counts a call of account against the rolling quotas of its kind,
// the account's (per user per project) and the project's, or refuses it
// with 429 RESOURCE_EXHAUSTED, as Google does
// (developers.google.com/workspace/sheets/api/limits: 60 read and 60 write
// requests per minute per user per project, 300 of each per minute per
// project; "exceeding it results in a 429: Too many requests"). Every
// request counts, whatever its outcome: a refused one too, against the
// account's window and the project's (the document counts requests, not
// accepted ones, so the emulator takes the stricter reading, and a client
// that keeps calling while refused stays refused). Google's answer names
// no retry time; neither does this one (the document says to back off
// exponentially).
func (sh *Sheets) admit(account string, kind quotaKind) error {
	now := sh.s.now()
	o := sh.s.opts
	userLimit, projectLimit, metric := o.SheetsWriteLimit, o.SheetsProjectWriteLimit, "Write"
	if kind == readCall {
		userLimit, projectLimit, metric = o.SheetsReadLimit, o.SheetsProjectReadLimit, "Read"
	}
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	user, project := sh.window(windowKey{kind, account}, now), sh.window(windowKey{kind, ""}, now)
	refuse := func(limitName string) error {
		user.count(now, userLimit)
		project.count(now, projectLimit)
		if kind == readCall {
			sh.stats.RejectedReads++
		} else {
			sh.stats.RejectedWrites++
		}
		return &apiError{
			Code: 429, Status: "RESOURCE_EXHAUSTED", Reason: "rateLimitExceeded",
			Message: fmt.Sprintf("Quota exceeded for quota metric '%s requests' and limit '%s' of service "+
				"'sheets.googleapis.com' for consumer 'project_number:000000000000'.", metric, limitName),
		}
	}
	if userLimit > 0 && len(user.times) >= userLimit {
		return refuse(metric + " requests per minute per user")
	}
	if projectLimit > 0 && len(project.times) >= projectLimit {
		return refuse(metric + " requests per minute")
	}
	user.count(now, userLimit)
	project.count(now, projectLimit)
	for _, w := range []*callWindow{user, project} {
		w.accepted = append(w.accepted, now)
		w.max = max(w.max, len(w.accepted))
	}
	if kind == readCall {
		sh.stats.ReadCalls++
		sh.stats.MaxReadsInWindow = max(sh.stats.MaxReadsInWindow, user.max)
		sh.stats.ProjectMaxReadsInWindow = max(sh.stats.ProjectMaxReadsInWindow, project.max)
	} else {
		sh.stats.WriteCalls++
		sh.stats.MaxWritesInWindow = max(sh.stats.MaxWritesInWindow, user.max)
		sh.stats.ProjectMaxWritesInWindow = max(sh.stats.ProjectMaxWritesInWindow, project.max)
	}
	return nil
}

// window returns the window of k with the calls older than the window
// dropped. The caller holds quotaMu.
func (sh *Sheets) window(k windowKey, now time.Time) *callWindow {
	w := sh.windows[k]
	if w == nil {
		w = &callWindow{}
		sh.windows[k] = w
	}
	cutoff := now.Add(-sh.s.opts.SheetsWindow)
	w.times = dropUntil(w.times, cutoff)
	w.accepted = dropUntil(w.accepted, cutoff)
	return w
}

// dropUntil drops the times at or before cutoff from the sorted times.
func dropUntil(times []time.Time, cutoff time.Time) []time.Time {
	drop := 0
	for drop < len(times) && !times[drop].After(cutoff) {
		drop++
	}
	return times[drop:]
}

func (sh *Sheets) countRows(n int) {
	sh.quotaMu.Lock()
	sh.stats.RowsWritten += n
	sh.quotaMu.Unlock()
}

// ---- routing ----

// sheetsMethods are the Sheets methods the emulator serves.
func sheetsMethods() []string {
	return []string{MethodSheetsGet, MethodSpreadsheetsBatchUpdate, MethodValuesGet, MethodValuesAppend, MethodValuesUpdate,
		MethodValuesBatchUpdate, MethodValuesClear}
}

func (sh *Sheets) newEndpoint(method string) *endpoint {
	ep := &endpoint{method: method, auth: true}
	kind := writeCall
	switch method {
	case MethodSheetsGet:
		ep.handle, kind = sh.getSpreadsheet, readCall
	case MethodSpreadsheetsBatchUpdate:
		ep.handle = sh.batchUpdate
	case MethodValuesGet:
		ep.handle, kind = sh.getValues, readCall
	case MethodValuesAppend:
		ep.handle = sh.appendValues
	case MethodValuesUpdate:
		ep.handle = sh.updateValues
	case MethodValuesBatchUpdate:
		ep.handle = sh.batchUpdateValues
	case MethodValuesClear:
		ep.handle = sh.clearValues
	}
	handle := ep.handle
	ep.handle = func(c *call) (any, error) {
		if err := sh.admit(c.account, kind); err != nil {
			return nil, err
		}
		return handle(c)
	}
	return ep
}

// route maps v4/spreadsheets/... to a method. The range segment is split
// on its escaped form, so a ':' inside the range (sent as %3A) is never
// taken for the ":append" or ":clear" suffix.
func (sh *Sheets) route(r *http.Request) (*endpoint, map[string]string, error) {
	const prefix = "/v4/spreadsheets/"
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, prefix) {
		return nil, nil, errNotFound("")
	}
	raw := strings.Split(strings.TrimPrefix(p, prefix), "/")
	unesc := func(s string) string {
		u, err := url.PathUnescape(s)
		if err != nil {
			return s
		}
		return u
	}
	params := map[string]string{"spreadsheetId": unesc(raw[0])}
	var method string
	switch {
	case len(raw) == 1 && strings.HasSuffix(raw[0], ":batchUpdate"):
		if r.Method != http.MethodPost {
			return nil, nil, errMethod()
		}
		params["spreadsheetId"] = unesc(strings.TrimSuffix(raw[0], ":batchUpdate"))
		method = MethodSpreadsheetsBatchUpdate
	case len(raw) == 1 && raw[0] != "":
		if r.Method != http.MethodGet {
			return nil, nil, errMethod()
		}
		method = MethodSheetsGet
	case len(raw) == 2 && raw[1] == "values:batchUpdate":
		if r.Method != http.MethodPost {
			return nil, nil, errMethod()
		}
		method = MethodValuesBatchUpdate
	case len(raw) == 3 && raw[1] == "values":
		rng, action := raw[2], ""
		if i := strings.LastIndex(rng, ":"); i >= 0 && (rng[i+1:] == "append" || rng[i+1:] == "clear") {
			rng, action = rng[:i], rng[i+1:]
		}
		params["range"] = unesc(rng)
		switch {
		case action == "append" && r.Method == http.MethodPost:
			method = MethodValuesAppend
		case action == "clear" && r.Method == http.MethodPost:
			method = MethodValuesClear
		case action == "" && r.Method == http.MethodGet:
			method = MethodValuesGet
		case action == "" && r.Method == http.MethodPut:
			method = MethodValuesUpdate
		default:
			return nil, nil, errMethod()
		}
	default:
		return nil, nil, errNotFound("")
	}
	return sh.eps[method], params, nil
}

// open returns the call's spreadsheet, locked, after the access check. The
// caller unlocks it.
func (sh *Sheets) open(c *call) (*spreadsheet, error) {
	book, err := sh.book(c.params["spreadsheetId"])
	if err != nil {
		return nil, errNotFound("Requested entity was not found.")
	}
	book.mu.Lock()
	if !book.access[c.account] {
		book.mu.Unlock()
		return nil, &apiError{Code: 403, Status: "PERMISSION_DENIED", Reason: "forbidden", Message: "The caller does not have permission"}
	}
	return book, nil
}

// openRange is open for a call on one range: it also parses the call's
// range parameter. The caller unlocks the book; on an error it is unlocked.
func (sh *Sheets) openRange(c *call) (*spreadsheet, gridRange, error) {
	book, err := sh.open(c)
	if err != nil {
		return nil, gridRange{}, err
	}
	g, err := book.parseRange(c.params["range"])
	if err != nil {
		book.mu.Unlock()
		return nil, gridRange{}, err
	}
	return book, g, nil
}

// valuesWrite is a values.update or values.append call, read: its body, its
// spreadsheet (locked: the caller unlocks it), its range and the cells.
type valuesWrite struct {
	vr    sheetsapi.ValueRange
	book  *spreadsheet
	g     gridRange
	cells [][]*Cell
}

// openWrite reads a values.update or values.append call (see valuesWrite).
func (sh *Sheets) openWrite(c *call) (*valuesWrite, error) {
	w := &valuesWrite{}
	if err := c.decodeBody(&w.vr); err != nil {
		return nil, err
	}
	var err error
	if w.book, w.g, err = sh.openRange(c); err != nil {
		return nil, err
	}
	if w.cells, err = toCells(&w.vr, c.query.Get("valueInputOption")); err != nil {
		w.book.mu.Unlock()
		return nil, err
	}
	return w, nil
}

func (sh *Sheets) getSpreadsheet(c *call) (any, error) {
	book, err := sh.open(c)
	if err != nil {
		return nil, err
	}
	defer book.mu.Unlock()
	out := &sheetsapi.Spreadsheet{
		SpreadsheetId:  book.id,
		SpreadsheetUrl: "https://docs.google.com/spreadsheets/d/" + book.id + "/edit",
		Properties:     &sheetsapi.SpreadsheetProperties{Title: book.title, Locale: "en_US", TimeZone: "Etc/GMT"},
	}
	for i, s := range book.sheets {
		rows, cols := s.gridSize()
		out.Sheets = append(out.Sheets, &sheetsapi.Sheet{Properties: &sheetsapi.SheetProperties{
			SheetId: s.id, Title: s.title, Index: int64(i), SheetType: "GRID",
			GridProperties:  &sheetsapi.GridProperties{RowCount: int64(rows), ColumnCount: int64(cols)},
			ForceSendFields: []string{"SheetId", "Index"},
		}})
	}
	return out, nil
}

// ---- A1 ranges ----

// gridRange is a parsed A1 range: rows [r0, r1) and columns [c0, c1),
// r1 or c1 -1 when unbounded.
type gridRange struct {
	sheet          *sheet
	r0, r1, c0, c1 int
}

func (s *sheet) gridSize() (rows, cols int) { return s.rowCount, s.colCount }

// errGrid is Google's answer to a range past the grid of its sheet.
func errGrid(s *sheet, r0, r1, c0, c1 int) *apiError {
	return errInvalid(fmt.Sprintf("Range ('%s'!%s%d:%s%d) exceeds grid limits. Max rows: %d, max columns: %d",
		strings.ReplaceAll(s.title, "'", "''"), colName(c0), r0+1, colName(c1-1), r1, s.rowCount, s.colCount))
}

// checkGrid refuses a range whose cells [r0, r1) x [c0, c1) are not all in
// the sheet's grid.
func checkGrid(s *sheet, r0, r1, c0, c1 int) error {
	if r0 >= s.rowCount || c0 >= s.colCount || r1 > s.rowCount || c1 > s.colCount {
		return errGrid(s, r0, r1, c0, c1)
	}
	return nil
}

// parseRange parses "Sheet1!A1:B2", "'My sheet'!A:C", "Sheet1", "A5:F" (the
// first sheet) and the like.
func (b *spreadsheet) parseRange(a1 string) (gridRange, error) {
	bad := errInvalid("Unable to parse range: " + a1)
	name, cells := "", a1
	if strings.HasPrefix(a1, "'") {
		end := 1
		var sb strings.Builder
		for end < len(a1) {
			if a1[end] == '\'' {
				if end+1 < len(a1) && a1[end+1] == '\'' {
					sb.WriteByte('\'')
					end += 2
					continue
				}
				break
			}
			sb.WriteByte(a1[end])
			end++
		}
		if end >= len(a1) {
			return gridRange{}, bad
		}
		name, cells = sb.String(), a1[end+1:]
		if cells != "" {
			if !strings.HasPrefix(cells, "!") || len(cells) == 1 {
				return gridRange{}, bad
			}
			cells = cells[1:]
		}
	} else if i := strings.LastIndex(a1, "!"); i >= 0 {
		name, cells = a1[:i], a1[i+1:]
		if cells == "" {
			return gridRange{}, bad
		}
	} else if s := b.sheet(a1); s != nil {
		name, cells = a1, ""
	} else {
		name = b.sheets[0].title
	}
	s := b.sheet(name)
	if s == nil {
		return gridRange{}, bad
	}
	g := gridRange{sheet: s, r1: -1, c1: -1}
	if cells == "" {
		return g, nil
	}
	left, right, isRange := strings.Cut(cells, ":")
	c0, r0, ok := parseCellRef(left)
	if !ok || (c0 < 0 && r0 < 0) {
		return gridRange{}, bad
	}
	g.c0, g.r0 = max(c0, 0), max(r0, 0)
	if !isRange {
		switch {
		case c0 >= 0 && r0 >= 0:
			g.c1, g.r1 = c0+1, r0+1
		case c0 >= 0:
			g.c1 = c0 + 1
		default:
			g.r1 = r0 + 1
		}
		return g, nil
	}
	c1, r1, ok := parseCellRef(right)
	if !ok || (c1 < 0 && r1 < 0) {
		return gridRange{}, bad
	}
	if c1 >= 0 {
		g.c1 = c1 + 1
	}
	if r1 >= 0 {
		g.r1 = r1 + 1
	}
	if (g.c1 >= 0 && g.c1 <= g.c0) || (g.r1 >= 0 && g.r1 <= g.r0) {
		// Sheets accepts reversed corners; normalize them.
		if g.c1 >= 0 && g.c1 <= g.c0 {
			g.c0, g.c1 = g.c1-1, g.c0+1
		}
		if g.r1 >= 0 && g.r1 <= g.r0 {
			g.r0, g.r1 = g.r1-1, g.r0+1
		}
	}
	return g, nil
}

// parseCellRef parses "B7", "B" or "7" into 0-based column and row, -1 for
// a missing part.
func parseCellRef(s string) (col, row int, ok bool) {
	col, row = -1, -1
	i := 0
	for i < len(s) && (s[i] >= 'A' && s[i] <= 'Z' || s[i] >= 'a' && s[i] <= 'z') {
		i++
	}
	if i > 0 {
		if i > 3 {
			return 0, 0, false
		}
		col = 0
		for _, ch := range strings.ToUpper(s[:i]) {
			col = col*26 + int(ch-'A'+1)
		}
		col--
	}
	if i < len(s) {
		n, err := strconv.Atoi(s[i:])
		if err != nil || n < 1 || n > 10_000_000 {
			return 0, 0, false
		}
		row = n - 1
	}
	return col, row, true
}

func colName(c int) string {
	var b []byte
	for c++; c > 0; c = (c - 1) / 26 {
		b = append([]byte{byte('A' + (c-1)%26)}, b...)
	}
	return string(b)
}

func quoteSheet(name string) string {
	for _, r := range name {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return "'" + strings.ReplaceAll(name, "'", "''") + "'"
		}
	}
	return name
}

// a1 formats rows [r0, r1) and columns [c0, c1) of s.
func a1(s *sheet, r0, r1, c0, c1 int) string {
	return fmt.Sprintf("%s!%s%d:%s%d", quoteSheet(s.title), colName(c0), r0+1, colName(c1-1), r1)
}

// bounded returns g with unbounded ends clamped to the sheet's grid.
func (g gridRange) bounded() gridRange {
	rows, cols := g.sheet.gridSize()
	if g.r1 < 0 {
		g.r1 = max(rows, g.r0+1)
	}
	if g.c1 < 0 {
		g.c1 = max(cols, g.c0+1)
	}
	return g
}

func (g gridRange) String() string {
	b := g.bounded()
	return a1(g.sheet, b.r0, b.r1, b.c0, b.c1)
}

// ---- values ----

func trimRow(r []Cell) []Cell {
	n := len(r)
	for n > 0 && r[n-1] == (Cell{}) {
		n--
	}
	return r[:n]
}

func trimRows(rows [][]Cell) [][]Cell {
	for i := range rows {
		rows[i] = trimRow(rows[i])
	}
	n := len(rows)
	for n > 0 && len(rows[n-1]) == 0 {
		n--
	}
	return rows[:n]
}

func (s *sheet) set(r, c int, v Cell) {
	for len(s.rows) <= r {
		s.rows = append(s.rows, nil)
	}
	row := s.rows[r]
	if c >= len(row) {
		if v == (Cell{}) {
			return
		}
		row = append(row, make([]Cell, c+1-len(row))...)
	}
	row[c] = v
	s.rows[r] = row
}

func (sh *Sheets) getValues(c *call) (any, error) {
	book, g, err := sh.openRange(c)
	if err != nil {
		return nil, err
	}
	defer book.mu.Unlock()
	major := c.query.Get("majorDimension")
	if major == "" {
		major = "ROWS"
	}
	if major != "ROWS" && major != "COLUMNS" {
		return nil, errInvalid("Invalid majorDimension: " + major)
	}
	s := g.sheet
	b := g.bounded()
	// values.get of a range with any cell past the grid is refused, as
	// Google refuses reads that start past it (the stricter reading where
	// its documents are silent: see doc_sheets.go). An open end ("A5:E",
	// "Sheet1") reads to the grid's edge.
	if g.r0 >= s.rowCount || g.c0 >= s.colCount || b.r1 > s.rowCount || b.c1 > s.colCount {
		return nil, errGrid(s, b.r0, b.r1, b.c0, b.c1)
	}
	var rows [][]Cell
	for r := b.r0; r < b.r1 && r < len(s.rows); r++ {
		row := make([]Cell, 0)
		for col := b.c0; col < b.c1 && col < len(s.rows[r]); col++ {
			row = append(row, s.rows[r][col])
		}
		rows = append(rows, row)
	}
	rows = trimRows(rows)
	out := &sheetsapi.ValueRange{Range: g.String(), MajorDimension: major}
	for _, r := range rows {
		vals := make([]any, len(r))
		for i, cell := range r {
			vals[i] = cell.Value
		}
		out.Values = append(out.Values, vals)
	}
	if major == "COLUMNS" {
		out.Values = transpose(out.Values)
	}
	return out, nil
}

func transpose(in [][]any) [][]any {
	width := 0
	for _, r := range in {
		width = max(width, len(r))
	}
	out := make([][]any, width)
	for c := range out {
		for r := range in {
			if c < len(in[r]) {
				for len(out[c]) < r {
					out[c] = append(out[c], "")
				}
				out[c] = append(out[c], in[r][c])
			}
		}
	}
	return out
}

// toCells converts request values to cells; nil entries stay nil (they
// leave a cell unchanged).
func toCells(vr *sheetsapi.ValueRange, inputOption string) ([][]*Cell, error) {
	switch inputOption {
	case "RAW", "USER_ENTERED":
	case "":
		return nil, errInvalid("'valueInputOption' is required but not specified")
	default:
		return nil, errInvalid("Invalid valueInputOption: " + inputOption)
	}
	values := vr.Values
	switch vr.MajorDimension {
	case "", "ROWS", "DIMENSION_UNSPECIFIED":
	case "COLUMNS":
		values = transpose(values)
	default:
		return nil, errInvalid("Invalid majorDimension: " + vr.MajorDimension)
	}
	out := make([][]*Cell, len(values))
	for i, row := range values {
		out[i] = make([]*Cell, len(row))
		for j, v := range row {
			var cell Cell
			switch v := v.(type) {
			case nil:
				continue
			case string:
				cell.Value = v
				if inputOption == "USER_ENTERED" {
					if strings.HasPrefix(v, "'") {
						cell.Value = v[1:]
					} else if strings.HasPrefix(v, "=") {
						cell.Formula = true
					}
				}
			case float64:
				cell.Value = strconv.FormatFloat(v, 'f', -1, 64)
			case bool:
				cell.Value = strings.ToUpper(strconv.FormatBool(v))
			default:
				return nil, errInvalid(fmt.Sprintf("Invalid values[%d][%d]: %v", i, j, v))
			}
			out[i][j] = &cell
		}
	}
	return out, nil
}

// write puts cells at (r0, c0) and returns the update's answer.
func write(book *spreadsheet, s *sheet, r0, c0 int, cells [][]*Cell) *sheetsapi.UpdateValuesResponse {
	width, count := 0, 0
	for i, row := range cells {
		width = max(width, len(row))
		for j, v := range row {
			if v != nil {
				s.set(r0+i, c0+j, *v)
				count++
			}
		}
	}
	resp := &sheetsapi.UpdateValuesResponse{SpreadsheetId: book.id}
	if len(cells) > 0 && width > 0 {
		resp.UpdatedRange = a1(s, r0, r0+len(cells), c0, c0+width)
		resp.UpdatedRows, resp.UpdatedColumns, resp.UpdatedCells = int64(len(cells)), int64(width), int64(count)
	} else {
		resp.UpdatedRange = a1(s, r0, r0+1, c0, c0+1)
	}
	return resp
}

func (sh *Sheets) appendValues(c *call) (any, error) {
	w, err := sh.openWrite(c)
	if err != nil {
		return nil, err
	}
	defer w.book.mu.Unlock()
	book, g, cells := w.book, w.g, w.cells
	insert := c.query.Get("insertDataOption")
	if insert != "" && insert != "OVERWRITE" && insert != "INSERT_ROWS" {
		return nil, errInvalid("Invalid insertDataOption: " + insert)
	}
	s, b := g.sheet, g.bounded()
	// The table is the block of rows holding data in the range's columns;
	// the new rows go after its last row.
	first, last := -1, -1
	for r := g.r0; r < len(s.rows) && (g.r1 < 0 || r < g.r1); r++ {
		for col := b.c0; col < b.c1 && col < len(s.rows[r]); col++ {
			if s.rows[r][col] != (Cell{}) {
				if first < 0 {
					first = r
				}
				last = r
				break
			}
		}
	}
	at := g.r0
	resp := &sheetsapi.AppendValuesResponse{SpreadsheetId: book.id}
	if last >= 0 {
		at = last + 1
		width := 0
		for r := first; r <= last; r++ {
			width = max(width, min(len(s.rows[r]), b.c1)-b.c0)
		}
		resp.TableRange = a1(s, first, last+1, b.c0, b.c0+max(width, 1))
	}
	// values.append is the one values call that grows the grid: by the
	// rows inserted (INSERT_ROWS) or needed past its end, and the columns
	// needed (the cell cap holds).
	width := 0
	for _, r := range cells {
		width = max(width, len(r))
	}
	rows, cols := s.rowCount, max(s.colCount, b.c0+width)
	if insert == "INSERT_ROWS" && at < s.rowCount {
		rows += len(cells)
	}
	rows = max(rows, at+len(cells))
	if book.cells()-s.rowCount*s.colCount+rows*cols > MaxCells || cols > maxColumns {
		return nil, errCellCap()
	}
	s.rowCount, s.colCount = rows, cols
	if insert == "INSERT_ROWS" && at < len(s.rows) {
		s.rows = slices.Insert(s.rows, at, make([][]Cell, len(cells))...)
	}
	resp.Updates = write(book, s, at, b.c0, cells)
	if boolParam(c, "includeValuesInResponse") {
		resp.Updates.UpdatedData = &sheetsapi.ValueRange{Range: resp.Updates.UpdatedRange, MajorDimension: "ROWS", Values: w.vr.Values}
	}
	sh.countRows(len(cells))
	return resp, nil
}

// checkWriteGrid refuses a values.update (or one range of
// values.batchUpdate) whose range, or whose values, reach past the grid:
// only values.append grows a grid.
func checkWriteGrid(g gridRange, cells [][]*Cell) error {
	width := 0
	for _, r := range cells {
		width = max(width, len(r))
	}
	r1, c1 := g.r0+max(len(cells), 1), g.c0+max(width, 1)
	if g.r1 >= 0 {
		r1 = max(r1, g.r1)
	}
	if g.c1 >= 0 {
		c1 = max(c1, g.c1)
	}
	return checkGrid(g.sheet, g.r0, r1, g.c0, c1)
}

// checkFits refuses values that do not fit a bounded range.
func checkFits(g gridRange, cells [][]*Cell) error {
	if g.r1 >= 0 && g.r0+len(cells) > g.r1 {
		return errInvalid(fmt.Sprintf("Requested writing within range [%s], but tried writing to row [%d]", g, g.r0+len(cells)))
	}
	for _, row := range cells {
		if g.c1 >= 0 && g.c0+len(row) > g.c1 {
			return errInvalid(fmt.Sprintf("Requested writing within range [%s], but tried writing to column [%s]", g, colName(g.c0+len(row)-1)))
		}
	}
	return nil
}

func (sh *Sheets) updateValues(c *call) (any, error) {
	w, err := sh.openWrite(c)
	if err != nil {
		return nil, err
	}
	defer w.book.mu.Unlock()
	if err := checkFits(w.g, w.cells); err != nil {
		return nil, err
	}
	if err := checkWriteGrid(w.g, w.cells); err != nil {
		return nil, err
	}
	resp := write(w.book, w.g.sheet, w.g.r0, w.g.c0, w.cells)
	sh.countRows(len(w.cells))
	return resp, nil
}

func (sh *Sheets) batchUpdateValues(c *call) (any, error) {
	var req sheetsapi.BatchUpdateValuesRequest
	if err := c.decodeBody(&req); err != nil {
		return nil, err
	}
	book, err := sh.open(c)
	if err != nil {
		return nil, err
	}
	defer book.mu.Unlock()
	type update struct {
		g     gridRange
		cells [][]*Cell
	}
	updates := make([]update, 0, len(req.Data))
	for _, vr := range req.Data {
		if vr == nil {
			continue
		}
		g, err := book.parseRange(vr.Range)
		if err != nil {
			return nil, err
		}
		cells, err := toCells(vr, req.ValueInputOption)
		if err != nil {
			return nil, err
		}
		if err := checkFits(g, cells); err != nil {
			return nil, err
		}
		if err := checkWriteGrid(g, cells); err != nil {
			return nil, err
		}
		updates = append(updates, update{g, cells})
	}
	if req.ValueInputOption == "" {
		return nil, errInvalid("'valueInputOption' is required but not specified")
	}
	resp := &sheetsapi.BatchUpdateValuesResponse{SpreadsheetId: book.id}
	touched := map[*sheet]bool{}
	rows := 0
	for _, u := range updates {
		r := write(book, u.g.sheet, u.g.r0, u.g.c0, u.cells)
		resp.Responses = append(resp.Responses, r)
		resp.TotalUpdatedRows += r.UpdatedRows
		resp.TotalUpdatedColumns += r.UpdatedColumns
		resp.TotalUpdatedCells += r.UpdatedCells
		touched[u.g.sheet] = true
		rows += len(u.cells)
	}
	resp.TotalUpdatedSheets = int64(len(touched))
	sh.countRows(rows)
	return resp, nil
}

func (sh *Sheets) clearValues(c *call) (any, error) {
	book, g, err := sh.openRange(c)
	if err != nil {
		return nil, err
	}
	defer book.mu.Unlock()
	s, b := g.sheet, g.bounded()
	if g.r0 >= s.rowCount || g.c0 >= s.colCount {
		return nil, errGrid(s, b.r0, b.r1, b.c0, b.c1)
	}
	for r := b.r0; r < b.r1 && r < len(s.rows); r++ {
		for col := b.c0; col < b.c1 && col < len(s.rows[r]); col++ {
			s.rows[r][col] = Cell{}
		}
	}
	s.rows = trimRows(s.rows)
	return &sheetsapi.ClearValuesResponse{SpreadsheetId: book.id, ClearedRange: g.String()}, nil
}
