package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCounts: the lines go test, go test -v and Ginkgo print, counted.
func TestCounts(t *testing.T) {
	out := `=== RUN   TestDriverOnKubernetes
    --- PASS: TestDriverOnKubernetes/ReadWriteManyDeployment (12.30s)
    --- FAIL: TestDriverOnKubernetes/HelmUpgrade (302.00s)
--- FAIL: TestDriverOnKubernetes (900.10s)
--- PASS: TestMissedConnectDeadline (0.00s)
ok  	github.com/nfsdir/nfsdir/pkg/params	0.412s
ok  	github.com/nfsdir/nfsdir/pkg/volumeid	(cached)
FAIL	github.com/nfsdir/nfsdir/tests/k8s	1000.2s
?   	github.com/nfsdir/nfsdir/cmd/nfsdir	[no test files]
FAIL
Ran 16 of 67 Specs in 511.2 seconds
SUCCESS! -- 16 Passed | 0 Failed | 0 Pending | 51 Skipped
ok: the writer still writes
`
	var c Counts
	for _, l := range strings.Split(out, "\n") {
		c.Add(l)
	}
	want := Counts{TestsPassed: 2, TestsFailed: 2, PackagesPassed: 2, PackagesFailed: 1, SpecsPassed: 16}
	if c != want {
		t.Errorf("counts %+v, want %+v", c, want)
	}
	if got := c.String(); got != "tests 2/2, packages 2/1, specs 16/0" {
		t.Errorf("String() = %q", got)
	}
	if got := (Counts{}).String(); got != "-" {
		t.Errorf("no counts: %q", got)
	}
}

// TestStagesStopAtTheFirstFailure: stages run in order through make; the
// one that fails ends the run, the rest are listed as not run, and the
// table and its JSON say so.
func TestStagesStopAtTheFirstFailure(t *testing.T) {
	dir := t.TempDir()
	mk := filepath.Join(dir, "Makefile")
	os.WriteFile(mk, []byte("one:\n\t@echo '--- PASS: TestOne (0.00s)'\ntwo:\n\t@echo '--- FAIL: TestTwo (0.00s)'; exit 1\nthree:\n\t@echo never\n"), 0o644)
	var sb strings.Builder
	run := Run{}
	for _, target := range []string{"one", "two"} {
		run.Stages = append(run.Stages, runStage("make -f "+mk, target, &sb))
	}
	run.Stages = append(run.Stages, Stage{Name: "three", Result: NotRun})
	if run.Stages[0].Result != Passed || run.Stages[0].TestsPassed != 1 || run.Stages[1].Result != Failed || run.Stages[1].TestsFailed != 1 {
		t.Errorf("stages %+v", run.Stages)
	}
	if !strings.Contains(sb.String(), "--- FAIL: TestTwo") {
		t.Errorf("output not passed through: %q", sb.String())
	}
	table := run.Table()
	for _, want := range []string{"one", "passed", "tests 1/0", "two", "failed", "tests 0/1", "three", "not run"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	path := filepath.Join(dir, "out", "timings.json")
	if err := run.Write(path); err != nil {
		t.Fatal(err)
	}
	var back Run
	b, _ := os.ReadFile(path)
	if err := json.Unmarshal(b, &back); err != nil || len(back.Stages) != 3 || back.Stages[1].Result != Failed || back.Stages[0].TestsPassed != 1 {
		t.Errorf("JSON %s: %v", b, err)
	}
}

// TestStagesCountTheirProcessorTime: the processor time of a stage's
// processes, those its recipe started included, is the stage's.
func TestStagesCountTheirProcessorTime(t *testing.T) {
	dir := t.TempDir()
	mk := filepath.Join(dir, "Makefile")
	// A shell of the recipe runs a busy loop in a child of its own.
	os.WriteFile(mk, []byte("busy:\n\t@sh -c 'i=0; while [ $$i -lt 300000 ]; do i=$$((i+1)); done'\n"), 0o644)
	var sb strings.Builder
	st := runStage("make -f "+mk, "busy", &sb)
	if st.Result != Passed || st.CPUSeconds < 0.05 || st.CPUSeconds > 2*st.Seconds+0.1 {
		t.Errorf("stage %+v: %.3f s of processor time in %.3f s", st, st.CPUSeconds, st.Seconds)
	}
	if table := (Run{Stages: []Stage{st}, Seconds: st.Seconds}).Table(); !strings.Contains(table, "cores") {
		t.Errorf("table lacks the cores column:\n%s", table)
	}
}
