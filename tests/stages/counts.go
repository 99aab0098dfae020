package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Counts are what a stage's output says passed and failed: Go tests and
// subtests (go test -v's "--- PASS" and "--- FAIL" lines), Go packages
// (go test's "ok" and "FAIL" lines, for stages run without -v), and
// Kubernetes storage-suite specs (Ginkgo's summary).
type Counts struct {
	TestsPassed    int `json:"testsPassed"`
	TestsFailed    int `json:"testsFailed"`
	PackagesPassed int `json:"packagesPassed"`
	PackagesFailed int `json:"packagesFailed"`
	SpecsPassed    int `json:"specsPassed"`
	SpecsFailed    int `json:"specsFailed"`
}

var (
	testLine    = regexp.MustCompile(`^\s*--- (PASS|FAIL): `)
	packageLine = regexp.MustCompile(`^(ok|FAIL)\s+\S+\s+(\d|\(|\[)`)
	ginkgoLine  = regexp.MustCompile(`(\d+) Passed \| (\d+) Failed`)
)

// Add counts one line of output.
func (c *Counts) Add(line string) {
	if m := testLine.FindStringSubmatch(line); m != nil {
		if m[1] == "PASS" {
			c.TestsPassed++
		} else {
			c.TestsFailed++
		}
		return
	}
	if m := packageLine.FindStringSubmatch(line); m != nil {
		if m[1] == "ok" {
			c.PackagesPassed++
		} else {
			c.PackagesFailed++
		}
		return
	}
	if m := ginkgoLine.FindStringSubmatch(line); m != nil {
		// Ginkgo prints its summary once per run; the last one counts.
		c.SpecsPassed, _ = strconv.Atoi(m[1])
		c.SpecsFailed, _ = strconv.Atoi(m[2])
	}
}

// String tells the counts that the stage has, e.g. "tests 41/0, specs 16/0".
func (c Counts) String() string {
	var parts []string
	if c.TestsPassed+c.TestsFailed > 0 {
		parts = append(parts, fmt.Sprintf("tests %d/%d", c.TestsPassed, c.TestsFailed))
	}
	if c.PackagesPassed+c.PackagesFailed > 0 {
		parts = append(parts, fmt.Sprintf("packages %d/%d", c.PackagesPassed, c.PackagesFailed))
	}
	if c.SpecsPassed+c.SpecsFailed > 0 {
		parts = append(parts, fmt.Sprintf("specs %d/%d", c.SpecsPassed, c.SpecsFailed))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
