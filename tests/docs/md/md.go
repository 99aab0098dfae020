// Package md reads the few things the documentation tests check in
// Markdown pages: sections, the first cells of tables, links and heading
// anchors as GitHub renders them.
package md

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"unicode"
)

// lines returns text's lines outside fenced code blocks, with their
// numbers (from 1); lines inside a fence are returned empty.
func lines(text string) []string {
	out := strings.Split(text, "\n")
	fenced := false
	for i, l := range out {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			out[i] = ""
			continue
		}
		if fenced {
			out[i] = ""
		}
	}
	return out
}

// heading returns a line's heading level and text, or 0.
func heading(l string) (int, string) {
	n := len(l) - len(strings.TrimLeft(l, "#"))
	if n == 0 || n > 6 || !strings.HasPrefix(l[n:], " ") {
		return 0, ""
	}
	return n, strings.TrimSpace(l[n:])
}

// Section returns what follows the heading named title (any level) up to
// the next heading of the same or a higher level.
func Section(text, title string) (string, bool) {
	ls := lines(text)
	raw := strings.Split(text, "\n")
	for i, l := range ls {
		level, t := heading(l)
		if level == 0 || t != title {
			continue
		}
		end := len(ls)
		for j := i + 1; j < len(ls); j++ {
			if lv, _ := heading(ls[j]); lv > 0 && lv <= level {
				end = j
				break
			}
		}
		return strings.Join(raw[i+1:end], "\n"), true
	}
	return "", false
}

// FirstCells returns the first cell of every row of the tables in text,
// header rows and separators left out.
func FirstCells(text string) []string {
	var out []string
	ls := lines(text)
	for i, l := range ls {
		if !strings.HasPrefix(l, "|") {
			continue
		}
		if i+1 < len(ls) && strings.HasPrefix(ls[i+1], "|---") || strings.HasPrefix(l, "|---") {
			continue
		}
		cells := strings.Split(l, "|")
		if len(cells) > 2 {
			out = append(out, strings.TrimSpace(cells[1]))
		}
	}
	return out
}

var code = regexp.MustCompile("`([^`]+)`")

// Codes returns the code spans of s, in order.
func Codes(s string) []string {
	var out []string
	for _, m := range code.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// Anchor returns the anchor GitHub gives a heading's text: lower case,
// punctuation dropped but for hyphens and underscores, spaces turned into
// hyphens.
func Anchor(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Anchors returns the anchors of text's headings; a repeated one gets
// -1, -2, … as on GitHub.
func Anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, l := range lines(text) {
		if level, t := heading(l); level > 0 {
			a := Anchor(t)
			for n := 1; out[a]; n++ {
				a = fmt.Sprintf("%s-%d", Anchor(t), n)
			}
			out[a] = true
		}
	}
	return out
}

// A Link is a link's target and the line it is on.
type Link struct {
	Target string
	Line   int
}

var link = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// Links returns the inline links of text outside code.
func Links(text string) []Link {
	var out []Link
	for i, l := range lines(text) {
		l = code.ReplaceAllString(l, "")
		for _, m := range link.FindAllStringSubmatch(l, -1) {
			out = append(out, Link{Target: m[1], Line: i + 1})
		}
	}
	return out
}

// Sync checks that the part of the page in file between the lines begin
// and end (both kept) is want: it returns an error that shows the first
// line that differs, or, with update, writes want there instead.
func Sync(file, begin, end, want string, update bool) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	page := string(b)
	i, j := strings.Index(page, begin), strings.Index(page, end)
	if i < 0 || j < i {
		return fmt.Errorf("%s has no generated part between %q and %q", file, begin, end)
	}
	want = begin + "\n\n" + want + "\n" + end
	got := page[i : j+len(end)]
	if got == want {
		return nil
	}
	if update {
		return os.WriteFile(file, []byte(page[:i]+want+page[j+len(end):]), 0o644)
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for k := 0; k < max(len(g), len(w)); k++ {
		var a, b string
		if k < len(g) {
			a = g[k]
		}
		if k < len(w) {
			b = w[k]
		}
		if a != b {
			return fmt.Errorf("%s differs from what it is generated from at its line %q (want %q); run the test with -update", file, a, b)
		}
	}
	return nil
}

// A Block is a fenced code block a page marks as one a test runs: the
// line before its fence is `<!-- runs in a test: NAME -->`.
type Block struct {
	Mark string // NAME
	Lang string // the fence's info string: sh, bash, yaml
	Body string
	Line int // of the marker, from 1
}

var runsMark = regexp.MustCompile(`^<!-- runs in a test: ([a-z0-9-]+) -->$`)

// Blocks returns text's marked blocks; a marker not followed by a fenced
// block is returned with an empty Lang.
func Blocks(text string) []Block {
	raw := strings.Split(text, "\n")
	var out []Block
	for i, l := range raw {
		m := runsMark.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		b := Block{Mark: m[1], Line: i + 1}
		if i+1 < len(raw) && strings.HasPrefix(raw[i+1], "```") {
			for j := i + 2; j < len(raw); j++ {
				if strings.HasPrefix(raw[j], "```") {
					b.Lang = strings.TrimSpace(strings.TrimPrefix(raw[i+1], "```"))
					b.Body = strings.Join(raw[i+2:j], "\n") + "\n"
					break
				}
			}
		}
		out = append(out, b)
	}
	return out
}
