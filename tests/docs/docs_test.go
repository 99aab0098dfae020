// Package docs tests the documentation against the code: links and
// anchors resolve, the configuration page names every parameter and chart
// value the code has and no other, the blocks a page marks as ones that
// run are run by tests (here, or in the Kubernetes lab), and no page keeps
// a log of past runs.
package docs

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/tests/docs/md"
)

var update = flag.Bool("update", false, "rewrite the generated parts of the pages")

const root = "../.."

// pages returns the project's Markdown pages users read, relative to the
// repository's root.
func pages(t *testing.T) []string {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("docs/*.md: %v", err)
	}
	out := []string{"README.md", "CHANGELOG.md"}
	for _, d := range docs {
		out = append(out, filepath.Join("docs", filepath.Base(d)))
	}
	return out
}

func read(t *testing.T, rel string) string {
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLinksResolve: every relative link of every page names a file or
// directory of the repository, and every anchor a heading of its page.
func TestLinksResolve(t *testing.T) {
	for _, p := range pages(t) {
		for _, l := range md.Links(read(t, p)) {
			if strings.Contains(l.Target, "://") || strings.HasPrefix(l.Target, "mailto:") {
				continue
			}
			if problem := resolve(p, l.Target); problem != "" {
				t.Errorf("%s:%d: link %s: %s", p, l.Line, l.Target, problem)
			}
		}
	}
}

// resolve returns what is wrong with a link target on page, or "".
func resolve(page, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	file := page
	if path != "" {
		file = filepath.Join(filepath.Dir(page), path)
		if strings.HasPrefix(filepath.Clean(file), "..") {
			return "leaves the repository"
		}
		if _, err := os.Stat(filepath.Join(root, file)); err != nil {
			return "no such file"
		}
	}
	if anchor == "" {
		return ""
	}
	if !strings.HasSuffix(file, ".md") {
		return "an anchor in a file that is not a page"
	}
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		return err.Error()
	}
	if !md.Anchors(string(b))[anchor] {
		return "no heading " + anchor + " in " + file
	}
	return ""
}

// runLog matches what a log of past runs leaves in a text: dates, and
// sessions or stops by number.
var runLog = regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b|(?i)\b(session|stop) #?\d+\b|(?i)\brun #\d+\b`)

// sourceFile reports whether a file of the repository is text the project
// wrote: pages, code, scripts, the chart and the build files.
func sourceFile(name string) bool {
	switch filepath.Ext(name) {
	case ".md", ".go", ".sh", ".yaml", ".yml", ".tpl", ".json", ".txt":
		return true
	}
	return name == "Makefile" || name == "Dockerfile"
}

// TestNoRunLogs: the project's text speaks of the product, not of the
// runs that built it: no dates and no numbered sessions in its pages,
// code, comments, scripts, chart or build files. The changelog's release
// headings carry their dates, and so do the runs make bench records
// (tests/bench/results.json) and the tables it writes from them; test
// data and fetched or built files are not the project's text.
func TestNoRunLogs(t *testing.T) {
	release := regexp.MustCompile(`^## \[\d+\.\d+\.\d+\] - 20\d\d-\d\d-\d\d$`)
	skip := map[string]bool{".git": true, "bin": true, "_output": true, "testdata": true, "vendor": true, "node_modules": true}
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skip[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !sourceFile(d.Name()) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		measured := measuredLines(rel, string(b))
		for i, l := range strings.Split(string(b), "\n") {
			if rel == "CHANGELOG.md" && release.MatchString(l) || measured[i] {
				continue
			}
			if m := runLog.FindString(l); m != "" {
				t.Errorf("%s:%d: %q: %s", rel, i+1, m, strings.TrimSpace(l))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// measuredLines returns the lines of a file that record when a bench ran:
// the date of each run in its results file, and the line that says when
// each of the benchmarks page's generated sections was measured.
func measuredLines(rel, text string) map[int]bool {
	out := map[int]bool{}
	for i, l := range strings.Split(text, "\n") {
		switch {
		case rel == filepath.Join("tests", "bench", "results.json") && strings.HasPrefix(strings.TrimSpace(l), `"date": `):
			out[i] = true
		case rel == filepath.Join("docs", "benchmarks.md") && strings.HasPrefix(l, "Measured by `make bench"):
			out[i] = true
		}
	}
	return out
}

// TestConfigurationPageNamesEveryParameter: the parameters of
// StorageClasses, the attributes of static and inline volumes and the
// parameters of VolumeAttributesClasses that the code accepts are each in
// their table on docs/configuration.md, and the tables name no other.
func TestConfigurationPageNamesEveryParameter(t *testing.T) {
	page := read(t, "docs/configuration.md")
	for kind, section := range map[string]string{"StorageClass": "StorageClass parameters", "volume": "Volume attributes", "VolumeAttributesClass": "VolumeAttributesClass"} {
		text, ok := md.Section(page, section)
		if !ok {
			t.Errorf("docs/configuration.md has no section %q", section)
			continue
		}
		var documented []string
		for _, cell := range md.FirstCells(text) {
			documented = append(documented, md.Codes(cell)...)
		}
		accepted := params.Documented()[kind]
		for _, k := range accepted {
			if !slices.Contains(documented, k) {
				t.Errorf("%s: %s is not on the page", section, k)
			}
		}
		for _, k := range documented {
			if !slices.Contains(accepted, k) {
				t.Errorf("%s: the page names %s, which the code does not accept", section, k)
			}
		}
	}
}
