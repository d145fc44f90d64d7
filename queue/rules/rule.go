// Package rules is the label rules pipeline: the rule language (model,
// validation, a compiled matcher), the per-user save rate limit in the
// broker, the debounced reclassify (pending jobs indexed by fire time, a
// publisher that turns each due one into batch tasks in one transaction),
// the batch handler with its per-rule stale skip, and the application of a
// user's rules to new mail.
package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"strings"
	"unicode"
	"unicode/utf8"

	"mailroom/queue"
)

// Limits of the rule language.
const (
	// MaxConditions is the most conditions one rule may have.
	MaxConditions = 20
	// MaxValueLen is the longest value of a contains, not_contains or
	// equals condition, in bytes.
	MaxValueLen = 1000
	// MaxPatternLen is the longest regular expression of a matches
	// condition, in bytes. RE2 runs in linear time, but the compiled program
	// grows with the pattern, and every rule is held compiled in memory.
	MaxPatternLen = 256
	// MaxPatternInsts bounds a matches pattern's compiled program, in
	// instructions: a short pattern can compile large ((\w+\s?){1000} is
	// 18 bytes and 6,000 instructions), and matching costs time in
	// proportion to the program for every message, condition and rule. A
	// case-insensitive word list of 256 bytes is about 180; a 256-byte
	// literal about 256.
	MaxPatternInsts = 300
	// MaxPatternRepeat is the largest count a repeat ({n} or {n,m}) of a
	// matches pattern may have (RE2 allows 1000).
	MaxPatternRepeat = 100
	// MaxLabelLen is the longest label name, in characters (Gmail's limit).
	MaxLabelLen = 225
	// MaxRuleBytes bounds the JSON text Parse accepts.
	MaxRuleBytes = 64 << 10
)

// Match modes.
const (
	MatchAll = "all"
	MatchAny = "any"
)

// Fields a condition looks at.
const (
	FieldFrom    = "from"
	FieldTo      = "to"
	FieldCc      = "cc"
	FieldSubject = "subject"
	FieldBody    = "body"
	FieldAny     = "any"
)

// Operators.
const (
	OpContains    = "contains"
	OpNotContains = "not_contains"
	OpEquals      = "equals"
	OpMatches     = "matches"
)

// Spec is a rule as a person writes it: the one label it owns, how its
// conditions combine, the conditions, and the actions besides the label.
type Spec struct {
	Label      string      `json:"label"`
	Match      string      `json:"match"`
	Conditions []Condition `json:"conditions"`
	Actions    Actions     `json:"actions"`
}

// Condition is one test of a message field.
type Condition struct {
	Field string `json:"field"`
	Op    string `json:"op"`
	Value string `json:"value"`
}

// Actions are what a matching new message gets besides the label. They
// apply to new mail only: a reclassify of existing mail changes labels,
// never the read state or the inbox.
type Actions struct {
	MarkRead bool `json:"markRead"`
	Archive  bool `json:"archive"`
}

// ValidationError names the offending field of a rule as a JSON path
// ("conditions[2].value") and says what is wrong in a sentence.
type ValidationError struct {
	Field   string
	Message string
	// Code classes the problem as the API's other endpoints do:
	// malformed_json, invalid_type, unknown_field; empty for a value the
	// rule cannot take (the API's "invalid").
	Code string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "invalid rule: " + e.Message
	}
	return "invalid rule: " + e.Field + ": " + e.Message
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// coded sets the class of a problem with the rule's JSON itself.
func coded(code string, e *ValidationError) *ValidationError {
	e.Code = code
	return e
}

// Gmail's system labels: a rule may not own one of these names.
var reservedLabels = []string{
	"INBOX", "SENT", "DRAFT", "DRAFTS", "SPAM", "TRASH", "UNREAD", "STARRED", "IMPORTANT", "CHAT",
	"CATEGORY_PERSONAL", "CATEGORY_SOCIAL", "CATEGORY_PROMOTIONS", "CATEGORY_UPDATES", "CATEGORY_FORUMS",
}

// ReadsBodies reports whether the rule needs a message's body (a body or
// "any" condition): Gmail prices a body read above a metadata read, so
// applying it to old mail costs more.
func (s Spec) ReadsBodies() bool {
	for _, c := range s.Conditions {
		if c.Field == FieldBody || c.Field == FieldAny {
			return true
		}
	}
	return false
}

// Normalize trims the label and fills the default match mode ("all").
func (s *Spec) Normalize() {
	s.Label = strings.TrimSpace(s.Label)
	if s.Match == "" {
		s.Match = MatchAll
	}
}

// Validate checks a normalized spec. Its error is a *ValidationError.
func (s *Spec) Validate() error {
	if err := validateLabel(s.Label); err != nil {
		return err
	}
	switch s.Match {
	case MatchAll, MatchAny:
	default:
		return invalid("match", "The match mode must be %q (every condition holds) or %q (at least one holds), not %q.", MatchAll, MatchAny, clip(s.Match))
	}
	switch n := len(s.Conditions); {
	case n == 0:
		return invalid("conditions", "A rule needs at least one condition.")
	case n > MaxConditions:
		return invalid("conditions", "A rule may have at most %d conditions; this one has %d.", MaxConditions, n)
	}
	for i, c := range s.Conditions {
		if err := c.validate(fmt.Sprintf("conditions[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

func validateLabel(label string) error {
	switch {
	case label == "":
		return invalid("label", "The label name is required.")
	case !utf8.ValidString(label):
		return invalid("label", "The label name must be valid UTF-8 text.")
	case utf8.RuneCountInString(label) > MaxLabelLen:
		return invalid("label", "The label name may be at most %d characters long.", MaxLabelLen)
	case strings.IndexFunc(label, unicode.IsControl) >= 0:
		return invalid("label", "The label name must not contain control characters such as line breaks or tabs.")
	case strings.HasPrefix(label, "/") || strings.HasSuffix(label, "/") || strings.Contains(label, "//"):
		return invalid("label", "Nested label names use single slashes between non-empty parts, as in \"Work/Dev\".")
	}
	for _, r := range reservedLabels {
		if strings.EqualFold(label, r) {
			return invalid("label", "%q is one of Gmail's system labels; choose another name.", label)
		}
	}
	return nil
}

func (c Condition) validate(path string) error {
	switch c.Field {
	case FieldFrom, FieldTo, FieldCc, FieldSubject, FieldBody, FieldAny:
	case "":
		return invalid(path+".field", "Choose the field to look at: from, to, cc, subject, body or any.")
	default:
		return invalid(path+".field", "%q is not a field a rule can look at; use from, to, cc, subject, body or any.", clip(c.Field))
	}
	switch c.Op {
	case OpContains, OpNotContains, OpEquals:
		switch {
		case c.Value == "":
			return invalid(path+".value", "The value to look for is empty; type some text.")
		case len(c.Value) > MaxValueLen:
			return invalid(path+".value", "The value may be at most %d bytes long.", MaxValueLen)
		case !utf8.ValidString(c.Value):
			return invalid(path+".value", "The value must be valid UTF-8 text.")
		}
	case OpMatches:
		switch {
		case c.Value == "":
			return invalid(path+".value", "The regular expression is empty; type a pattern such as ^invoice.")
		case len(c.Value) > MaxPatternLen:
			return invalid(path+".value", "The regular expression may be at most %d bytes long; this one has %d.", MaxPatternLen, len(c.Value))
		}
		if _, err := regexp.Compile(c.Value); err != nil {
			return invalid(path+".value", "This is not a valid regular expression (RE2 syntax): %s.", regexpProblem(err))
		}
		if problem := patternCost(c.Value); problem != "" {
			return invalid(path+".value", "%s", problem)
		}
	case "":
		return invalid(path+".op", "Choose how to compare: contains, not_contains, equals or matches.")
	default:
		return invalid(path+".op", "%q is not an operator; use contains, not_contains, equals or matches.", clip(c.Op))
	}
	return nil
}

// patternCost says what makes a valid pattern too costly to run on every
// message (a repeat count over MaxPatternRepeat, or a compiled program
// over MaxPatternInsts instructions), or "" when it is not. The program is
// compiled as regexp compiles it: parsed with Perl flags, simplified.
func patternCost(pattern string) string {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return "" // regexp.Compile has said what is wrong
	}
	if n := maxRepeat(re); n > MaxPatternRepeat {
		return fmt.Sprintf("A repeat count may be at most %d; this pattern repeats %d times. Use + or * for \"any number\".", MaxPatternRepeat, n)
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return "This regular expression is too large to run."
	}
	if n := len(prog.Inst); n > MaxPatternInsts {
		return fmt.Sprintf("This regular expression compiles to %d steps, more than the %d allowed (each message is matched against it): make repeats smaller or the pattern shorter.", n, MaxPatternInsts)
	}
	return ""
}

// maxRepeat is the largest count of any {n,m} repeat in re (m, or n when
// unbounded).
func maxRepeat(re *syntax.Regexp) int {
	n := 0
	if re.Op == syntax.OpRepeat {
		n = max(re.Min, re.Max)
	}
	for _, sub := range re.Sub {
		n = max(n, maxRepeat(sub))
	}
	return n
}

// regexpProblem turns regexp's "error parsing regexp: missing closing ):
// `(a`" into "missing closing ) in `(a`".
func regexpProblem(err error) string {
	var se *syntax.Error
	if errors.As(err, &se) {
		return se.Code.String() + " in `" + clip(se.Expr) + "`"
	}
	return strings.TrimPrefix(err.Error(), "error parsing regexp: ")
}

// clip shortens what a person typed for quoting it in a message.
func clip(s string) string { return queue.Truncate(s, 40) }

// Parse reads a rule from its JSON text (the API's request body), strictly:
// one object, no unknown fields. It normalizes and validates it and compiles
// it once, so a rule Parse accepts can always be matched.
func Parse(raw []byte) (Spec, error) {
	var s Spec
	if len(raw) > MaxRuleBytes {
		return s, invalid(largestField(raw), "The rule is larger than %d bytes (it has %d).", MaxRuleBytes, len(raw))
	}
	var top struct {
		Label      string            `json:"label"`
		Match      string            `json:"match"`
		Conditions []json.RawMessage `json:"conditions"`
		Actions    json.RawMessage   `json:"actions"`
	}
	if err := decodeStrict(raw, &top, ""); err != nil {
		return Spec{}, err
	}
	s = Spec{Label: top.Label, Match: top.Match}
	if top.Actions != nil {
		if err := decodeStrict(top.Actions, &s.Actions, "actions"); err != nil {
			return Spec{}, err
		}
	}
	if len(top.Conditions) > MaxConditions {
		return Spec{}, invalid("conditions", "A rule may have at most %d conditions; this one has %d.", MaxConditions, len(top.Conditions))
	}
	for i, rc := range top.Conditions {
		var c Condition
		if err := decodeStrict(rc, &c, fmt.Sprintf("conditions[%d]", i)); err != nil {
			return Spec{}, err
		}
		s.Conditions = append(s.Conditions, c)
	}
	s.Normalize()
	if err := s.Validate(); err != nil {
		return Spec{}, err
	}
	if _, err := Compile(s); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// largestField names the rule's largest top-level field (what makes it too
// large), or none when raw is not a JSON object.
func largestField(raw []byte) string {
	var fields map[string]json.RawMessage
	if json.Unmarshal(raw, &fields) != nil {
		return ""
	}
	name, size := "", -1
	for k, v := range fields {
		if len(v) > size || len(v) == size && k < name {
			name, size = k, len(v)
		}
	}
	return name
}

// decodeStrict decodes exactly one JSON value with no unknown fields; its
// errors name fields under prefix.
func decodeStrict(raw []byte, v any, prefix string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonProblem(err, prefix)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return coded("malformed_json", invalid(prefix, "The rule must be exactly one JSON object."))
	}
	return nil
}

func jsonProblem(err error, prefix string) error {
	join := func(name string) string {
		if prefix == "" {
			return name
		}
		return prefix + "." + name
	}
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		if typ.Field == "" {
			if prefix == "" {
				return coded("invalid_type", invalid("", "The rule must be a JSON object, not %s.", typ.Value))
			}
			if prefix == "actions" {
				return coded("invalid_type", invalid(prefix, "The actions must be a JSON object, not %s.", typ.Value))
			}
			return coded("invalid_type", invalid(prefix, "Each condition must be a JSON object, not %s.", typ.Value))
		}
		return coded("invalid_type", invalid(join(typ.Field), "This field has the wrong type of value (%s).", typ.Value))
	}
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		name = strings.TrimSuffix(name, `"`)
		return coded("unknown_field", invalid(join(name), "A rule has no field %q.", clip(name)))
	}
	return coded("malformed_json", invalid(prefix, "The rule is not a valid JSON object: %s.", strings.TrimPrefix(err.Error(), "json: ")))
}
