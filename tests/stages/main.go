// Command stages runs the stages of `make test` one after another, each a
// make target, passing their output through unchanged, and ends with one
// table of the stages: how long each took, whether it passed, and how many
// tests (or packages, or storage-suite specs) passed and failed in it. The
// same table is written as JSON for tools.
//
//	go run ./tests/stages -json _output/test-timings.json -make make check unit e2e
//
// It stops at the first stage that fails, as make does, and lists the
// stages after it as not run.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	jsonPath := flag.String("json", "_output/test-timings.json", "where to write the stages' table as JSON")
	makeCmd := flag.String("make", "make", "the make program (and its flags) that runs each stage")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: stages [-json file] [-make cmd] target...")
		os.Exit(2)
	}
	run := Run{Started: time.Now().UTC()}
	failed := false
	for _, target := range flag.Args() {
		if failed {
			run.Stages = append(run.Stages, Stage{Name: target, Result: NotRun})
			continue
		}
		st := runStage(*makeCmd, target, os.Stdout)
		failed = st.Result != Passed
		run.Stages = append(run.Stages, st)
	}
	run.Seconds = time.Since(run.Started).Seconds()
	fmt.Print(run.Table())
	if err := run.Write(*jsonPath); err != nil {
		fmt.Fprintln(os.Stderr, "stages:", err)
		os.Exit(1)
	}
	fmt.Printf("stage timings written to %s\n", *jsonPath)
	if failed {
		os.Exit(1)
	}
}

// runStage runs `makeCmd target`, copies its output to out and counts
// what passed and failed in it.
func runStage(makeCmd, target string, out io.Writer) Stage {
	st := Stage{Name: target}
	args := append(strings.Fields(makeCmd), "--no-print-directory", target)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = os.Stdin
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	began := time.Now()
	counted := make(chan Counts)
	go func() {
		var c Counts
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(out, line)
			c.Add(line)
		}
		io.Copy(out, pr) // after a line over the buffer: the rest passes through uncounted
		counted <- c
	}()
	err := cmd.Run()
	pw.Close()
	st.Counts = <-counted
	st.Seconds = time.Since(began).Seconds()
	if ps := cmd.ProcessState; ps != nil {
		// The stage's processes that were waited for, children of
		// children included.
		st.CPUSeconds = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	st.Result = Passed
	if err != nil {
		st.Result = Failed
	}
	return st
}

// Result of a stage.
type Result string

const (
	Passed Result = "passed"
	Failed Result = "failed"
	NotRun Result = "not run"
)

// Stage is one row of the table: its wall time, and the processor time
// its processes used (over the wall time: how many of the machine's
// processors it kept busy on average).
type Stage struct {
	Name       string  `json:"name"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	Result     Result  `json:"result"`
	Counts
}

// Run is the whole table.
type Run struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"`
	Stages  []Stage   `json:"stages"`
}

// Write writes the run as indented JSON to path, making its directory.
func (r Run) Write(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Table renders the run as a plain-text table.
func (r Run) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-16s %8s %6s  %-8s %s\n", "stage", "seconds", "cores", "result", "passed/failed")
	var cpu float64
	for _, s := range r.Stages {
		secs, cores := "-", "-"
		if s.Result != NotRun {
			secs = fmt.Sprintf("%.0f", s.Seconds)
			if s.Seconds > 0 {
				cores = fmt.Sprintf("%.2f", s.CPUSeconds/s.Seconds)
			}
		}
		cpu += s.CPUSeconds
		fmt.Fprintf(&b, "%-16s %8s %6s  %-8s %s\n", s.Name, secs, cores, s.Result, s.Counts)
	}
	total := "-"
	if r.Seconds > 0 {
		total = fmt.Sprintf("%.2f", cpu/r.Seconds)
	}
	fmt.Fprintf(&b, "%-16s %8.0f %6s\n", "total", r.Seconds, total)
	return b.String()
}
