package googlefake

import (
	"fmt"
	"slices"
	"strings"

	sheetsapi "google.golang.org/api/sheets/v4"
)

// batchUpdate is spreadsheets.batchUpdate
// (developers.google.com/workspace/sheets/api/reference/rest/v4/spreadsheets/batchUpdate):
// "The requests are validated before being applied. If any request is not
// valid, then the entire request will fail and nothing will be applied."
// So every request is applied to copies of the sheets it touches, the cell
// cap is checked on the result, and only then do the copies replace the
// sheets. The emulator serves the requests that change a grid
// (appendDimension, insertDimension, updateSheetProperties); any other
// request is refused with 400, so a test never passes on a request the
// emulator would only pretend to apply.
func (sh *Sheets) batchUpdate(c *call) (any, error) {
	var req sheetsapi.BatchUpdateSpreadsheetRequest
	if err := c.decodeBody(&req); err != nil {
		return nil, err
	}
	book, err := sh.open(c)
	if err != nil {
		return nil, err
	}
	defer book.mu.Unlock()
	if len(req.Requests) == 0 {
		return nil, errInvalid("Must specify at least one request.")
	}
	work := map[*sheet]*sheet{} // original -> copy being changed
	edit := func(s *sheet) *sheet {
		if w := work[s]; w != nil {
			return w
		}
		w := &sheet{id: s.id, title: s.title, rowCount: s.rowCount, colCount: s.colCount, rows: make([][]Cell, len(s.rows))}
		for i, r := range s.rows {
			w.rows[i] = slices.Clone(r)
		}
		work[s] = w
		return w
	}
	lookup := func(i int, kind string, id int64) (*sheet, error) {
		s := book.sheetByID(id)
		if s == nil {
			return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].%s: No grid with id: %d", i, kind, id))
		}
		return edit(s), nil
	}
	grew := false
	for i, r := range req.Requests {
		if r == nil {
			return nil, errInvalid(fmt.Sprintf("Invalid requests[%d]: request is empty", i))
		}
		switch {
		case r.AppendDimension != nil && r.InsertDimension == nil && r.UpdateSheetProperties == nil:
			// appendDimension: "Appends rows or columns to the end of a sheet."
			a := r.AppendDimension
			s, err := lookup(i, "appendDimension", a.SheetId)
			if err != nil {
				return nil, err
			}
			if a.Length < 1 {
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].appendDimension: length must be greater than 0", i))
			}
			switch a.Dimension {
			case "ROWS":
				s.rowCount += int(a.Length)
			case "COLUMNS":
				s.colCount += int(a.Length)
			default:
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].appendDimension: dimension must be ROWS or COLUMNS, not %q", i, a.Dimension))
			}
			grew = true
		case r.InsertDimension != nil && r.AppendDimension == nil && r.UpdateSheetProperties == nil:
			// insertDimension: "Inserts rows or columns in a sheet at a
			// particular index."
			d := r.InsertDimension
			if d.Range == nil {
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].insertDimension: range is required", i))
			}
			s, err := lookup(i, "insertDimension", d.Range.SheetId)
			if err != nil {
				return nil, err
			}
			start, end := int(d.Range.StartIndex), int(d.Range.EndIndex)
			count := s.rowCount
			if d.Range.Dimension == "COLUMNS" {
				count = s.colCount
			} else if d.Range.Dimension != "ROWS" {
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].insertDimension: dimension must be ROWS or COLUMNS, not %q", i, d.Range.Dimension))
			}
			if start < 0 || end <= start || start > count {
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].insertDimension: range [%d, %d) is not within [0, %d]", i, start, end, count))
			}
			if d.InheritFromBefore && start == 0 {
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].insertDimension: Cannot inherit from before when inserting at index 0.", i))
			}
			n := end - start
			if d.Range.Dimension == "ROWS" {
				s.rowCount += n
				if start < len(s.rows) {
					s.rows = slices.Insert(s.rows, start, make([][]Cell, n)...)
				}
			} else {
				s.colCount += n
				for j, row := range s.rows {
					if start < len(row) {
						s.rows[j] = slices.Insert(row, start, make([]Cell, n)...)
					}
				}
			}
			grew = true
		case r.UpdateSheetProperties != nil && r.AppendDimension == nil && r.InsertDimension == nil:
			u := r.UpdateSheetProperties
			if u.Properties == nil {
				return nil, errInvalid(fmt.Sprintf("Invalid requests[%d].updateSheetProperties: properties are required", i))
			}
			s, err := lookup(i, "updateSheetProperties", u.Properties.SheetId)
			if err != nil {
				return nil, err
			}
			g, err := applySheetProperties(book, s, u, i)
			if err != nil {
				return nil, err
			}
			grew = grew || g
		default:
			return nil, errInvalid(fmt.Sprintf("Invalid requests[%d]: the emulator serves exactly one of appendDimension, insertDimension or updateSheetProperties per request", i))
		}
	}
	// The cap and the column limit hold over the result.
	cells := 0
	for _, s := range book.sheets {
		if w := work[s]; w != nil {
			if w.colCount > maxColumns {
				return nil, errInvalid(fmt.Sprintf("Invalid requests: a sheet has at most %d columns", maxColumns))
			}
			cells += w.rowCount * w.colCount
			continue
		}
		cells += s.rowCount * s.colCount
	}
	if cells > MaxCells {
		return nil, errCellCap()
	}
	for s, w := range work {
		if w.rowCount*w.colCount > s.rowCount*s.colCount {
			grew = true
		}
		*s = *w
	}
	if grew {
		sh.quotaMu.Lock()
		sh.stats.GridGrows++
		sh.quotaMu.Unlock()
	}
	resp := &sheetsapi.BatchUpdateSpreadsheetResponse{SpreadsheetId: book.id}
	for range req.Requests {
		resp.Replies = append(resp.Replies, &sheetsapi.Response{})
	}
	return resp, nil
}

// applySheetProperties applies updateSheetProperties to s: the fields its
// mask names ("title", "gridProperties", "gridProperties.rowCount",
// "gridProperties.columnCount", or "*" for all of those). The mask is
// required (the reference: "The root properties is implied and should not
// be specified. A single "*" can be used as short-hand for listing every
// field."). A grid made smaller drops the cells outside it. It reports
// whether the grid grew.
func applySheetProperties(book *spreadsheet, s *sheet, u *sheetsapi.UpdateSheetPropertiesRequest, i int) (bool, error) {
	bad := func(msg string) error {
		return errInvalid(fmt.Sprintf("Invalid requests[%d].updateSheetProperties: %s", i, msg))
	}
	if strings.TrimSpace(u.Fields) == "" {
		return false, bad("You must specify which fields to update.")
	}
	var title, rows, cols bool
	for f := range strings.SplitSeq(u.Fields, ",") {
		switch strings.TrimSpace(f) {
		case "*":
			title, rows, cols = true, true, true
		case "title":
			title = true
		case "gridProperties":
			rows, cols = true, true
		case "gridProperties.rowCount":
			rows = true
		case "gridProperties.columnCount":
			cols = true
		default:
			return false, bad(fmt.Sprintf("the emulator does not update the field %q", strings.TrimSpace(f)))
		}
	}
	p := u.Properties
	if title {
		if p.Title == "" {
			return false, bad("a sheet needs a title")
		}
		if o := book.sheet(p.Title); o != nil && o.id != s.id {
			return false, bad(fmt.Sprintf("A sheet with the name \"%s\" already exists. Please enter another name.", p.Title))
		}
		s.title = p.Title
	}
	newRows, newCols := s.rowCount, s.colCount
	if rows || cols {
		if p.GridProperties == nil {
			return false, bad("gridProperties are in the mask but not given")
		}
		if rows {
			newRows = int(p.GridProperties.RowCount)
		}
		if cols {
			newCols = int(p.GridProperties.ColumnCount)
		}
		if newRows < 1 || newCols < 1 {
			return false, bad("a grid has at least one row and one column")
		}
	}
	grew := newRows > s.rowCount || newCols > s.colCount
	s.resize(newRows, newCols)
	return grew, nil
}
