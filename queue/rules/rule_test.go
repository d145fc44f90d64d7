package rules

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseValidatesWithFieldAndSentence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, body, field, says string
	}{
		{"label missing", `{"conditions":[{"field":"from","op":"contains","value":"x"}]}`, "label", "required"},
		{"system label", `{"label":"inbox","conditions":[{"field":"from","op":"contains","value":"x"}]}`, "label", "system labels"},
		{"label too long", `{"label":"` + strings.Repeat("é", MaxLabelLen+1) + `","conditions":[{"field":"from","op":"contains","value":"x"}]}`, "label", "at most 225"},
		{"label control", `{"label":"a\nb","conditions":[{"field":"from","op":"contains","value":"x"}]}`, "label", "control characters"},
		{"label slashes", `{"label":"Work//Dev","conditions":[{"field":"from","op":"contains","value":"x"}]}`, "label", "single slashes"},
		{"bad match", `{"label":"Dev","match":"most","conditions":[{"field":"from","op":"contains","value":"x"}]}`, "match", `"all"`},
		{"no conditions", `{"label":"Dev","conditions":[]}`, "conditions", "at least one"},
		{"too many", `{"label":"Dev","conditions":[` + strings.Repeat(`{"field":"from","op":"contains","value":"x"},`, 21)[:21*45-1] + `]}`, "conditions", "at most 20"},
		{"bad field", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"},{"field":"bcc","op":"contains","value":"x"}]}`, "conditions[1].field", `"bcc" is not a field`},
		{"bad op", `{"label":"Dev","conditions":[{"field":"from","op":"startswith","value":"x"}]}`, "conditions[0].op", "not an operator"},
		{"empty value", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"},{"field":"to","op":"contains","value":"y"},{"field":"subject","op":"equals","value":""}]}`, "conditions[2].value", "empty"},
		{"long value", `{"label":"Dev","conditions":[{"field":"body","op":"contains","value":"` + strings.Repeat("a", MaxValueLen+1) + `"}]}`, "conditions[0].value", "at most 1000"},
		{"bad regexp", `{"label":"Dev","conditions":[{"field":"subject","op":"matches","value":"(invoice"}]}`, "conditions[0].value", "missing closing )"},
		{"long regexp", `{"label":"Dev","conditions":[{"field":"subject","op":"matches","value":"` + strings.Repeat("a", MaxPatternLen+1) + `"}]}`, "conditions[0].value", "at most 256"},
		{"costly regexp", `{"label":"Dev","conditions":[{"field":"body","op":"matches","value":"(?i)(\\w+\\s?){1000}"}]}`, "conditions[0].value", "at most 100"},
		{"nested repeats", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"},{"field":"body","op":"matches","value":"((a{10}){10}){10}"}]}`, "conditions[1].value", "more than the 300 allowed"},
		{"repeat under the bound, program over", `{"label":"Dev","conditions":[{"field":"body","op":"matches","value":"(?i)(\\w+\\s?){60}"}]}`, "conditions[0].value", "compiles to"},
		{"unknown field", `{"label":"Dev","colour":"red","conditions":[{"field":"from","op":"contains","value":"x"}]}`, "colour", "no field"},
		{"wrong type", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":7}]}`, "conditions[0].value", "wrong type"},
		{"unknown action", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"}],"actions":{"delete":true}}`, "actions.delete", "no field"},
		{"action wrong type", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"}],"actions":{"archive":"yes"}}`, "actions.archive", "wrong type"},
		{"actions not an object", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"}],"actions":[true]}`, "actions", "must be a JSON object"},
		{"too large", `{"label":"Dev","conditions":[` + strings.Repeat(`{"field":"from","op":"contains","value":"x"},`, MaxRuleBytes/45) + `{"field":"from","op":"contains","value":"x"}]}`, "conditions", "larger than"},
		{"two objects", `{"label":"Dev","conditions":[{"field":"from","op":"contains","value":"x"}]} {}`, "", "exactly one"},
		{"not json", `label=Dev`, "", "not a valid JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.body))
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse: got %v, want a *ValidationError", err)
			}
			if ve.Field != tt.field || !strings.Contains(ve.Message, tt.says) {
				t.Errorf("got field %q message %q; want field %q and a message saying %q", ve.Field, ve.Message, tt.field, tt.says)
			}
			if first := ve.Message[0]; !strings.HasSuffix(ve.Message, ".") || !('A' <= first && first <= 'Z' || first == '"') {
				t.Errorf("message %q is not a sentence", ve.Message)
			}
		})
	}
}

// TestPatternCostAllowsRealPatterns: the bounds on a pattern's program
// leave room for the patterns people write.
func TestPatternCostAllowsRealPatterns(t *testing.T) {
	t.Parallel()
	for _, p := range []string{
		`^(invoice|receipt|bill)\s+#?\d{4,8}$`,
		`[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}`,
		`(?i)(invoice|receipt|order|payment|statement|bill|subscription|renewal|confirmation|shipping|delivery|tracking|account|security|password|login|verify|alert|notification|update)`,
		`(?i)` + strings.Repeat("a", MaxPatternLen-4),
		`\d{1,100}`,
		`(?i)(\w+\s?){20}`,
	} {
		if problem := patternCost(p); problem != "" {
			t.Errorf("%s: %s", p, problem)
		}
	}
}

func TestParseNormalizes(t *testing.T) {
	t.Parallel()
	s, err := Parse([]byte(`{"label":"  Work/Dev ","conditions":[{"field":"any","op":"matches","value":"(?i)^re:"}],"actions":{"markRead":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Label != "Work/Dev" || s.Match != MatchAll || !s.Actions.MarkRead {
		t.Errorf("got %+v", s)
	}
}

func mustCompile(t testing.TB, match string, conds ...Condition) *Compiled {
	t.Helper()
	s := Spec{Label: "L", Match: match, Conditions: conds}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestMatch(t *testing.T) {
	t.Parallel()
	msg := &Message{
		From:    `"Doe, Jane" <Jane.Doe@GitHub.com>`,
		To:      "team@example.com, Ops <ops@example.com>",
		Cc:      "",
		Subject: "Re: [mailroom] Build FAILED on main",
		Body:    "The build of straße failed.\nSee https://ci.example.com/42",
	}
	c := func(field, op, value string) Condition { return Condition{Field: field, Op: op, Value: value} }
	tests := []struct {
		name  string
		match string
		conds []Condition
		want  bool
	}{
		{"contains ignores case", MatchAll, []Condition{c("from", "contains", "@github.com")}, true},
		{"contains misses", MatchAll, []Condition{c("from", "contains", "@gitlab.com")}, false},
		{"not_contains", MatchAll, []Condition{c("subject", "not_contains", "passed")}, true},
		{"not_contains fails", MatchAll, []Condition{c("subject", "not_contains", "failed")}, false},
		{"equals whole header", MatchAll, []Condition{c("subject", "equals", "re: [MAILROOM] build failed on main")}, true},
		{"equals bare address", MatchAll, []Condition{c("from", "equals", "jane.doe@github.com")}, true},
		{"equals second address", MatchAll, []Condition{c("to", "equals", "OPS@example.com")}, true},
		{"equals quoted comma is not a split", MatchAll, []Condition{c("from", "equals", "Jane")}, false},
		{"equals is not contains", MatchAll, []Condition{c("subject", "equals", "build")}, false},
		{"matches is case-sensitive", MatchAll, []Condition{c("subject", "matches", "build failed")}, false},
		{"matches with (?i)", MatchAll, []Condition{c("subject", "matches", "(?i)build failed")}, true},
		{"matches anchors", MatchAll, []Condition{c("subject", "matches", `^Re: \[mailroom\]`)}, true},
		{"unicode fold", MatchAll, []Condition{c("body", "contains", "STRASSE")}, false},
		{"unicode fold simple", MatchAll, []Condition{c("body", "contains", "STRAßE")}, true},
		{"any field", MatchAll, []Condition{c("any", "contains", "ci.example.com")}, true},
		{"any field not_contains means in none", MatchAll, []Condition{c("any", "not_contains", "example.com")}, false},
		{"empty cc", MatchAll, []Condition{c("cc", "contains", "a")}, false},
		{"all needs every one", MatchAll, []Condition{c("from", "contains", "github"), c("subject", "contains", "passed")}, false},
		{"any needs one", MatchAny, []Condition{c("from", "contains", "gitlab"), c("subject", "contains", "failed")}, true},
		{"any none", MatchAny, []Condition{c("from", "contains", "gitlab"), c("subject", "contains", "passed")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCompile(t, tt.match, tt.conds...).Match(msg); got != tt.want {
				t.Errorf("Match = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMatchAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under the race detector")
	}
	c := func(field, op, value string) Condition { return Condition{Field: field, Op: op, Value: value} }
	rule := mustCompile(t, MatchAny,
		c("from", "contains", "@example.org"),
		c("to", "equals", "nobody@example.org"),
		c("subject", "not_contains", "urgent"),
		c("body", "contains", "Grüße"),
		c("any", "matches", `(?i)invoice\s+#\d+`),
	)
	msg := &Message{
		From: "Ann <ann@example.com>", To: "team@example.com, bob@example.com", Subject: "URGENT: payment",
		Body: strings.Repeat("Hello there, this is a long body without the words. ", 40),
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if rule.Match(msg) {
			t.Fatal("unexpected match")
		}
	})
	if allocs != 0 {
		t.Errorf("Match allocates %.1f times per call, want 0", allocs)
	}
}

// asciiLower lowers A-Z only, as the ASCII path folds.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// refContains is the obvious, allocating definition of the matcher's
// contains: ASCII needles fold ASCII letters; other needles fold under
// Unicode simple folding, rune by rune.
func refContains(h, needle string) bool {
	if isASCII(needle) {
		return strings.Contains(asciiLower(h), asciiLower(needle))
	}
	n := utf8.RuneCountInString(needle)
	for i := 0; i <= len(h); {
		j, k := i, 0
		for k < n && j < len(h) {
			_, size := utf8.DecodeRuneInString(h[j:])
			j += size
			k++
		}
		if k == n && strings.EqualFold(h[i:j], needle) {
			return true
		}
		if i == len(h) {
			break
		}
		_, size := utf8.DecodeRuneInString(h[i:])
		i += size
	}
	return false
}

func FuzzMatch(f *testing.F) {
	f.Add("Jane <jane@GitHub.com>", "Re: Build FAILED", "body", "contains", "github", "all")
	f.Add("a@b.c, d@e.f", "x", "ẞtraße", "contains", "SS", "any")
	f.Add("x", "Invoice #42", "", "matches", `(?i)invoice\s+#\d+`, "all")
	f.Add(`"a, b" <c@d>`, "", "", "equals", "c@d", "all")
	f.Add("\xff\xfe", "K", "k", "contains", "K", "any")
	f.Fuzz(func(t *testing.T, from, subject, body, op, value, match string) {
		for _, field := range []string{FieldFrom, FieldSubject, FieldBody, FieldAny} {
			s := Spec{Label: "L", Match: match, Conditions: []Condition{{Field: field, Op: op, Value: value}}}
			s.Normalize()
			if s.Validate() != nil {
				return
			}
			c, err := Compile(s)
			if err != nil {
				t.Fatalf("Compile rejects a valid spec %+v: %v", s, err)
			}
			m := &Message{From: from, Subject: subject, Body: body}
			got := c.Match(m)
			texts := map[string][]string{FieldFrom: {from}, FieldSubject: {subject}, FieldBody: {body}, FieldAny: {from, "", "", subject, body}}[field]
			var want bool
			switch op {
			case OpContains, OpNotContains:
				for _, h := range texts {
					want = want || refContains(h, value)
				}
				if op == OpNotContains {
					want = !want
				}
			case OpMatches:
				continue // regexp is its own reference
			case OpEquals:
				for _, h := range texts {
					want = want || strings.EqualFold(h, value)
				}
				if !want && (field == FieldFrom || field == FieldAny) {
					want = anyAddressEquals(from, value)
				}
			}
			if got != want {
				t.Errorf("%s %s %q on %+v: got %v, want %v", field, op, value, m, got, want)
			}
		}
	})
}

func FuzzRuleParse(f *testing.F) {
	f.Add([]byte(`{"label":"Dev","match":"all","conditions":[{"field":"from","op":"contains","value":"@github.com"}],"actions":{"markRead":false,"archive":false}}`))
	f.Add([]byte(`{"label":"x","match":"any","conditions":[{"field":"any","op":"matches","value":"(?i)^re:"},{"field":"cc","op":"not_contains","value":"é"}]}`))
	f.Add([]byte(`{"label":"","conditions":null}`))
	f.Add([]byte(`{"conditions":[{"field":"body","op":"matches","value":"a{1001}"}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := Parse(raw)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Parse error is %T, want *ValidationError: %v", err, err)
			}
			if ve.Message == "" {
				t.Fatal("empty validation message")
			}
			return
		}
		// Accepted rules are valid, compile, and match without panicking.
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted an invalid spec: %v", err)
		}
		c, err := Compile(s)
		if err != nil {
			t.Fatal(err)
		}
		c.Match(&Message{From: string(raw), Subject: s.Label, Body: string(raw)})
	})
}
