package rules

import (
	"cmp"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Message is what a rule looks at: the From, To and Cc header values as
// Gmail gives them ("Ann <ann@example.com>, bob@example.com"), the subject
// and the plain-text body.
type Message struct {
	From, To, Cc, Subject, Body string
}

// field bits: a condition looks at one field, or at all of them ("any").
const (
	bitFrom uint8 = 1 << iota
	bitTo
	bitCc
	bitSubject
	bitBody
	bitAny     = bitFrom | bitTo | bitCc | bitSubject | bitBody
	bitAddress = bitFrom | bitTo | bitCc
)

var fieldBits = map[string]uint8{
	FieldFrom: bitFrom, FieldTo: bitTo, FieldCc: bitCc, FieldSubject: bitSubject, FieldBody: bitBody, FieldAny: bitAny,
}

type opCode uint8

const (
	opContains opCode = iota
	opNotContains
	opEquals
	opMatches
)

var opCodes = map[string]opCode{
	OpContains: opContains, OpNotContains: opNotContains, OpEquals: opEquals, OpMatches: opMatches,
}

// Compiled is a rule ready to match, built once per rule version. Match
// allocates nothing and is safe for concurrent use.
type Compiled struct {
	any   bool
	conds []compiledCond
}

type compiledCond struct {
	fields uint8
	op     opCode
	// value is the text looked for; lowercased when ascii.
	value string
	ascii bool
	re    *regexp.Regexp
	// cost orders the conditions: cheap tests first, since the outcome of
	// all/any does not depend on the order.
	cost int
}

// Compile builds the matcher of a valid spec. It fails only on what
// Validate rejects.
func Compile(s Spec) (*Compiled, error) {
	c := &Compiled{any: s.Match == MatchAny, conds: make([]compiledCond, 0, len(s.Conditions))}
	for i, cond := range s.Conditions {
		cc := compiledCond{fields: fieldBits[cond.Field], value: cond.Value}
		op, ok := opCodes[cond.Op]
		if !ok || cc.fields == 0 {
			return nil, cond.validate("conditions[" + strconv.Itoa(i) + "]")
		}
		cc.op = op
		if op == opMatches {
			re, err := regexp.Compile(cond.Value)
			if err != nil || len(cond.Value) > MaxPatternLen {
				return nil, cond.validate("conditions[" + strconv.Itoa(i) + "]")
			}
			cc.re = re
			cc.cost = 100
		} else if isASCII(cond.Value) {
			cc.ascii = true
			cc.value = strings.ToLower(cond.Value)
		} else {
			cc.cost = 10
		}
		if cc.fields&bitBody != 0 {
			cc.cost += 50
		}
		c.conds = append(c.conds, cc)
	}
	slices.SortStableFunc(c.conds, func(a, b compiledCond) int { return cmp.Compare(a.cost, b.cost) })
	return c, nil
}

// Match reports whether m satisfies the rule.
func (c *Compiled) Match(m *Message) bool {
	for i := range c.conds {
		if c.conds[i].test(m) == c.any {
			return c.any
		}
	}
	return !c.any
}

func (cc *compiledCond) test(m *Message) bool {
	if cc.op == opNotContains {
		return !cc.anyField(m, opContains)
	}
	return cc.anyField(m, cc.op)
}

// anyField reports whether op holds on at least one of the condition's
// fields.
func (cc *compiledCond) anyField(m *Message, op opCode) bool {
	f := cc.fields
	return (f&bitSubject != 0 && cc.on(m.Subject, op, false)) ||
		(f&bitFrom != 0 && cc.on(m.From, op, true)) ||
		(f&bitTo != 0 && cc.on(m.To, op, true)) ||
		(f&bitCc != 0 && cc.on(m.Cc, op, true)) ||
		(f&bitBody != 0 && cc.on(m.Body, op, false))
}

func (cc *compiledCond) on(text string, op opCode, address bool) bool {
	switch op {
	case opContains:
		if cc.ascii {
			return indexFoldASCII(text, cc.value) >= 0
		}
		return indexFold(text, cc.value) >= 0
	case opEquals:
		if strings.EqualFold(text, cc.value) {
			return true
		}
		return address && anyAddressEquals(text, cc.value)
	case opMatches:
		return cc.re.MatchString(text)
	}
	return false
}

// anyAddressEquals reports whether one address of a header value
// ("Ann <ann@example.com>, bob@example.com") equals want, ignoring case:
// equals on from, to and cc compares the bare address as well as the whole
// header.
func anyAddressEquals(header, want string) bool {
	quoted, depth, start := false, 0, 0
	for i := 0; i <= len(header); i++ {
		if i < len(header) {
			switch header[i] {
			case '"':
				quoted = !quoted
				continue
			case '<':
				depth++
				continue
			case '>':
				depth = max(depth-1, 0)
				continue
			case ',':
				if quoted || depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		if addressEquals(header[start:i], want) {
			return true
		}
		start = i + 1
	}
	return false
}

func addressEquals(part, want string) bool {
	part = strings.TrimSpace(part)
	if lt := strings.LastIndexByte(part, '<'); lt >= 0 {
		if gt := strings.IndexByte(part[lt:], '>'); gt > 0 {
			part = strings.TrimSpace(part[lt+1 : lt+gt])
		}
	}
	return strings.EqualFold(part, want)
}

// indexFoldASCII returns the index of the first match of the lowercase
// ASCII needle in h, ignoring ASCII case, or -1.
func indexFoldASCII(h, needle string) int {
	n := len(needle)
	switch {
	case n == 0:
		return 0
	case n > len(h):
		return -1
	}
	first := needle[0]
	letter := 'a' <= first && first <= 'z'
	last := len(h) - n
	for i := 0; i <= last; i++ {
		if letter {
			for i <= last && h[i]|0x20 != first {
				i++
			}
		} else {
			j := strings.IndexByte(h[i:last+1], first)
			if j < 0 {
				return -1
			}
			i += j
		}
		if i > last {
			return -1
		}
		if hasPrefixFoldASCII(h[i+1:], needle[1:]) {
			return i
		}
	}
	return -1
}

func hasPrefixFoldASCII(s, lowerPrefix string) bool {
	for j := 0; j < len(lowerPrefix); j++ {
		c := s[j]
		if 'A' <= c && c <= 'Z' {
			c |= 0x20
		}
		if c != lowerPrefix[j] {
			return false
		}
	}
	return true
}

// indexFold returns the index of the first match of needle in h under
// Unicode simple case folding (as strings.EqualFold), or -1.
func indexFold(h, needle string) int {
	if needle == "" {
		return 0
	}
	for i := 0; i < len(h); {
		if hasPrefixFold(h[i:], needle) {
			return i
		}
		_, size := utf8.DecodeRuneInString(h[i:])
		i += size
	}
	return -1
}

func hasPrefixFold(s, prefix string) bool {
	for prefix != "" {
		if s == "" {
			return false
		}
		a, na := utf8.DecodeRuneInString(s)
		b, nb := utf8.DecodeRuneInString(prefix)
		if a != b && !foldEqual(a, b) {
			return false
		}
		s, prefix = s[na:], prefix[nb:]
	}
	return true
}

// foldEqual reports whether a and b are equal under simple case folding.
func foldEqual(a, b rune) bool {
	if a < utf8.RuneSelf && b < utf8.RuneSelf {
		if 'A' <= a && a <= 'Z' {
			a += 'a' - 'A'
		}
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		return a == b
	}
	r := unicode.SimpleFold(a)
	for r != a && r != b {
		r = unicode.SimpleFold(r)
	}
	return r == b
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
