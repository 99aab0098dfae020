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

// TestPurgeFDsBoundedAtAnyDepth: a 3,000-deep chain is purged with a few
// descriptors open, not one per level.
func TestPurgeFDsBoundedAtAnyDepth(t *testing.T) {
	dir, a := newShare(t)
	entry := filepath.Join(dir, trashDir, "deep.aaaaaaaa")
	os.Mkdir(entry, 0o755)
	chain(t, entry, 3000)
	base := openFDs()
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
	p := NewPurger(2)
	p.Kick(context.Background(), dir, a)
	p.Wait()
	close(stop)
	if _, err := os.Lstat(entry); err == nil {
		t.Fatal("the deep entry is still in the trash")
	}
	extra := int(peak.Load()) - base
	t.Logf("descriptors during the purge of a 3,000-deep chain: %d above the %d before", extra, base)
	if extra > 64 {
		t.Errorf("the purge held %d descriptors", extra)
	}
}
