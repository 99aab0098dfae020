package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h.
const fsImmutableFL = 0x10

// setImmutable sets or clears FS_IMMUTABLE_FL on the server's side of a
// file: nobody, root over NFS included, can unlink it while it is set.
func setImmutable(t *testing.T, p string, on bool) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Fatalf("get flags of %s: %v", p, err)
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags)); err != nil {
		t.Fatalf("set flags of %s: %v", p, err)
	}
}

// cpuTicks returns this process's user + system time in clock ticks.
func cpuTicks(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var u, s int64
	fmt.Sscan(f[11], &u)
	fmt.Sscan(f[12], &s)
	return u + s
}

// countBelow counts the entries below dir on the server's side.
func countBelow(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != dir {
			n++
		}
		return nil
	})
	return n
}

// TestPurgeSkipsStuckEntriesAndBacksOff: three
// deleted volumes each holding one immutable file, with two purge workers.
// The purges remove everything else, do not spin (CPU measured over 5 s),
// do not keep a fourth volume from being purged, and finish on their own
// once the flags are cleared. Before, each stuck purge looped at full CPU
// holding a worker.
func TestPurgeSkipsStuckEntriesAndBacksOff(t *testing.T) {
	c := start(t, func(cfg *config.Config) { cfg.PurgeWorkers = 2 })
	vc := lab.RWX("nfsvers=4.2")
	for i := 0; i < 4; i++ {
		name := fmt.Sprintf("pvc-stuck-%d", i)
		v := c.Create(t, name, params("onDelete", "delete"), vc)
		for j := 0; j < 3; j++ {
			sub := onExport(filepath.Join(name, fmt.Sprint("d", j)))
			os.MkdirAll(sub, 0o755)
			for k := 0; k < 50; k++ {
				os.WriteFile(filepath.Join(sub, fmt.Sprint("f", k)), []byte("x"), 0o644)
			}
		}
		if i < 3 { // pvc-stuck-3 has no obstacle
			p := onExport(filepath.Join(name, "d1", "immutable"))
			os.WriteFile(p, []byte("x"), 0o644)
			setImmutable(t, p, true)
		}
		c.Delete(t, v)
	}
	t.Cleanup(func() { // whatever happens, leave nothing immutable behind
		q, _ := filepath.Glob(onExport(".nfsdir/trash/*/d1/immutable"))
		for _, f := range q {
			setImmutable(t, f, false)
		}
	})
	trash := onExport(".nfsdir/trash")
	// Everything but the immutable files and their directories goes.
	deadline := time.Now().Add(60 * time.Second)
	for countBelow(trash) > 3*3 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := countBelow(trash); n != 3*3 {
		t.Fatalf("trash holds %d entries, want 9 (3 volumes x entry, d1, immutable)", n)
	}
	before := cpuTicks(t)
	time.Sleep(5 * time.Second)
	cpu := float64(cpuTicks(t)-before) / 100 / 5
	immutable, _ := filepath.Glob(onExport(".nfsdir/trash/*/d1/immutable"))
	t.Logf("stuck purges: %.0f%% of a CPU over 5 s; %d entries left in the trash (%d immutable files)", 100*cpu, countBelow(trash), len(immutable))
	if cpu > 0.2 {
		t.Errorf("stuck purges use %.0f%% of a CPU", 100*cpu)
	}
	if len(immutable) != 3 {
		t.Fatalf("found %d immutable files in the trash, want 3", len(immutable))
	}
	for _, p := range immutable {
		setImmutable(t, p, false)
	}
	start := time.Now()
	deadline = time.Now().Add(60 * time.Second)
	for countBelow(trash) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := countBelow(trash); n != 0 {
		t.Fatalf("trash still holds %d entries 60 s after the flags were cleared", n)
	}
	t.Logf("trash empty %s after the flags were cleared, without a restart", time.Since(start).Round(time.Second))
}

// TestPurgeOfADeepChainHoldsFewDescriptors: a tenant
// leaves a chain of 10,000 nested directories (a file at each level) in its
// volume: far deeper than PATH_MAX allows a path to name, and than the
// 16 levels the purge descends before it moves the rest up. The purge
// removes it with a bounded number of open descriptors and bounded
// memory; before, it held one descriptor per level.
func TestPurgeOfADeepChainHoldsFewDescriptors(t *testing.T) {
	const depth = 10000
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.2")
	v := c.Create(t, "pvc-deep-chain", params("onDelete", "delete"), vc)
	fd, err := unix.Open(onExport("pvc-deep-chain"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ { // on the server's side, one level at a time
		unix.Mkdirat(fd, "d", 0o755)
		if f, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY, 0o644); err == nil {
			unix.Close(f)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = next
	}
	unix.Close(fd)
	baseFDs, baseRSS := lab.OpenFDs("self"), lab.SelfStatus("VmRSS")
	start := time.Now()
	c.Delete(t, v)
	var peakFDs int
	var peakRSS int64
	deadline := time.Now().Add(10 * time.Minute)
	for {
		peakFDs = max(peakFDs, lab.OpenFDs("self"))
		peakRSS = max(peakRSS, lab.SelfStatus("VmRSS"))
		if ents, _ := os.ReadDir(onExport(".nfsdir/trash")); len(ents) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deep chain was not purged within 10 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("purge of a %d-deep chain (%d entries): %s; open descriptors at most %d above the %d before; RSS at most %d KiB above the %d KiB before",
		depth, 2*depth, time.Since(start).Round(100*time.Millisecond), peakFDs-baseFDs, baseFDs, peakRSS-baseRSS, baseRSS)
	if peakFDs-baseFDs > 64 {
		t.Errorf("the purge held %d descriptors; at most 64 expected", peakFDs-baseFDs)
	}
}
