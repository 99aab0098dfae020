package usage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// reference counts a tree the simple way: every inode once, by number.
func reference(t *testing.T, root string) (bytes, inodes int64) {
	t.Helper()
	seen := map[uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			bytes += st.Blocks * 512
			inodes++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bytes, inodes
}

func count(t *testing.T, w Walker, root string) Result {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	res, err := w.Count(context.Background(), fd)
	if err != nil {
		t.Fatalf("Count(%s): %v", root, err)
	}
	return res
}

func write(t *testing.T, p string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Repeat("x", n)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCountsEveryKindOfEntryOnce(t *testing.T) {
	root := t.TempDir()
	write(t, root+"/a/file", 100000)
	write(t, root+"/a/b/small", 10)
	if err := os.Link(root+"/a/file", root+"/a/b/link"); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(root+"/a/file", root+"/link2"); err != nil {
		t.Fatal(err)
	}
	// A sparse file: 1 GiB long, one block written.
	f, err := os.Create(root + "/sparse")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte("x"), 1<<30)
	f.Close()
	if err := unix.Mkfifo(root+"/a/fifo", 0o644); err != nil {
		t.Fatal(err)
	}
	// A symlink to a big tree outside: counted as a link, never followed.
	outside := t.TempDir()
	write(t, outside+"/big", 1<<20)
	if err := os.Symlink(outside, root+"/a/out"); err != nil {
		t.Fatal(err)
	}
	wantB, wantI := reference(t, root)
	res := count(t, DefaultWalker, root)
	if res.Bytes != wantB || res.Inodes != wantI {
		t.Fatalf("Count = %d bytes, %d inodes; want %d, %d", res.Bytes, res.Inodes, wantB, wantI)
	}
	if res.Bytes > 1<<20 {
		t.Fatalf("Count = %d bytes: the sparse file's hole or the symlink's target was counted", res.Bytes)
	}
	if res.Entries != 9 {
		t.Fatalf("looked at %d entries, want 9", res.Entries)
	}
}

// A tenant's chain far deeper than the walk may hold open is counted
// exactly with at most MaxOpen directories open.
func TestDeepChainHoldsBoundedDescriptors(t *testing.T) {
	root := t.TempDir()
	p := root
	for i := range 300 {
		p = filepath.Join(p, "d")
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			for j := range 20 {
				write(t, filepath.Join(p, fmt.Sprint("f", j)), 5000)
			}
			if err := os.Mkdir(filepath.Join(p, "side"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	wantB, wantI := reference(t, root)
	w := Walker{MaxOpen: 4, Batch: 3}
	res := count(t, w, root)
	if res.Bytes != wantB || res.Inodes != wantI {
		t.Fatalf("Count = %d bytes, %d inodes; want %d, %d", res.Bytes, res.Inodes, wantB, wantI)
	}
	if res.MaxOpen > 4 {
		t.Fatalf("held %d directories open, more than 4", res.MaxOpen)
	}
	if res.Reopened < 290 {
		t.Fatalf("reopened %d directories; the chain of 300 should have been let go and reopened", res.Reopened)
	}
}

// stepper runs a function at the n-th entry the walk looks at.
type stepper struct {
	n  int
	at int
	fn func()
}

func (s *stepper) Wait(ctx context.Context, n int) error {
	s.n += n
	if s.n == s.at {
		s.fn()
	}
	return nil
}

// A directory moved elsewhere while the walk had let its parent go
// abandons the count rather than counting another tree.
func TestMovedDirectoryAbandonsTheCount(t *testing.T) {
	root := t.TempDir()
	deep := root + "/a/b/c/d/e"
	write(t, deep+"/f", 10)
	if err := os.Mkdir(root+"/elsewhere", 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var moved error
	s := &stepper{fn: func() { moved = os.Rename(root+"/a/b/c/d", root+"/elsewhere/d") }}
	// Entries in walk order: a or elsewhere first; find the step at
	// which the walk stands on "f" by a dry run.
	dry := &stepper{}
	Walker{MaxOpen: 2, Batch: 1, Limit: dry}.Count(context.Background(), fd)
	for s.at = 1; s.at <= dry.n; s.at++ {
		s.n, moved = 0, nil
		os.Rename(root+"/elsewhere/d", root+"/a/b/c/d")
		_, err := Walker{MaxOpen: 2, Batch: 1, Limit: s}.Count(context.Background(), fd)
		if moved == nil && errors.Is(err, ErrChanged) {
			return
		}
	}
	t.Fatal("moving a directory out from under a let-go parent never abandoned the count")
}

func TestCountStopsWithItsContext(t *testing.T) {
	root := t.TempDir()
	for i := range 50 {
		write(t, filepath.Join(root, fmt.Sprint(i)), 1)
	}
	fd, _ := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer unix.Close(fd)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Walker{MaxOpen: 4, Batch: 8, Limit: &Rate{PerSecond: 10, Burst: 1}}.Count(ctx, fd)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("Count = %v after %s; want the deadline, at once", err, time.Since(start))
	}
}

func TestRatePaces(t *testing.T) {
	r := &Rate{PerSecond: 1000, Burst: 10}
	start := time.Now()
	for range 210 {
		if err := r.Wait(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("210 entries at 1000/s with a burst of 10 took %s, want ≥ 200 ms", d)
	}
}
