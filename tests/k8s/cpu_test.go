package k8s

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// cpuReport logs where this guest's processor time went since it booted:
// the share of time busy and the programs that used the most (their own
// time and that of the children they waited for, by program name). A
// guest runs under emulation, so its processor time is the lab's cost.
func (c *cluster) cpuReport() {
	busy, total := guestCPU()
	if total == 0 {
		return
	}
	used := map[string]float64{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		name, secs, ok := procCPU(string(b))
		if ok {
			used[name] += secs
		}
	}
	names := make([]string, 0, len(used))
	for n := range used {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(used[b], used[a]) })
	var b strings.Builder
	fmt.Fprintf(&b, "guest processor time: %.0f s busy of %.0f s (%.0f%%); by program:", busy, total, 100*busy/total)
	for _, n := range names[:min(len(names), 16)] {
		fmt.Fprintf(&b, " %s %.0f s,", n, used[n])
	}
	c.t.Log(strings.TrimSuffix(b.String(), ","))
}

// clockTicks is USER_HZ, the unit of /proc's times (100 on Linux).
const clockTicks = 100

// guestCPU returns the seconds all processors spent busy and in all since
// boot, from /proc/stat's first line.
func guestCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle and iowait
			busy += v
		}
	}
	return busy / clockTicks, total / clockTicks
}

// procCPU parses a /proc/<pid>/stat line: the program's name and its user
// and system time with that of its waited-for children, in seconds.
func procCPU(stat string) (string, float64, bool) {
	open, end := strings.IndexByte(stat, '('), strings.LastIndexByte(stat, ')')
	if open < 0 || end < open {
		return "", 0, false
	}
	fields := strings.Fields(stat[end+1:])
	// After the name: state(0) ... utime(11) stime(12) cutime(13) cstime(14).
	if len(fields) < 15 {
		return "", 0, false
	}
	var ticks float64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseFloat(fields[i], 64)
		ticks += v
	}
	name := stat[open+1 : end]
	if strings.HasPrefix(name, "kworker") {
		name = "kworker"
	}
	return name, ticks / clockTicks, true
}

// step is one scenario run on a cluster.
type step struct {
	name string
	run  func(*cluster)
}

// runSteps runs each step as a subtest on c, logging the guest's busy
// processor time during it, and ends with the guest's cpuReport.
func (c *cluster) runSteps(steps []step) {
	for _, s := range steps {
		before, _ := guestCPU()
		c.t.Run(s.name, func(t *testing.T) {
			s.run(c.in(t))
			after, _ := guestCPU()
			t.Logf("guest processor time busy during %s: %.0f s", s.name, after-before)
		})
	}
	c.cpuReport()
}

func TestProcCPUReadsAStatLine(t *testing.T) {
	// A name with a space and a parenthesis, as programs may choose.
	line := "4242 (csi-pro (x)) S 1 4242 4242 0 -1 4194560 5000 0 0 0 250 50 7 3 20 0 12 0 300 800000000 9000 18446744073709551615"
	name, secs, ok := procCPU(line)
	if !ok || name != "csi-pro (x)" || secs != 3.1 {
		t.Fatalf("procCPU = %q, %v, %v; want csi-pro (x), 3.1 s", name, secs, ok)
	}
	if _, _, ok := procCPU("4242 broken"); ok {
		t.Fatal("a line without a name parsed")
	}
}
