package treecopy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// heapSampler is a Limiter that measures the live heap every so many
// entries of a copy (after a collection, so garbage does not count).
type heapSampler struct {
	every, seen int
	peak        uint64
}

func (h *heapSampler) Wait(_ context.Context, n int) error {
	h.seen += n
	if h.seen%h.every == 0 {
		h.peak = max(h.peak, liveHeap())
	}
	return nil
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// deepChain makes depth directories below root, one in the other, each
// with a name of n bytes, and returns the deepest, open (by descriptors
// alone: the path may be longer than PATH_MAX).
func deepChain(t *testing.T, root string, depth, n int, letter string) int {
	t.Helper()
	fd := openDir(t, root)
	for i := range depth {
		name := fmt.Sprintf("%02d", i) + strings.Repeat(letter, n-2)
		must(t, unix.Mkdirat(fd, name, 0o755))
		fd = openSubdir(t, fd, name)
	}
	return fd
}

func openSubdir(t *testing.T, dirfd int, name string) int {
	t.Helper()
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func createAt(t *testing.T, dirfd int, name, data string) {
	t.Helper()
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	must(t, err)
	defer unix.Close(fd)
	_, err = unix.Write(fd, []byte(data))
	must(t, err)
}

// The table of hard-linked files waiting for their other names costs
// memory by their number and names, not by how deep they are: 3,000 of
// them 15 directories of 250-byte names down, each with its other name
// outside the copied tree (so that all wait to the end), keep the live
// heap within a megabyte or two, and the table within its byte budget.
func TestHardLinkTableIsBoundedInBytesNotByDepth(t *testing.T) {
	outside, src, dst := t.TempDir(), t.TempDir(), t.TempDir()
	deep, out := deepChain(t, src, 15, 250, "d"), openDir(t, outside)
	for i := range 3000 {
		name := fmt.Sprint("f", i)
		createAt(t, deep, name, "")
		must(t, unix.Linkat(deep, name, out, name, 0))
	}
	c := Default
	c.Workers = 2
	h := &heapSampler{every: 250}
	c.Limit = h
	base := liveHeap()
	res := copyTree(t, c, src, dst, true)
	if res.Files != 3000 || res.Unlinked != 0 {
		t.Fatalf("result %+v: want 3000 files, all remembered", res)
	}
	grew := int64(h.peak) - int64(base)
	t.Logf("live heap grew by at most %d bytes; the table held %d", grew, res.LinkBytes)
	if res.LinkBytes <= 0 || res.LinkBytes > c.MaxLinkBytes {
		t.Errorf("the table held %d bytes, budget %d", res.LinkBytes, c.MaxLinkBytes)
	}
	if grew > 2<<20 {
		t.Errorf("the live heap grew by %d bytes while 3,000 hard-linked files waited; want at most 2 MiB", grew)
	}
}

// Past its byte budget the table remembers no more files: further names
// of hard-linked files become copies of their own, counted, and what it
// held never passes the budget.
func TestHardLinkTableKeepsToItsBudget(t *testing.T) {
	outside, src, dst := t.TempDir(), t.TempDir(), t.TempDir()
	for i := range 100 {
		p := filepath.Join(src, fmt.Sprint("f", i))
		must(t, os.WriteFile(p, []byte("x"), 0o644))
		must(t, os.Link(p, filepath.Join(outside, fmt.Sprint("f", i))))
	}
	c := Default
	c.MaxLinkBytes = 2000
	res := copyTree(t, c, src, dst, true)
	if res.Files != 100 || res.Unlinked == 0 || res.LinkBytes > 2000 {
		t.Errorf("result %+v: want 100 files, some not remembered, at most 2000 bytes held", res)
	}
}

// A hard link is made however deep its first name is: the two names of a
// file below a chain longer than PATH_MAX are linked in the copy.
func TestHardLinksBelowALongPath(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	deep := deepChain(t, src, 20, 250, "p") // 5,020 bytes of path
	must(t, unix.Mkdirat(deep, "a", 0o755))
	must(t, unix.Mkdirat(deep, "b", 0o755))
	createAt(t, openSubdir(t, deep, "a"), "f", "data")
	must(t, unix.Linkat(openSubdir(t, deep, "a"), "f", openSubdir(t, deep, "b"), "f", 0))
	c := Default
	c.MaxOpen = 4
	res := copyTree(t, c, src, dst, true)
	if res.Links != 1 || res.Files != 1 {
		t.Fatalf("result %+v: want one file and one link", res)
	}
	copied := openDir(t, dst)
	for i := range 20 {
		copied = openSubdir(t, copied, fmt.Sprintf("%02d", i)+strings.Repeat("p", 248))
	}
	var st unix.Stat_t
	must(t, unix.Fstatat(openSubdir(t, copied, "b"), "f", &st, unix.AT_SYMLINK_NOFOLLOW))
	if st.Nlink != 2 {
		t.Errorf("the copy of the file has %d names, want 2", st.Nlink)
	}
}
