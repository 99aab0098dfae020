package k8s

import (
	"strings"
	"testing"
)

// TestScanSuiteOutput reads the summary of a Ginkgo run out of its output
// and passes the output through unchanged.
func TestScanSuiteOutput(t *testing.T) {
	out := "Will run 183 of 7673 specs\nSSS•S•\n\nRan 12 of 7673 Specs in 1800.102 seconds\n" +
		"FAIL! -- 10 Passed | 2 Failed | 0 Pending | 7661 Skipped\n"
	var copied strings.Builder
	got := scanSuiteOutput(strings.NewReader(out), &copied)
	want := suiteSummary{ran: 12, total: 7673, passed: 10, failed: 2, pending: 0, skipped: 7661}
	if got != want {
		t.Errorf("summary = %+v, want %+v", got, want)
	}
	if copied.String() != out {
		t.Errorf("output not passed through: %q", copied.String())
	}
}
