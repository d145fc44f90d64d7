package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// Every relative link and anchor in README.md and docs/ must lead to a file
// that exists and, when it names an anchor, to a heading of that file.
func TestDocsLinks(t *testing.T) {
	files := []string{"../README.md"}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %v: the docs moved?", files)
	}
	for _, problem := range checkLinks(files) {
		t.Error(problem)
	}
}

// A broken link or anchor is found, and a good one passes.
func TestCheckLinksFindsBrokenOnes(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("sub/b.md", "# B\n\n## 3. Pub/Sub topic, publisher — and push\n\n## Twice\n\n## Twice\n")
	write("sub/pic.png", "png")
	a := write("a.md", strings.Join([]string{
		"# A title",
		"[ok](sub/b.md) [ok](sub/b.md#3-pubsub-topic-publisher--and-push) [ok](#a-title)",
		"[ok](sub/b.md#twice-1) ![ok](sub/pic.png) [ok](https://example.com/x.md#nothing)",
		"[gone](sub/c.md) [bad anchor](sub/b.md#pubsub) [bad here](#b)",
		"`[in code](nowhere.md)` and [split",
		"text](sub/b.md#nope)",
		"```",
		"[in a fence](nowhere.md)",
		"```",
	}, "\n"))
	got := checkLinks([]string{a})
	want := []string{
		a + ":4: sub/c.md: no such file",
		a + ":4: sub/b.md#pubsub: no heading makes the anchor pubsub",
		a + ":4: #b: no heading makes the anchor b",
		a + ":6: sub/b.md#nope: no heading makes the anchor nope",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("checkLinks found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestSlug(t *testing.T) {
	cases := map[string]string{
		"Set up": "set-up",
		"Reliability: when the broker forgets, the disk fills, the process dies": "reliability-when-the-broker-forgets-the-disk-fills-the-process-dies",
		"Connecting end users' Gmail (connect links)":                            "connecting-end-users-gmail-connect-links",
		"1. Google Cloud project and APIs":                                       "1-google-cloud-project-and-apis",
		"Add a `MAILROOM_*` setting":                                             "add-a-mailroom_-setting",
		"[Linked](x.md) *heading*":                                               "linked-heading",
	}
	for heading, want := range cases {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
}

var (
	fence      = regexp.MustCompile("(?m)^ {0,3}(```|~~~).*$")
	codeSpan   = regexp.MustCompile("`[^`]*`")
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	heading    = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	mdLink     = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// checkLinks returns one line per broken relative link in files:
// "file:line: target: what is wrong".
func checkLinks(files []string) []string {
	var problems []string
	anchors := map[string]map[string]bool{}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", file, err))
			continue
		}
		text := prose(string(raw))
		for _, m := range linkTarget.FindAllStringSubmatchIndex(text, -1) {
			target := text[m[2]:m[3]]
			if scheme.MatchString(target) {
				continue
			}
			line := 1 + strings.Count(text[:m[2]], "\n")
			if msg := checkTarget(file, target, anchors); msg != "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: %s", file, line, target, msg))
			}
		}
	}
	return problems
}

// checkTarget says what is wrong with one link of file, or "".
func checkTarget(file, target string, anchors map[string]map[string]bool) string {
	path, anchor, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if anchor == "" {
		return ""
	}
	if _, ok := anchors[dest]; !ok {
		raw, err := os.ReadFile(dest)
		if err != nil {
			return err.Error()
		}
		anchors[dest] = headingAnchors(string(raw))
	}
	if !anchors[dest][anchor] {
		return "no heading makes the anchor " + anchor
	}
	return ""
}

// prose blanks fenced code blocks and code spans, keeping the line count.
func prose(text string) string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if fence.MatchString(l) {
			in = !in
			lines[i] = ""
		} else if in {
			lines[i] = ""
		}
	}
	return codeSpan.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
}

// headingAnchors lists the anchors GitHub makes for a file's headings: the
// slug, then slug-1, slug-2 for repeats.
func headingAnchors(text string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range strings.Split(prose(text), "\n") {
		m := heading.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// slug is GitHub's anchor for a heading: link text instead of links,
// lowercased, every character but letters, digits, '_', '-' and spaces
// dropped, spaces made '-'.
func slug(h string) string {
	h = mdLink.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
