package googlefake

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
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
	// WriteCalls counts accepted write calls (append, update, batchUpdate,
	// clear).
	WriteCalls int
	// RejectedWrites counts write calls refused with 429 by the quota.
	RejectedWrites int
	// RowsWritten counts rows written by accepted calls.
	RowsWritten int
	// MaxWritesInWindow is the most accepted write calls one account made
	// within any Options.SheetsWindow.
	MaxWritesInWindow int
}

// Sheets holds the spreadsheets and the per-account write quota.
type Sheets struct {
	s   *Server
	eps map[string]*endpoint // by method, built once

	mu    sync.RWMutex
	books map[string]*spreadsheet

	quotaMu sync.Mutex
	windows map[string]*writeWindow // by account
	stats   SheetsStats
}

type writeWindow struct {
	times []time.Time // accepted writes within the window, oldest first
	max   int
}

type spreadsheet struct {
	mu          sync.Mutex
	id, title   string
	owner       string
	readers     map[string]bool
	sheets      []*sheet
	nextSheetID int64
}

type sheet struct {
	id    int64
	title string
	rows  [][]Cell
}

func newSheets(s *Server) *Sheets {
	sh := &Sheets{s: s, eps: make(map[string]*endpoint), books: make(map[string]*spreadsheet), windows: make(map[string]*writeWindow)}
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
		readers: make(map[string]bool), nextSheetID: 1_000_001,
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
		book.sheets = append(book.sheets, &sheet{id: id, title: name})
	}
	sh.mu.Lock()
	sh.books[book.id] = book
	sh.mu.Unlock()
	return book.id, nil
}

// Share lets another account read and write the spreadsheet.
func (sh *Sheets) Share(spreadsheetID, email string) error {
	book, err := sh.book(spreadsheetID)
	if err != nil {
		return err
	}
	book.mu.Lock()
	defer book.mu.Unlock()
	book.readers[normEmail(email)] = true
	return nil
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
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	if w := sh.windows[normEmail(email)]; w != nil {
		return w.max
	}
	return 0
}

func (sh *Sheets) resetStats() {
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	sh.stats = SheetsStats{}
	for _, w := range sh.windows {
		w.max = len(w.times)
	}
}

// admit counts a write call of account against its rolling quota, or
// refuses it with 429 RESOURCE_EXHAUSTED.
func (sh *Sheets) admit(account string) error {
	now := sh.s.now()
	limit, window := sh.s.opts.SheetsWriteLimit, sh.s.opts.SheetsWindow
	sh.quotaMu.Lock()
	defer sh.quotaMu.Unlock()
	w := sh.windows[account]
	if w == nil {
		w = &writeWindow{}
		sh.windows[account] = w
	}
	cutoff := now.Add(-window)
	drop := 0
	for drop < len(w.times) && !w.times[drop].After(cutoff) {
		drop++
	}
	w.times = w.times[drop:]
	if limit > 0 && len(w.times) >= limit {
		sh.stats.RejectedWrites++
		wait := w.times[0].Add(window).Sub(now)
		return &apiError{
			Code: 429, Status: "RESOURCE_EXHAUSTED", Reason: "rateLimitExceeded",
			Message: fmt.Sprintf("Quota exceeded for quota metric 'Write requests' and limit "+
				"'Write requests per minute per user' of service 'sheets.googleapis.com' for consumer "+
				"'project_number:000000000000'. (%d per %s; next slot in %s)", limit, window, wait.Round(time.Millisecond)),
		}
	}
	w.times = append(w.times, now)
	w.max = max(w.max, len(w.times))
	sh.stats.WriteCalls++
	sh.stats.MaxWritesInWindow = max(sh.stats.MaxWritesInWindow, w.max)
	return nil
}

func (sh *Sheets) countRows(n int) {
	sh.quotaMu.Lock()
	sh.stats.RowsWritten += n
	sh.quotaMu.Unlock()
}

// ---- routing ----

// sheetsMethods are the Sheets methods the emulator serves.
func sheetsMethods() []string {
	return []string{MethodSheetsGet, MethodValuesGet, MethodValuesAppend, MethodValuesUpdate,
		MethodValuesBatchUpdate, MethodValuesClear}
}

func (sh *Sheets) newEndpoint(method string) *endpoint {
	ep := &endpoint{method: method, auth: true}
	switch method {
	case MethodSheetsGet:
		ep.handle = sh.getSpreadsheet
	case MethodValuesGet:
		ep.handle = sh.getValues
	case MethodValuesAppend:
		ep.handle = sh.appendValues
	case MethodValuesUpdate:
		ep.handle = sh.updateValues
	case MethodValuesBatchUpdate:
		ep.handle = sh.batchUpdateValues
	case MethodValuesClear:
		ep.handle = sh.clearValues
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
	if book.owner != c.account && !book.readers[c.account] {
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

func (s *sheet) gridSize() (rows, cols int) {
	rows, cols = max(1000, len(s.rows)), 26
	for _, r := range s.rows {
		cols = max(cols, len(r))
	}
	return rows, cols
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
	if err := sh.admit(c.account); err != nil {
		return nil, err
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
	if err := sh.admit(c.account); err != nil {
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
		updates = append(updates, update{g, cells})
	}
	if req.ValueInputOption == "" {
		return nil, errInvalid("'valueInputOption' is required but not specified")
	}
	if err := sh.admit(c.account); err != nil {
		return nil, err
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
	if err := sh.admit(c.account); err != nil {
		return nil, err
	}
	s, b := g.sheet, g.bounded()
	for r := b.r0; r < b.r1 && r < len(s.rows); r++ {
		for col := b.c0; col < b.c1 && col < len(s.rows[r]); col++ {
			s.rows[r][col] = Cell{}
		}
	}
	s.rows = trimRows(s.rows)
	return &sheetsapi.ClearValuesResponse{SpreadsheetId: book.id, ClearedRange: g.String()}, nil
}
