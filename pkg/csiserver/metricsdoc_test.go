package csiserver

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/tests/docs/md"
)

var update = flag.Bool("update", false, "rewrite the generated part of docs/metrics.md")

// The metrics on docs/metrics.md are generated between these two lines.
const (
	metricsBegin = "<!-- metrics: generated from the driver's registry by `go test ./pkg/csiserver -run TestMetricsPage -update` -->"
	metricsEnd   = "<!-- end of metrics -->"
)

// TestMetricsPageListsEveryMetric: docs/metrics.md lists every metric a
// driver running both services registers, with its labels and help, and
// no other.
func TestMetricsPageListsEveryMetric(t *testing.T) {
	d := newDriver(t)
	var b strings.Builder
	b.WriteString("| metric | labels | meaning |\n|---|---|---|\n")
	for _, m := range d.metrics.Described() {
		var labels []string
		for _, l := range m.Labels {
			labels = append(labels, "`"+l+"`")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", m.Name, strings.Join(labels, ", "), strings.ReplaceAll(m.Help, "|", `\|`))
	}
	if err := md.Sync("../../docs/metrics.md", metricsBegin, metricsEnd, b.String(), *update); err != nil {
		t.Error(err)
	}
}
