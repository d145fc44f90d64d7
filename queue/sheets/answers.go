package sheets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"unicode/utf8"
)

// MaxValueChars is the most characters one answer may hold: Google Sheets'
// limit for one cell.
const MaxValueChars = 50_000

// InputError is bad input, naming the offending field as a JSON path
// ("answers.email"). The web layer answers it with 400.
type InputError struct {
	Field   string
	Code    string // snake_case: required, unknown_field, invalid_type, too_long, invalid
	Message string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("sheets: %s: %s", e.Field, e.Message)
}

func inputErr(field, code, format string, args ...any) *InputError {
	return &InputError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Answers checks a submission's answers against the form's columns and
// returns the cell values in column order ("" for a column left out).
//
// What is accepted, by JSON type: a string, as it is (it is written RAW, so
// "=HYPERLINK(...)" stays text); a number, as the text it was sent as
// ("42", "1.50", "1e3"); true and false, as "true" and "false"; null, as
// an empty cell. Objects and arrays are refused (invalid_type), as is a
// name that is not a column (unknown_field), a value over MaxValueChars
// characters (too_long) and a submission with no answer at all (required).
// When several answers are wrong, the first in name order is named, so the
// answer does not depend on map order.
func Answers(columns []string, answers map[string]json.RawMessage) ([]string, error) {
	if len(answers) == 0 {
		return nil, inputErr("answers", "required", "Send at least one answer, as an object of column name to value.")
	}
	names := make([]string, 0, len(answers))
	for name := range answers {
		names = append(names, name)
	}
	slices.Sort(names)
	values := make([]string, len(columns))
	for _, name := range names {
		field := "answers." + name
		i := slices.Index(columns, name)
		if i < 0 {
			return nil, inputErr(field, "unknown_field", "The form has no column %q; its columns are %q.", name, columns)
		}
		v, err := answerText(field, answers[name])
		if err != nil {
			return nil, err
		}
		values[i] = v
	}
	return values, nil
}

// answerText turns one JSON value into the text of its cell.
func answerText(field string, raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", inputErr(field, "invalid_type", "The answer is empty; send a string.")
	}
	var text string
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", inputErr(field, "invalid_type", "The answer is not a valid JSON string.")
		}
	case '{', '[':
		return "", inputErr(field, "invalid_type", "The answer must be a string (or a number or true/false), not an object or an array.")
	case 't', 'f':
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return "", inputErr(field, "invalid_type", "The answer is not valid JSON.")
		}
		text = fmt.Sprint(b)
	case 'n':
		if string(raw) != "null" {
			return "", inputErr(field, "invalid_type", "The answer is not valid JSON.")
		}
		return "", nil
	default:
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil || !json.Valid(raw) {
			return "", inputErr(field, "invalid_type", "The answer must be a string, a number or true/false.")
		}
		text = n.String()
	}
	if n := utf8.RuneCountInString(text); n > MaxValueChars {
		return "", inputErr(field, "too_long", "The answer has %d characters; at most %d fit in a cell.", n, MaxValueChars)
	}
	return text, nil
}
