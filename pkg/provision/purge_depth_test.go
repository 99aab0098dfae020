package provision

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// chain makes a chain of depth nested directories named "d" below dir,
// with a file at every level, without ever using a long path.
func chain(t testing.TB, dir string, depth int) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < depth; i++ {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
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
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

// purgeFDs purges the trash of the share at dir with workers and returns
// the most descriptors open above those open before, and those.
func purgeFDs(dir string, a *Area, workers int) (extra, base int) {
	base = openFDs()
	var peak atomic.Int64
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n := int64(openFDs()); n > peak.Load() {
				peak.Store(n)
			}
			time.Sleep(200 * time.Microsecond)
		}
	}()
	p := NewPurger(workers)
	p.Kick(context.Background(), dir, a)
	p.Wait()
	close(stop)
	return int(peak.Load()) - base, base
}

// TestPurgeFDsBoundedAtAnyDepth: a 3,000-deep chain is purged with a few
// descriptors open, not one per level.
func TestPurgeFDsBoundedAtAnyDepth(t *testing.T) {
	dir, a := newShare(t)
	entry := filepath.Join(dir, trashDir, "deep.aaaaaaaa")
	os.Mkdir(entry, 0o755)
	chain(t, entry, 3000)
	extra, base := purgeFDs(dir, a, 2)
	if _, err := os.Lstat(entry); err == nil {
		t.Fatal("the deep entry is still in the trash")
	}
	t.Logf("descriptors during the purge of a 3,000-deep chain: %d above the %d before", extra, base)
	if extra > 64 {
		t.Errorf("the purge held %d descriptors", extra)
	}
}

// TestPurgeFDsBoundedWithBranches: side-by-side deep chains, removed in
// concurrent branches, hold at most maxPurgeDepth+1 descriptors per branch.
func TestPurgeFDsBoundedWithBranches(t *testing.T) {
	dir, a := newShare(t)
	entry := filepath.Join(dir, trashDir, "wide.aaaaaaaa")
	os.Mkdir(entry, 0o755)
	for i := 0; i < 2*maxBranches; i++ {
		sub := filepath.Join(entry, string(rune('a'+i)))
		os.Mkdir(sub, 0o755)
		chain(t, sub, 200)
	}
	extra, base := purgeFDs(dir, a, 1)
	if _, err := os.Lstat(entry); err == nil {
		t.Fatal("the entry is still in the trash")
	}
	limit := maxBranches*(maxPurgeDepth+1) + 4
	t.Logf("descriptors during the purge of %d chains 200 deep: %d above the %d before (limit %d)", 2*maxBranches, extra, base, limit)
	if extra > limit {
		t.Errorf("the purge held %d descriptors", extra)
	}
}
