package docs

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/nfsdir/nfsdir/tests/docs/md"
)

// The chart's values on docs/configuration.md are generated from
// values.yaml, between these two lines.
const (
	valuesBegin = "<!-- chart values: generated from charts/nfsdir/values.yaml by `go test ./tests/docs -update` -->"
	valuesEnd   = "<!-- end of chart values -->"
)

// A value is one documented key of values.yaml: its path, its default and
// the text of its "# --" comment.
type value struct {
	path, def, doc string
}

// chartValues reads values.yaml and returns its documented keys in order,
// and the paths of the leaves no documented key covers (itself or a key
// above it).
func chartValues(t *testing.T) ([]value, []string) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(read(t, "charts/nfsdir/values.yaml")), &doc); err != nil {
		t.Fatal(err)
	}
	var values []value
	var bare []string
	var walk func(prefix string, m *yaml.Node, covered bool)
	walk = func(prefix string, m *yaml.Node, covered bool) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			path := prefix + k.Value
			text, documented := comment(k.HeadComment)
			if documented {
				values = append(values, value{path: path, def: flow(v), doc: text})
			}
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 {
				walk(path+".", v, covered || documented)
			} else if !covered && !documented {
				bare = append(bare, path)
			}
		}
	}
	walk("", doc.Content[0], false)
	return values, bare
}

// comment returns the text of a "# --" comment, the lines after it
// joined, and whether there is one.
func comment(head string) (string, bool) {
	_, after, ok := strings.Cut(head, "# --")
	if !ok {
		return "", false
	}
	var words []string
	for _, l := range strings.Split(after, "\n") {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		if l != "" {
			words = append(words, l)
		}
	}
	return strings.Join(words, " "), true
}

// flow renders a default on one line.
func flow(v *yaml.Node) string {
	c := *v
	c.Style = yaml.FlowStyle
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	var strip func(n *yaml.Node)
	strip = func(n *yaml.Node) {
		for _, x := range n.Content {
			x.HeadComment, x.LineComment, x.FootComment = "", "", ""
			strip(x)
		}
	}
	strip(&c)
	b, err := yaml.Marshal(&c)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// valuesTable renders the generated part of the page.
func valuesTable(values []value) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| value | default | meaning |\n|---|---|---|\n")
	for _, v := range values {
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", v.path, strings.ReplaceAll(v.def, "|", `\|`), strings.ReplaceAll(v.doc, "|", `\|`))
	}
	return b.String()
}

// TestConfigurationPageListsEveryChartValue: every key of the chart's
// values.yaml is documented there (a "# --" comment on it or on a key
// above it), and docs/configuration.md lists those keys as values.yaml
// says, with their defaults.
func TestConfigurationPageListsEveryChartValue(t *testing.T) {
	values, bare := chartValues(t)
	for _, p := range bare {
		t.Errorf("values.yaml: %s has no \"# --\" comment, nor has a key above it", p)
	}
	if err := md.Sync(filepath.Join(root, "docs/configuration.md"), valuesBegin, valuesEnd, valuesTable(values), *update); err != nil {
		t.Error(err)
	}
}
