// Command page records a run of `make bench` or `make bench-bound` from
// its log in the results file and writes the tables of every run recorded
// there into docs/benchmarks.md, between each run's markers. The Makefile
// runs it after each bench; nobody edits the tables by hand.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/tests/bench/report"
)

func main() {
	logPath := flag.String("log", "", "the run's log (its BENCH-ROW lines); empty: only write the page again")
	command := flag.String("command", "make bench", "the make command that ran")
	args := flag.String("args", "", "the arguments the run was given")
	commitFlag := flag.String("commit", "", "the commit measured (default: the checked-out one, now)")
	results := flag.String("results", "tests/bench/results.json", "the results file")
	pagePath := flag.String("page", "docs/benchmarks.md", "the page")
	flag.Parse()
	measured := *commitFlag
	if measured == "" {
		measured = commit()
	}
	if err := run(*logPath, *command, strings.TrimSpace(*args), measured, *results, *pagePath); err != nil {
		fmt.Fprintln(os.Stderr, "page:", err)
		os.Exit(1)
	}
}

func run(logPath, command, args, measured, resultsPath, pagePath string) error {
	res, err := load(resultsPath)
	if err != nil {
		return err
	}
	if logPath != "" {
		f, err := os.Open(logPath)
		if err != nil {
			return err
		}
		rows, guest, err := report.Parse(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %v", logPath, err)
		}
		res.Put(report.Run{Command: command, Args: args, Date: time.Now().UTC().Format(time.DateOnly),
			Commit: measured, Machine: machine(), Guest: withEmulation(guest), Rows: rows})
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(resultsPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	page, err := os.ReadFile(pagePath)
	if err != nil {
		return err
	}
	out, err := report.Splice(string(page), res)
	if err != nil {
		return err
	}
	return os.WriteFile(pagePath, []byte(out), 0o644)
}

// withEmulation adds how qemu ran the guest's vCPUs (the lab's
// NFSDIR_LAB_TCG, which the guest does not see) to its description.
func withEmulation(guest string) string {
	if guest == "" {
		return ""
	}
	mode := "one host thread for all vCPUs (single-threaded TCG)"
	if os.Getenv("NFSDIR_LAB_TCG") == "multi" {
		mode = "a host thread per vCPU (multi-threaded TCG)"
	}
	return guest + ", emulated by qemu with " + mode
}

func load(path string) (report.Results, error) {
	var res report.Results
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	return res, json.Unmarshal(b, &res)
}

// commit names the checked-out commit, and says so when the tree differs
// from it. The Makefile asks before the run starts, since the tree may
// change while a bench runs.
func commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); len(bytes.TrimSpace(st)) > 0 {
		c += " with local changes"
	}
	return c
}

// machine describes the host: its CPU, cores, memory, system and kernel.
func machine() string {
	var cpu, mem, system string
	scan("/proc/cpuinfo", func(k, v string) {
		if k == "model name" && cpu == "" {
			cpu = v
		}
	})
	scan("/proc/meminfo", func(k, v string) {
		var kib int64
		if _, err := fmt.Sscanf(v, "%d kB", &kib); k == "MemTotal" && err == nil {
			mem = fmt.Sprintf("%.0f GiB", float64(kib)/(1<<20))
		}
	})
	osRelease := "/etc/os-release"
	scanSep(osRelease, "=", func(k, v string) {
		if k == "PRETTY_NAME" {
			system = strings.Trim(v, `"`)
		}
	})
	var u unix.Utsname
	unix.Uname(&u)
	return fmt.Sprintf("%s, %d cores, %s of memory, %s, Linux %s, no KVM (the guest is emulated)",
		cpu, runtime.NumCPU(), mem, system, unix.ByteSliceToString(u.Release[:]))
}

func scan(path string, f func(k, v string)) { scanSep(path, ":", f) }

func scanSep(path, sep string, f func(k, v string)) {
	file, err := os.Open(path)
	if err != nil {
		return
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), sep); ok {
			f(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
}
