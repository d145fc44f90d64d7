package googlefake

import "testing"

func TestParseRange(t *testing.T) {
	t.Parallel()
	grid := func(title string) *sheet {
		return &sheet{title: title, rowCount: DefaultGridRows, colCount: DefaultGridColumns}
	}
	book := &spreadsheet{sheets: []*sheet{grid("Sheet1"), grid("My Sheet"), grid("It's")}}
	for _, tc := range []struct {
		in             string
		sheet          string
		r0, r1, c0, c1 int
		norm           string
	}{
		{"Sheet1!A1:Z", "Sheet1", 0, -1, 0, 26, "Sheet1!A1:Z1000"},
		{"Sheet1!A5:F9", "Sheet1", 4, 9, 0, 6, "Sheet1!A5:F9"},
		{"Sheet1", "Sheet1", 0, -1, 0, -1, "Sheet1!A1:Z1000"},
		{"'My Sheet'!B:C", "My Sheet", 0, -1, 1, 3, "'My Sheet'!B1:C1000"},
		{"'It''s'!C3", "It's", 2, 3, 2, 3, "'It''s'!C3:C3"},
		{"My Sheet", "My Sheet", 0, -1, 0, -1, "'My Sheet'!A1:Z1000"},
		{"A2:B3", "Sheet1", 1, 3, 0, 2, "Sheet1!A2:B3"},
		{"sheet1!aa10:ab11", "Sheet1", 9, 11, 26, 28, "Sheet1!AA10:AB11"},
		{"Sheet1!2:4", "Sheet1", 1, 4, 0, -1, "Sheet1!A2:Z4"},
		{"Sheet1!C5:A1", "Sheet1", 0, 5, 0, 3, "Sheet1!A1:C5"},
	} {
		g, err := book.parseRange(tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if g.sheet.title != tc.sheet || g.r0 != tc.r0 || g.r1 != tc.r1 || g.c0 != tc.c0 || g.c1 != tc.c1 || g.String() != tc.norm {
			t.Errorf("%q = %s r[%d,%d) c[%d,%d) %s, want %s r[%d,%d) c[%d,%d) %s", tc.in,
				g.sheet.title, g.r0, g.r1, g.c0, g.c1, g, tc.sheet, tc.r0, tc.r1, tc.c0, tc.c1, tc.norm)
		}
	}
	for _, bad := range []string{"Nope!A1", "Sheet1!", "Sheet1!A0", "Sheet1!1A", "'Unclosed!A1", "Sheet1!ABCD1", "Sheet1!A1:"} {
		if _, err := book.parseRange(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestColName(t *testing.T) {
	t.Parallel()
	for c, want := range map[int]string{0: "A", 25: "Z", 26: "AA", 27: "AB", 701: "ZZ", 702: "AAA"} {
		if got := colName(c); got != want {
			t.Errorf("colName(%d) = %s, want %s", c, got, want)
		}
	}
}
