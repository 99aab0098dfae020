package docs

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/tests/bench/report"
)

// TestBenchmarksPageIsGenerated: the tables of docs/benchmarks.md are the
// ones the runs recorded in tests/bench/results.json render, for both
// make bench and make bench-bound, so a figure on the page is one a run
// measured on the machine and day the page names, never one edited by
// hand.
func TestBenchmarksPageIsGenerated(t *testing.T) {
	var res report.Results
	if err := json.Unmarshal([]byte(read(t, "tests/bench/results.json")), &res); err != nil {
		t.Fatalf("tests/bench/results.json: %v", err)
	}
	for _, cmd := range []string{"make bench", "make bench-bound"} {
		found := false
		for _, r := range res.Runs {
			if r.Command == cmd {
				found = len(r.Rows) > 0 && r.Date != "" && r.Machine != "" && r.Commit != ""
			}
		}
		if !found {
			t.Errorf("tests/bench/results.json has no complete run of %s", cmd)
		}
	}
	page := read(t, "docs/benchmarks.md")
	want, err := report.Splice(page, res)
	if err != nil {
		t.Fatalf("docs/benchmarks.md: %v", err)
	}
	if want != page {
		got, exp := strings.Split(page, "\n"), strings.Split(want, "\n")
		for i := range min(len(got), len(exp)) {
			if got[i] != exp[i] {
				t.Fatalf("docs/benchmarks.md:%d differs from what tests/bench/results.json renders (write it with `go run ./tests/bench/page`):\n got: %s\nwant: %s", i+1, got[i], exp[i])
			}
		}
		t.Fatalf("docs/benchmarks.md has %d lines, its tables rendered %d (write it with `go run ./tests/bench/page`)", len(got), len(exp))
	}
}
