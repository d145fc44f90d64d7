package sheets

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func TestAnswers(t *testing.T) {
	t.Parallel()
	cols := []string{"name", "email", "age", "ok"}
	long := strings.Repeat("é", MaxValueChars)
	tests := []struct {
		name      string
		body      string
		want      []string
		wantField string
		wantCode  string
	}{
		{"strings", `{"name":"Ann","email":"a@x.io"}`, []string{"Ann", "a@x.io", "", ""}, "", ""},
		{"number as sent", `{"age":1.50,"ok":true}`, []string{"", "", "1.50", "true"}, "", ""},
		{"exponent kept", `{"age":1e3}`, []string{"", "", "1e3", ""}, "", ""},
		{"null is empty", `{"name":null,"email":"e"}`, []string{"", "e", "", ""}, "", ""},
		{"formula stays text", `{"name":"=HYPERLINK(\"http://evil\",\"x\")"}`, []string{`=HYPERLINK("http://evil","x")`, "", "", ""}, "", ""},
		{"at the limit", `{"name":"` + long + `"}`, []string{long, "", "", ""}, "", ""},
		{"no answers", `{}`, nil, "answers", "required"},
		{"unknown column", `{"name":"a","phone":"1"}`, nil, "answers.phone", "unknown_field"},
		{"object", `{"email":{"a":1}}`, nil, "answers.email", "invalid_type"},
		{"array", `{"email":["a"]}`, nil, "answers.email", "invalid_type"},
		{"over the limit", `{"email":"` + long + `x"}`, nil, "answers.email", "too_long"},
		{"first bad field by name", `{"zzz":1,"email":[1]}`, nil, "answers.email", "invalid_type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(tc.body), &m); err != nil {
				t.Fatal(err)
			}
			got, err := Answers(cols, m)
			if tc.wantField != "" {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != tc.wantField || ie.Code != tc.wantCode {
					t.Fatalf("error %v, want %s on %s", err, tc.wantCode, tc.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("values (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzSubmissionAnswers feeds arbitrary answer objects to the validator:
// it never panics, accepts only known columns with values that fit a cell,
// and names the field of every refusal.
func FuzzSubmissionAnswers(f *testing.F) {
	for _, s := range []string{
		`{"name":"Ann"}`, `{"email":1}`, `{"name":{"x":[1,2]}}`, `{"name":null}`, `{"ok":false}`,
		`{"":"x"}`, `{"name":"\u0000\ud800"}`, `{"name":-0.0e-0}`, `{}`, `{"phone":"1"}`,
	} {
		f.Add([]byte(s))
	}
	cols := []string{"name", "email", "ok", ""}
	f.Fuzz(func(t *testing.T, body []byte) {
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return
		}
		vals, err := Answers(cols, m)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) || !strings.HasPrefix(ie.Field, "answers") || ie.Code == "" || ie.Message == "" {
				t.Fatalf("refusal without a field: %v", err)
			}
			return
		}
		if len(vals) != len(cols) {
			t.Fatalf("%d values for %d columns", len(vals), len(cols))
		}
		for k := range m {
			found := false
			for _, c := range cols {
				found = found || c == k
			}
			if !found {
				t.Fatalf("accepted unknown column %q", k)
			}
		}
		for _, v := range vals {
			if utf8.RuneCountInString(v) > MaxValueChars {
				t.Fatal("accepted an oversized value")
			}
		}
	})
}
