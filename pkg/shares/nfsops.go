package shares

import (
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/mounttable"
)

// NFSOps is what the kernel's NFS client counted of one operation sent
// through a Set's mounts of one share for one use (sharemount.MountPoint):
// an operator divides it by the CSI calls to see what each call costs the
// server, and its round-trip milliseconds by its count to see how fast the
// server answers, on the controller's own mounts.
type NFSOps struct {
	Share, Use, Op string
	mounttable.OpStats
}

// mountStats is where the kernel lists the NFS operations of each mount
// of this process's mount namespace.
var mountStats = "/proc/self/mountstats"

// maxMountStats bounds what one reading of mountStats keeps in memory:
// a node plugin's namespace lists every NFS mount of its host's pods.
const maxMountStats = 64 << 20

// mountStatsWait bounds how long NFSOps waits for a reading.
var mountStatsWait = 5 * time.Second

// opsReader reads mountStats one reading at a time: a reading that does
// not end (it never should: the kernel answers from its own counters,
// without asking a server) holds no more than itself, and the callers
// meanwhile get the last figures read.
type opsReader struct {
	mu      sync.Mutex
	reading chan struct{} // closed when the reading in flight ends; nil: none
	last    string
	failed  string    // the failure warned of last; "": the last reading went through
	warned  time.Time // when it was warned of
}

// warnAgainAfter is how long the same failure to read mountStats goes
// without a warning: Prometheus scrapes every few seconds, and a line
// each time would bury every other one.
const warnAgainAfter = 10 * time.Minute

// warnf logs a warning (klog.Warningf; tests count them).
var warnf = klog.Warningf

// note logs what the reading that just ended tells, with r.mu held: a
// failure once (again when it changes or after warnAgainAfter), and the
// first reading that goes through after one.
func (r *opsReader) note(msg string) {
	switch {
	case msg == "" && r.failed != "":
		warnf("NFS operation counts: %s can be read again", mountStats)
		r.failed = ""
	case msg != "" && (msg != r.failed || time.Since(r.warned) >= warnAgainAfter):
		warnf("NFS operation counts: %s (said once every %s while it lasts)", msg, warnAgainAfter)
		r.failed, r.warned = msg, time.Now()
	}
}

// read returns mountStats as it is now, or, when reading it takes longer
// than mountStatsWait, as it was last read.
func (r *opsReader) read() string {
	r.mu.Lock()
	if r.reading == nil {
		done := make(chan struct{})
		r.reading = done
		go func() {
			text, err := readBounded(mountStats, maxMountStats)
			r.mu.Lock()
			if err != nil {
				r.note(err.Error())
			} else {
				r.last = text
				r.note("")
			}
			r.reading = nil
			r.mu.Unlock()
			close(done)
		}()
	}
	done := r.reading
	r.mu.Unlock()
	select {
	case <-done:
		r.mu.Lock()
	case <-time.After(mountStatsWait):
		r.mu.Lock()
		if r.reading == done { // still the same reading
			r.note(fmt.Sprintf("reading %s takes longer than %s; reporting the last figures", mountStats, mountStatsWait))
		}
	}
	defer r.mu.Unlock()
	return r.last
}

// readBounded reads at most limit bytes of the file at p.
func readBounded(p string, limit int64) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit))
	return string(b), err
}

// NFSOps returns the NFS operations sent through the Set's mounts so far,
// by share, use and operation, in that order: the kernel's counts since
// each mount was made (a mount made again after it went stale counts from
// zero, as a Prometheus counter may).
func (s *Set) NFSOps() []NFSOps {
	points := s.mounts.MountPoints()
	var stats map[string]map[string]mounttable.OpStats
	if len(points) > 0 { // a node plugin with no share mounted reads nothing
		stats = mounttable.ParseStats(s.ops.read(), func(mp string) bool { _, ok := points[mp]; return ok })
	}
	sums := map[[3]string]mounttable.OpStats{}
	for mp, ops := range stats {
		pt := points[mp]
		for op, st := range ops {
			k := [3]string{pt.Share.String(), pt.Use, op}
			sum := sums[k]
			sum.Add(st)
			sums[k] = sum
		}
	}
	if len(sums) == 0 {
		return nil
	}
	out := make([]NFSOps, 0, len(sums))
	for k, st := range sums {
		out = append(out, NFSOps{Share: k[0], Use: k[1], Op: k[2], OpStats: st})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Share != b.Share {
			return a.Share < b.Share
		}
		if a.Use != b.Use {
			return a.Use < b.Use
		}
		return a.Op < b.Op
	})
	return out
}
