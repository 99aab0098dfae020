// Package report turns what `make bench` and `make bench-bound` measure
// into the tables of docs/benchmarks.md. The bench programs print each
// measurement as one line ("BENCH-ROW" and its JSON); this package reads
// those lines out of a run's log, keeps the runs in one results file, and
// renders each run as a section of the page between markers of its own,
// one table per measure. A test renders the results file again and
// compares it with the page, so the tables cannot be edited by hand.
package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
)

// RowPrefix starts the line a bench program prints for each measurement.
const RowPrefix = "BENCH-ROW "

// GuestPrefix starts the line that describes the lab guest a run used.
const GuestPrefix = "BENCH-GUEST "

// Column kinds a measurement is commonly compared with.
const (
	Incumbent = "csi-driver-nfs's method"
	Bare      = "the bare operation"
	NoOp      = "a call that does nothing"
)

// A Base is what nfsdir's time is compared with: Kind names its column in
// the table (Incumbent, Bare, NoOp or another case of nfsdir), What says
// what ran.
type Base struct {
	Kind    string  `json:"kind"`
	What    string  `json:"what"`
	Seconds float64 `json:"seconds"`
}

// A Row is one measurement: nfsdir's time for one case of a measure and
// what it is compared with.
type Row struct {
	Measure string  `json:"measure"`
	Case    string  `json:"case"`
	Seconds float64 `json:"seconds"`
	// Note is shown beside nfsdir's time (a page's time, the CPU used).
	Note    string `json:"note,omitempty"`
	Against []Base `json:"against,omitempty"`
	// Calls compares NFS calls per operation.
	Calls string `json:"calls,omitempty"`
}

// Line returns the log line of r.
func (r Row) Line() string {
	b, _ := json.Marshal(r)
	return RowPrefix + string(b)
}

// A Run is one `make bench` or `make bench-bound`: where and when it
// ran, and what it measured.
type Run struct {
	// Command is the make command; a later run of it replaces this one.
	Command string `json:"command"`
	Args    string `json:"args,omitempty"`
	Date    string `json:"date"`
	Commit  string `json:"commit"`
	Machine string `json:"machine"`
	Guest   string `json:"guest"`
	Rows    []Row  `json:"rows"`
}

// Results are the runs the page shows, in the page's order.
type Results struct {
	Runs []Run `json:"runs"`
}

// Parse reads the rows and the guest's description out of a run's log.
// Lines may carry a prefix (a test's file and line) before the marker.
func Parse(log io.Reader) (rows []Row, guest string, err error) {
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if i := strings.Index(l, GuestPrefix); i >= 0 {
			guest = strings.TrimSpace(l[i+len(GuestPrefix):])
			continue
		}
		i := strings.Index(l, RowPrefix)
		if i < 0 {
			continue
		}
		var r Row
		if err := json.Unmarshal([]byte(l[i+len(RowPrefix):]), &r); err != nil {
			return nil, "", fmt.Errorf("line %d: %v", n, err)
		}
		if r.Measure == "" || r.Case == "" || r.Seconds <= 0 || math.IsInf(r.Seconds, 0) || math.IsNaN(r.Seconds) {
			return nil, "", fmt.Errorf("line %d: a row needs a measure, a case and a time", n)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, "", err
	}
	if len(rows) == 0 {
		return nil, "", fmt.Errorf("no %q lines: the run measured nothing", strings.TrimSpace(RowPrefix))
	}
	return rows, guest, nil
}

// Put replaces the run of the same command, or adds it at the end.
func (res *Results) Put(r Run) {
	for i := range res.Runs {
		if res.Runs[i].Command == r.Command {
			res.Runs[i] = r
			return
		}
	}
	res.Runs = append(res.Runs, r)
}
