package store

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The forms buckets (created by the "forms and submissions" migration).
var (
	bucketForms       = []byte("forms")        // form id -> Form
	bucketFormSheets  = []byte("form_sheets")  // lower(spreadsheet id \x00 sheet) -> form id
	bucketSubmissions = []byte("submissions")  // submission id (sequence) -> Submission
	bucketFormBuffers = []byte("form_buffers") // form id -> sub-bucket: seq -> submission id (8 bytes)
	bucketSheetWrites = []byte("sheet_writes") // form id -> SheetWrites
)

// Form is a survey whose submissions are written, one row each, to one
// sheet of one spreadsheet through one Google account.
//
// The form owns the sheet's rows from StartRow down, in the columns it
// writes (A up to one past its columns): mailroom writes row N+1 after row
// N and never reads the sheet to find where to write, so nobody else should
// write into those cells.
type Form struct {
	ID            string `json:"id"`
	UserID        string `json:"userId"`
	AccountID     string `json:"accountId"`
	SpreadsheetID string `json:"spreadsheetId"`
	// Title is the spreadsheet's title when the form was made or last
	// pointed at a sheet ("" for forms made before it was kept).
	Title   string   `json:"title,omitempty"`
	Sheet   string   `json:"sheet"`
	Columns []string `json:"columns"`
	// StartRow is the first row (1-based) the form writes: the row after
	// the last one that held data in its columns when it was created.
	StartRow  int       `json:"startRow"`
	CreatedAt time.Time `json:"createdAt"`
	// MovedAt is when the form's user was exported to another mailroom:
	// the form refuses submissions here (ErrMoved). Zero: it takes them.
	MovedAt time.Time `json:"movedAt,omitzero"`
}

// Submission is one accepted set of answers. Values hold the answers in
// the form's column order ("" for a column left out); they never change.
type Submission struct {
	ID          string    `json:"id"`
	FormID      string    `json:"formId"`
	SubmittedAt time.Time `json:"submittedAt"`
	Values      []string  `json:"values"`
}

// SheetWrite is a write planned for a form's sheet: the first Count rows of
// its buffer (buffer sequence numbers FirstSeq..FirstSeq+Count-1, in
// submission order) go to rows Row..Row+Count-1. It is recorded before the
// Sheets call and never changes until the write is known to have landed,
// so every attempt writes the same values to the same cells.
type SheetWrite struct {
	Row      int    `json:"row"`
	FirstSeq uint64 `json:"firstSeq"`
	Count    int    `json:"count"`
	// Attempts counts calls started for this write. Zero: no call was
	// made, so nothing can have landed.
	Attempts int `json:"attempts"`
	// Verified is the number of attempts after which the range was read
	// back and found without the rows. Attempts > Verified: a call may
	// have landed since, and the range is read back before writing again.
	Verified  int       `json:"verified,omitempty"`
	PlannedAt time.Time `json:"plannedAt"`
	// GrowRows and GrowCols are, when the write needs a grid larger than
	// the one known, the grid to grow the sheet to before the write
	// (planned with it, so a retry grows to the same size). Zero: no grow
	// planned.
	GrowRows int `json:"growRows,omitempty"`
	GrowCols int `json:"growCols,omitempty"`
}

// LastRow is the last row (1-based) the write fills.
func (p SheetWrite) LastRow() int { return p.Row + p.Count - 1 }

// SheetWrites is a form's write bookkeeping.
type SheetWrites struct {
	// NextRow is the row the next planned write starts at.
	NextRow int `json:"nextRow"`
	// Buffered counts submissions waiting to be written (Pending's rows
	// included until they are known to have landed).
	Buffered    int       `json:"buffered"`
	RowsWritten int       `json:"rowsWritten"`
	Calls       int       `json:"calls"`
	LastFlushAt time.Time `json:"lastFlushAt,omitzero"`
	LastError   string    `json:"lastError,omitempty"`
	LastErrorAt time.Time `json:"lastErrorAt,omitzero"`
	// Pending is the write in progress, if any.
	Pending *SheetWrite `json:"pending,omitempty"`
	// GridRows and GridCols are the grid of the form's sheet as last
	// read or grown by mailroom. Zero: not known (read it before a write
	// that could pass it).
	GridRows int `json:"gridRows,omitempty"`
	GridCols int `json:"gridCols,omitempty"`
	// Grows counts the grid grows mailroom made for the form.
	Grows int `json:"grows,omitempty"`
	// State is FormError while the form's sheet cannot take its rows (it
	// is gone, unshared, missing its tab or full; LastError says which);
	// rows wait meanwhile. Empty: ok.
	State string `json:"state,omitempty"`
	// ErrorChecks counts the checks that found the form in error since it
	// was last ok (the backoff of the next check grows with it).
	ErrorChecks int `json:"errorChecks,omitempty"`
}

// FormError is SheetWrites.State of a form whose sheet cannot take rows.
const FormError = "error"

// GridPlan tells SheetPlanWrite how a write grows its sheet: Cols is the
// width of a row, Step the rows to add beyond the write's last row when
// the grid must grow (so that one grow serves many writes). With MaxRow
// set instead, the write takes no more rows than end at MaxRow (the grid
// known) and plans no grow.
type GridPlan struct {
	Cols, Step int
	MaxRow     int
}

// formSheetKey is the form_sheets key: one form per sheet.
func formSheetKey(spreadsheetID, sheet string) []byte {
	return []byte(strings.ToLower(spreadsheetID + "\x00" + sheet))
}

// FormCreate stores a new form with a fresh id and an empty buffer
// (form.created).
// ErrConflict when another form already writes that sheet.
func (tx *Tx) FormCreate(f Form) (Form, error) {
	if f.StartRow < 1 {
		f.StartRow = 1
	}
	if len(f.Columns) == 0 || f.SpreadsheetID == "" || f.Sheet == "" {
		return f, fmt.Errorf("store: form needs a spreadsheet, a sheet and columns")
	}
	sheets := tx.tx.Bucket(bucketFormSheets)
	key := formSheetKey(f.SpreadsheetID, f.Sheet)
	if held := sheets.Get(key); held != nil {
		return f, fmt.Errorf("store: sheet %q of spreadsheet %s is written by form %s: %w", f.Sheet, f.SpreadsheetID, held, ErrConflict)
	}
	f.ID = NewID()
	if f.CreatedAt.IsZero() {
		f.CreatedAt = time.Now().UTC()
	}
	if err := putJSON(tx.tx.Bucket(bucketForms), []byte(f.ID), f); err != nil {
		return f, fmt.Errorf("store: put form: %w", err)
	}
	if err := sheets.Put(key, []byte(f.ID)); err != nil {
		return f, err
	}
	if _, err := tx.tx.Bucket(bucketFormBuffers).CreateBucket([]byte(f.ID)); err != nil {
		return f, fmt.Errorf("store: form buffer: %w", err)
	}
	if err := tx.putSheetWrites(f.ID, SheetWrites{NextRow: f.StartRow}); err != nil {
		return f, err
	}
	return f, tx.formEvent(EventFormCreated, f)
}

// FormGet returns one form.
func (tx *Tx) FormGet(id string) (Form, error) {
	var f Form
	if err := getJSON(tx.tx.Bucket(bucketForms), []byte(id), &f); err != nil {
		return f, fmt.Errorf("store: form %s: %w", id, err)
	}
	return f, nil
}

// Forms lists every form, by id.
func (tx *Tx) Forms() ([]Form, error) {
	var out []Form
	err := tx.tx.Bucket(bucketForms).ForEach(func(_, v []byte) error {
		var f Form
		if err := json.Unmarshal(v, &f); err != nil {
			return fmt.Errorf("store: decode form: %w", err)
		}
		out = append(out, f)
		return nil
	})
	return out, err
}

// SheetWrites returns a form's write bookkeeping.
func (tx *Tx) SheetWrites(formID string) (SheetWrites, error) {
	var w SheetWrites
	if err := getJSON(tx.tx.Bucket(bucketSheetWrites), []byte(formID), &w); err != nil {
		return w, fmt.Errorf("store: sheet writes of form %s: %w", formID, err)
	}
	return w, nil
}

func (tx *Tx) putSheetWrites(formID string, w SheetWrites) error {
	if err := putJSON(tx.tx.Bucket(bucketSheetWrites), []byte(formID), w); err != nil {
		return fmt.Errorf("store: put sheet writes of form %s: %w", formID, err)
	}
	return nil
}

func (tx *Tx) formBuffer(formID string) (*bolt.Bucket, error) {
	b := tx.tx.Bucket(bucketFormBuffers).Bucket([]byte(formID))
	if b == nil {
		return nil, fmt.Errorf("store: buffer of form %s: %w", formID, ErrNotFound)
	}
	return b, nil
}

// SubmissionAdd stores a submission of the form and appends its id to the
// form's buffer, in one transaction, and counts its bytes to the form's
// user (UserSubmissionBytes). It assigns the submission's ID (ids grow in
// commit order) and returns the bookkeeping after the append.
func (tx *Tx) SubmissionAdd(s Submission) (Submission, SheetWrites, error) {
	w, err := tx.SheetWrites(s.FormID)
	if err != nil {
		return s, w, err
	}
	buf, err := tx.formBuffer(s.FormID)
	if err != nil {
		return s, w, err
	}
	subs := tx.tx.Bucket(bucketSubmissions)
	subs.FillPercent = 0.95 // keys only grow: pack the pages
	id, err := subs.NextSequence()
	if err != nil {
		return s, w, err
	}
	s.ID = hex.EncodeToString(u64(id))
	if s.SubmittedAt.IsZero() {
		s.SubmittedAt = time.Now().UTC()
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return s, w, fmt.Errorf("store: encode submission: %w", err)
	}
	if err := subs.Put(u64(id), raw); err != nil {
		return s, w, fmt.Errorf("store: put submission: %w", err)
	}
	f, err := tx.FormGet(s.FormID)
	if err != nil {
		return s, w, err
	}
	if err := tx.addUserBytes(f.UserID, submissionBytes(raw)); err != nil {
		return s, w, err
	}
	seq, err := buf.NextSequence()
	if err != nil {
		return s, w, err
	}
	buf.FillPercent = 0.95
	if err := buf.Put(u64(seq), u64(id)); err != nil {
		return s, w, fmt.Errorf("store: buffer submission: %w", err)
	}
	w.Buffered++
	return s, w, tx.putSheetWrites(s.FormID, w)
}

// SubmissionGet returns one submission.
func (tx *Tx) SubmissionGet(id string) (Submission, error) {
	var s Submission
	raw, err := hex.DecodeString(id)
	if err != nil || len(raw) != 8 {
		return s, fmt.Errorf("store: submission %q: %w", id, ErrNotFound)
	}
	if err := getJSON(tx.tx.Bucket(bucketSubmissions), raw, &s); err != nil {
		return s, fmt.Errorf("store: submission %s: %w", id, err)
	}
	return s, nil
}

// SheetOldestWaiting returns the submission time of the form's oldest
// buffered submission; ok is false when the buffer is empty.
func (tx *Tx) SheetOldestWaiting(formID string) (at time.Time, ok bool, err error) {
	buf, err := tx.formBuffer(formID)
	if err != nil {
		return at, false, err
	}
	_, v := buf.Cursor().First()
	if v == nil {
		return at, false, nil
	}
	var s Submission
	if err := getJSON(tx.tx.Bucket(bucketSubmissions), v, &s); err != nil {
		return at, false, fmt.Errorf("store: oldest submission of form %s: %w", formID, err)
	}
	return s.SubmittedAt, true, nil
}

// SheetPlan records the write of the form's next rows, at most limit of
// them, before any call is made, and counts the call about to start
// (Attempts and Calls). A write already pending is kept as it is (a retry
// writes the same rows to the same cells). It returns the bookkeeping and
// the submissions of the write, in order. With nothing buffered it returns
// a nil Pending.
func (tx *Tx) SheetPlan(formID string, limit int, at time.Time) (SheetWrites, []Submission, error) {
	w, err := tx.SheetPlanWrite(formID, limit, at, GridPlan{})
	if err != nil || w.Pending == nil {
		return w, nil, err
	}
	return tx.SheetAttempt(formID, limit)
}

// SheetPlanWrite records the write of the form's next rows, at most limit
// of them, with the grid it needs (see SheetWrite.GrowRows), before any
// call is made. A write already pending is kept as it is. With nothing
// buffered Pending stays nil. No attempt is counted (SheetAttempt).
func (tx *Tx) SheetPlanWrite(formID string, limit int, at time.Time, g GridPlan) (SheetWrites, error) {
	w, err := tx.SheetWrites(formID)
	if err != nil {
		return w, err
	}
	if w.Pending != nil {
		return w, nil
	}
	buf, err := tx.formBuffer(formID)
	if err != nil {
		return w, err
	}
	k, _ := buf.Cursor().First()
	if k == nil {
		return w, nil
	}
	p := &SheetWrite{Row: w.NextRow, FirstSeq: seqOf(k), Count: min(limit, w.Buffered), PlannedAt: at.UTC()}
	if g.MaxRow > 0 {
		p.Count = max(min(p.Count, g.MaxRow-p.Row+1), 1)
	}
	if g.Cols > 0 && (p.LastRow() > w.GridRows || g.Cols > w.GridCols) {
		p.GrowRows, p.GrowCols = p.LastRow()+max(g.Step, 0), g.Cols
	}
	w.Pending = p
	return w, tx.putSheetWrites(formID, w)
}

// SheetGrid records the grid of the form's sheet (rows, cols; zero: not
// known), and counts a grow made by mailroom when grown is set.
func (tx *Tx) SheetGrid(formID string, rows, cols int, grown bool) error {
	w, err := tx.SheetWrites(formID)
	if err != nil {
		return err
	}
	w.GridRows, w.GridCols = rows, cols
	if grown {
		w.Grows++
	}
	return tx.putSheetWrites(formID, w)
}

// SheetAttempt counts a call about to start for the form's pending write
// (Attempts and Calls) and returns the bookkeeping and the submissions of
// the write, in order. Before its first attempt (nothing of it can have
// landed) the write takes in the rows buffered since it was planned, up to
// limit and to the known grid. Without a pending write it returns a nil
// Pending.
func (tx *Tx) SheetAttempt(formID string, limit int) (SheetWrites, []Submission, error) {
	w, err := tx.SheetWrites(formID)
	if err != nil || w.Pending == nil {
		return w, nil, err
	}
	buf, err := tx.formBuffer(formID)
	if err != nil {
		return w, nil, err
	}
	if p := w.Pending; p.Attempts == 0 {
		n := min(limit, w.Buffered)
		if w.GridRows > 0 {
			n = min(n, w.GridRows-p.Row+1)
		}
		p.Count = max(p.Count, n)
	}
	w.Pending.Attempts++
	w.Calls++
	subs, err := tx.pendingSubmissions(formID, buf, w.Pending)
	if err != nil {
		return w, nil, err
	}
	return w, subs, tx.putSheetWrites(formID, w)
}

// SheetPendingRows returns the submissions of the form's pending write.
func (tx *Tx) SheetPendingRows(formID string) ([]Submission, error) {
	w, err := tx.SheetWrites(formID)
	if err != nil {
		return nil, err
	}
	if w.Pending == nil {
		return nil, nil
	}
	buf, err := tx.formBuffer(formID)
	if err != nil {
		return nil, err
	}
	return tx.pendingSubmissions(formID, buf, w.Pending)
}

func (tx *Tx) pendingSubmissions(formID string, buf *bolt.Bucket, p *SheetWrite) ([]Submission, error) {
	subs := tx.tx.Bucket(bucketSubmissions)
	out := make([]Submission, 0, p.Count)
	for i := range uint64(p.Count) {
		v := buf.Get(u64(p.FirstSeq + i))
		if v == nil {
			return nil, fmt.Errorf("store: buffer of form %s lacks row %d of the pending write", formID, p.FirstSeq+i)
		}
		var s Submission
		if err := getJSON(subs, v, &s); err != nil {
			return nil, fmt.Errorf("store: submission %x of form %s: %w", v, formID, err)
		}
		out = append(out, s)
	}
	return out, nil
}

func seqOf(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// SheetCommit records that the pending write p landed: its rows leave the
// buffer, NextRow moves past them and the counters grow. It is a no-op
// returning ok=false when p is no longer the pending write (another run
// committed it).
func (tx *Tx) SheetCommit(formID string, p SheetWrite, at time.Time) (w SheetWrites, ok bool, err error) {
	w, err = tx.SheetWrites(formID)
	if err != nil {
		return w, false, err
	}
	if w.Pending == nil || w.Pending.Row != p.Row || w.Pending.FirstSeq != p.FirstSeq || w.Pending.Count != p.Count {
		return w, false, nil
	}
	buf, err := tx.formBuffer(formID)
	if err != nil {
		return w, false, err
	}
	ids := make([][]byte, 0, p.Count)
	for i := range uint64(p.Count) {
		if v := buf.Get(u64(p.FirstSeq + i)); v != nil {
			ids = append(ids, append([]byte(nil), v...))
		}
		if err := buf.Delete(u64(p.FirstSeq + i)); err != nil {
			return w, false, fmt.Errorf("store: unbuffer form %s: %w", formID, err)
		}
	}
	if err := tx.rowsWrittenEvent(formID, p, ids); err != nil {
		return w, false, err
	}
	if w.State == FormError {
		if err := tx.formStateEvent(formID, "ok", ""); err != nil {
			return w, false, err
		}
	}
	w.NextRow = p.Row + p.Count
	w.Buffered -= p.Count
	w.RowsWritten += p.Count
	w.LastFlushAt = at.UTC()
	w.LastError, w.LastErrorAt = "", time.Time{}
	w.State, w.ErrorChecks = "", 0
	w.Pending = nil
	return w, true, tx.putSheetWrites(formID, w)
}

// SheetVerified records that the range of the pending write p was read
// back after all its attempts so far and did not hold its rows.
func (tx *Tx) SheetVerified(formID string, p SheetWrite) error {
	w, err := tx.SheetWrites(formID)
	if err != nil {
		return err
	}
	if w.Pending == nil || w.Pending.Row != p.Row || w.Pending.FirstSeq != p.FirstSeq || w.Pending.Attempts != p.Attempts {
		return nil
	}
	w.Pending.Verified = p.Attempts
	return tx.putSheetWrites(formID, w)
}

// SheetFailed records the last error of a form's flush.
func (tx *Tx) SheetFailed(formID, msg string, at time.Time) error {
	w, err := tx.SheetWrites(formID)
	if err != nil {
		return err
	}
	w.LastError, w.LastErrorAt = msg, at.UTC()
	return tx.putSheetWrites(formID, w)
}

// SheetWaiting puts the form in the error state with msg, counts the
// check, and reports whether the form was ok before (entered).
func (tx *Tx) SheetWaiting(formID, msg string, at time.Time) (w SheetWrites, entered bool, err error) {
	w, err = tx.SheetWrites(formID)
	if err != nil {
		return w, false, err
	}
	entered = w.State != FormError
	w.State, w.ErrorChecks = FormError, w.ErrorChecks+1
	w.LastError, w.LastErrorAt = msg, at.UTC()
	if entered {
		if err := tx.formStateEvent(formID, "error", msg); err != nil {
			return w, false, err
		}
	}
	return w, entered, tx.putSheetWrites(formID, w)
}

// FormRepoint points a form at another sheet: its rows not yet written go
// there from startRow down (a pending write is dropped: its rows are
// planned again for the new sheet), the grid known is the new sheet's,
// and the form is ok again. The rows already written stay where they are.
// ErrConflict when another form writes that sheet.
func (tx *Tx) FormRepoint(formID, spreadsheetID, sheet string, startRow, gridRows, gridCols int) (Form, SheetWrites, error) {
	f, err := tx.FormGet(formID)
	if err != nil {
		return f, SheetWrites{}, err
	}
	w, err := tx.SheetWrites(formID)
	if err != nil {
		return f, w, err
	}
	sheets := tx.tx.Bucket(bucketFormSheets)
	newKey := formSheetKey(spreadsheetID, sheet)
	if held := sheets.Get(newKey); held != nil && string(held) != formID {
		return f, w, fmt.Errorf("store: sheet %q of spreadsheet %s is written by form %s: %w", sheet, spreadsheetID, held, ErrConflict)
	}
	if err := sheets.Delete(formSheetKey(f.SpreadsheetID, f.Sheet)); err != nil {
		return f, w, err
	}
	if err := sheets.Put(newKey, []byte(formID)); err != nil {
		return f, w, err
	}
	f.SpreadsheetID, f.Sheet, f.StartRow = spreadsheetID, sheet, max(startRow, 1)
	if err := putJSON(tx.tx.Bucket(bucketForms), []byte(f.ID), f); err != nil {
		return f, w, fmt.Errorf("store: put form: %w", err)
	}
	w.NextRow, w.Pending = f.StartRow, nil
	w.GridRows, w.GridCols = gridRows, gridCols
	if w.State == FormError {
		if err := tx.formStateEvent(formID, "ok", ""); err != nil {
			return f, w, err
		}
	}
	w.State, w.ErrorChecks, w.LastError, w.LastErrorAt = "", 0, "", time.Time{}
	return f, w, tx.putSheetWrites(formID, w)
}

// FormSetTitle records the title of the form's spreadsheet.
func (tx *Tx) FormSetTitle(formID, title string) (Form, error) {
	f, err := tx.FormGet(formID)
	if err != nil {
		return f, err
	}
	f.Title = title
	if err := putJSON(tx.tx.Bucket(bucketForms), []byte(f.ID), f); err != nil {
		return f, fmt.Errorf("store: put form: %w", err)
	}
	return f, nil
}

// SheetsBuffered returns the number of submissions waiting over all forms.
func (tx *Tx) SheetsBuffered() (int, error) {
	n := 0
	err := tx.tx.Bucket(bucketSheetWrites).ForEach(func(_, v []byte) error {
		var w SheetWrites
		if err := json.Unmarshal(v, &w); err != nil {
			return fmt.Errorf("store: decode sheet writes: %w", err)
		}
		n += w.Buffered
		return nil
	})
	return n, err
}

// FormsStorage is the room bbolt gives the forms pipeline's data: bytes of
// the pages in use (what a benchmark divides by the submissions).
type FormsStorage struct {
	Submissions int // stored submissions
	Buffers     int // the per-form buffers of waiting submission ids
}

// FormsStorage measures the forms pipeline's buckets.
func (tx *Tx) FormsStorage() FormsStorage {
	inUse := func(name []byte) int {
		s := tx.tx.Bucket(name).Stats()
		return s.BranchInuse + s.LeafInuse + s.InlineBucketInuse
	}
	return FormsStorage{Submissions: inUse(bucketSubmissions), Buffers: inUse(bucketFormBuffers)}
}
