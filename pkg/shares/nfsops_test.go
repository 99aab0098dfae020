package shares

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/mountopts"
)

// statsOf writes what /proc/self/mountstats would list for the mounts
// given (mount point: LOOKUPs sent) to a file and points mountStats at it.
func statsOf(t *testing.T, lookups map[string]int) {
	t.Helper()
	var text string
	for mp, n := range lookups {
		text += fmt.Sprintf("device h:/x mounted on %s with fstype nfs4 statvers=1.1\n\tper-op statistics\n\t      LOOKUP: %d %d 0 10 20 1 %d 3 0\n", mp, n, n, 2*n)
	}
	p := filepath.Join(t.TempDir(), "mountstats")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	old := mountStats
	mountStats = p
	t.Cleanup(func() { mountStats = old })
}

// TestNFSOpsCountsTheSetsOwnMountsByShareAndUse: the operations of the
// Set's mounts are summed by share, use and operation; other mounts of the
// namespace are left out.
func TestNFSOpsCountsTheSetsOwnMountsByShareAndUse(t *testing.T) {
	s, _, e, _ := setup(t, 1)
	if got := s.NFSOps(); got != nil {
		t.Errorf("before any mount: %+v", got)
	}
	create(t, s, e, mountopts.Options{"nfsvers=4.1"}, "pvc-1")
	create(t, s, e, mountopts.Options{"nfsvers=4.2"}, "pvc-2") // a second class: another main mount of the share
	lookups := map[string]int{"/elsewhere": 99}
	n := 0
	for mp, pt := range s.mounts.MountPoints() {
		n++
		lookups[mp] = map[string]int{"main": 10, "purge": 1000}[pt.Use] + n
	}
	statsOf(t, lookups)
	want := map[string]int{}
	for mp, pt := range s.mounts.MountPoints() {
		want[pt.Use] += lookups[mp]
	}
	got := s.NFSOps()
	if len(got) != 2 || len(want) != 2 {
		t.Fatalf("NFSOps = %+v, want %v", got, want)
	}
	for i, use := range []string{"main", "purge"} {
		if g := got[i]; g.Share != e.String() || g.Use != use || g.Op != "LOOKUP" || g.Ops != uint64(want[use]) || g.RTTMillis != uint64(2*want[use]) {
			t.Errorf("NFSOps[%d] = %+v, want %d LOOKUPs of %s's %s mounts", i, g, want[use], e, use)
		}
	}
}

// TestNFSOpsNeverWaitsForAReadingThatDoesNotEnd: a reading that hangs
// (here a FIFO nobody writes) is waited for no longer than
// mountStatsWait; the figures read last are reported meanwhile, and
// there is never more than one reading in flight.
func TestNFSOpsNeverWaitsForAReadingThatDoesNotEnd(t *testing.T) {
	s, _, e, _ := setup(t, 0)
	create(t, s, e, nil, "pvc-1")
	var mp string
	for p := range s.mounts.MountPoints() {
		mp = p
	}
	statsOf(t, map[string]int{mp: 7})
	if got := s.NFSOps(); len(got) != 1 || got[0].Ops != 7 {
		t.Fatalf("NFSOps = %+v", got)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	mountStats, mountStatsWait = fifo, 100*time.Millisecond
	t.Cleanup(func() { mountStatsWait = 5 * time.Second })
	for range 3 {
		t0 := time.Now()
		got := s.NFSOps()
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("NFSOps took %s", d)
		}
		if len(got) != 1 || got[0].Ops != 7 {
			t.Errorf("during a hung reading: %+v, want the last figures", got)
		}
	}
	// Release the one reading in flight: it ends with what was written.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(w, "device h:/x mounted on %s with fstype nfs4\n\tper-op statistics\n\tLOOKUP: 8 8 0 0 0 0 0 0 0\n", mp)
	w.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if got := s.NFSOps(); len(got) == 1 && got[0].Ops == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reading released never reported: %+v", s.NFSOps())
		}
	}
}

// TestNFSOpsWarnsOnceOfTheSameFailure: an unreadable mountStats is
// logged once, not at every scrape (Prometheus scrapes every few
// seconds), again when the failure changes or after warnAgainAfter, and
// once more when it is readable again.
func TestNFSOpsWarnsOnceOfTheSameFailure(t *testing.T) {
	s, _, e, _ := setup(t, 0)
	create(t, s, e, nil, "pvc-1")
	var logged []string
	old := warnf
	warnf = func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) }
	t.Cleanup(func() { warnf = old })
	var mp string
	for p := range s.mounts.MountPoints() {
		mp = p
	}
	statsOf(t, map[string]int{mp: 7})
	good := mountStats
	mountStats = filepath.Join(t.TempDir(), "missing")
	for range 5 {
		s.NFSOps()
	}
	if len(logged) != 1 {
		t.Fatalf("5 scrapes of an unreadable file logged %d warnings, want 1: %q", len(logged), logged)
	}
	mountStats = t.TempDir() // a directory: another failure
	s.NFSOps()
	s.NFSOps()
	if len(logged) != 2 {
		t.Fatalf("a new failure logged %d warnings in all, want 2: %q", len(logged), logged)
	}
	s.ops.warned = s.ops.warned.Add(-warnAgainAfter - time.Second)
	s.NFSOps()
	if len(logged) != 3 {
		t.Fatalf("the same failure after %s logged %d warnings in all, want 3: %q", warnAgainAfter, len(logged), logged)
	}
	mountStats = good
	if got := s.NFSOps(); len(got) != 1 || got[0].Ops != 7 {
		t.Fatalf("readable again: %+v", got)
	}
	s.NFSOps()
	if len(logged) != 4 || !strings.Contains(logged[3], "again") {
		t.Fatalf("readable again logged %q, want one line saying so", logged)
	}
}
