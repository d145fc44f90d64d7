package sheets

import (
	"fmt"
	"strings"
	"time"

	"mailroom/store"
)

// colName is the A1 name of a 0-based column: 0 A, 25 Z, 26 AA.
func colName(c int) string {
	var b []byte
	for c++; c > 0; c = (c - 1) / 26 {
		b = append([]byte{byte('A' + (c-1)%26)}, b...)
	}
	return string(b)
}

// quoteSheet quotes a sheet name for A1 notation: always in single
// quotes, with quotes inside doubled (Sheets accepts it for every name).
func quoteSheet(name string) string {
	return "'" + strings.ReplaceAll(name, "'", "''") + "'"
}

// width is the number of cells of a form's row: the time, one per column,
// the submission id.
func width(f store.Form) int { return len(f.Columns) + 2 }

// columnsRange is the form's columns over the whole sheet ("'S'!A:D"),
// cut at the grid's last column when the grid is narrower than the form's
// rows (it grows before the first write; a read past it is refused).
// gridCols 0: not known.
func columnsRange(sheet string, columns, gridCols int) string {
	last := columns + 1
	if gridCols > 0 {
		last = min(last, gridCols-1)
	}
	return fmt.Sprintf("%s!A:%s", quoteSheet(sheet), colName(max(last, 0)))
}

// writeRange is the A1 range of a planned write.
func writeRange(f store.Form, p store.SheetWrite) string {
	return fmt.Sprintf("%s!A%d:%s%d", quoteSheet(f.Sheet), p.Row, colName(width(f)-1), p.Row+p.Count-1)
}

// row is a submission's cells: [submittedAt (RFC 3339), the answers in
// column order, the submission id].
func row(s store.Submission) []string {
	out := make([]string, 0, len(s.Values)+2)
	out = append(out, s.SubmittedAt.UTC().Format(time.RFC3339))
	out = append(out, s.Values...)
	return append(out, s.ID)
}

// sameRows compares what a range holds with the rows meant for it, as
// values.get gives them back (trailing empty cells left out).
func sameRows(got, want [][]string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		g, w := got[i], want[i]
		if len(g) > len(w) {
			return false
		}
		for j := range w {
			var cell string
			if j < len(g) {
				cell = g[j]
			}
			if cell != w[j] {
				return false
			}
		}
	}
	return true
}
