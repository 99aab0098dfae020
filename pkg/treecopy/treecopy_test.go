package treecopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treecopy/treecopytest"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openDir(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

func copyTree(t *testing.T, c Copier, src, dst string, rootAttrs bool) Result {
	t.Helper()
	res, err := c.Copy(context.Background(), openDir(t, src), openDir(t, dst), rootAttrs)
	if err != nil {
		t.Fatalf("Copy: %v", err)
	}
	return res
}

func write(t *testing.T, p string, data string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte(data), 0o644))
}

// A tree holding every kind of entry a tenant can make: the copy has the
// same entries, data, holes, links, owners, modes, times and extended
// attributes; the symlinks pointing out are copied, not followed; the FIFO
// is made, never opened; a socket is left out.
func TestCopyKeepsEveryKindAndAttribute(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "secret"), "outside")
	write(t, filepath.Join(src, "plain"), "hello")
	write(t, filepath.Join(src, "empty"), "")
	write(t, filepath.Join(src, "a/b/c/deep"), strings.Repeat("x", 300000))
	// Sparse: 1 MiB hole, 4 KiB data, 8 MiB hole at the end.
	f, err := os.Create(filepath.Join(src, "sparse"))
	must(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("s"), 4096), 1<<20)
	must(t, err)
	must(t, f.Truncate(9<<20+4096))
	f.Close()
	must(t, os.Symlink("/etc", filepath.Join(src, "to-etc")))
	must(t, os.Symlink(outside, filepath.Join(src, "a/to-outside")))
	must(t, os.Symlink("nowhere/at/all", filepath.Join(src, "dangling")))
	must(t, unix.Mkfifo(filepath.Join(src, "a/fifo"), 0o640))
	must(t, os.Link(filepath.Join(src, "plain"), filepath.Join(src, "a/b/plain-again")))
	must(t, os.Link(filepath.Join(src, "plain"), filepath.Join(src, "a/plain-third")))
	write(t, filepath.Join(src, "a/pair-1"), "pair")
	must(t, os.Link(filepath.Join(src, "a/pair-1"), filepath.Join(src, "pair-2")))
	// Owners, modes (setgid and sticky too), times.
	must(t, os.Chown(filepath.Join(src, "plain"), 1234, 5678))
	must(t, os.Lchown(filepath.Join(src, "to-etc"), 4321, 8765))
	must(t, os.Chown(filepath.Join(src, "a/b"), 2000, 3000))
	must(t, os.Chmod(filepath.Join(src, "a/b"), 0o2750))
	must(t, os.Chmod(filepath.Join(src, "a"), 0o1777))
	must(t, os.Chmod(filepath.Join(src, "a/b/c"), 0o500)) // read-only: filled before its mode
	must(t, os.Chmod(filepath.Join(src, "empty"), 0o4755))
	must(t, unix.Setxattr(filepath.Join(src, "plain"), "user.origin", []byte("tenant"), 0))
	must(t, unix.Setxattr(filepath.Join(src, "a"), "user.dir", []byte("d"), 0))
	old := time.Date(2001, 2, 3, 4, 5, 6, 7000, time.UTC)
	for _, p := range []string{"plain", "a/b/c", "a/b", "a", "sparse"} {
		must(t, os.Chtimes(filepath.Join(src, p), old, old))
	}
	must(t, unix.Lutimes(filepath.Join(src, "dangling"), []unix.Timeval{unix.NsecToTimeval(old.UnixNano()), unix.NsecToTimeval(old.UnixNano())}))
	// A socket, which is no data.
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	defer unix.Close(sock)
	must(t, unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(src, "sock")}))

	res := copyTree(t, Default, src, dst, true)
	treecopytest.Compare(t, src, dst, true, "sock")
	if _, err := os.Stat(filepath.Join(dst, "a/to-outside/secret")); err != nil {
		// The link is there, pointing out, as in the source.
		if l, _ := os.Readlink(filepath.Join(dst, "a/to-outside")); l != outside {
			t.Errorf("a/to-outside: %q", l)
		}
	}
	if res.Files != 5 || res.Links != 3 || res.Symlinks != 3 || res.FIFOs != 1 || res.Dirs != 3 || res.Skipped != 1 {
		t.Errorf("result %+v", res)
	}
	if n := res.ByMethod[Clone] + res.ByMethod[CopyRange] + res.ByMethod[ReadWrite]; n != res.Files {
		t.Errorf("methods %v add up to %d, want %d files", res.ByMethod, n, res.Files)
	}
	if res.Bytes != 5+4+300000+4096 {
		t.Errorf("copied %d bytes of data; holes must not count", res.Bytes)
	}
	t.Logf("%+v", res)
}

// Without rootAttrs the copy's root keeps its own owner and mode.
func TestCopyLeavesTheRootAloneUnlessAsked(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must(t, os.Chmod(src, 0o700))
	must(t, os.Chmod(dst, 0o755))
	write(t, filepath.Join(src, "f"), "x")
	copyTree(t, Default, src, dst, false)
	if st, _ := os.Stat(dst); st.Mode().Perm() != 0o755 {
		t.Errorf("root mode %v", st.Mode())
	}
	treecopytest.Compare(t, src, dst, false)
}

// A tenant's chain far deeper than the copy may hold open is copied
// exactly with at most MaxOpen directory pairs open; so is a wide
// directory read a few entries at a time.
func TestCopyOfADeepChainHoldsFewDescriptors(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	p := src
	for i := range 200 {
		p = filepath.Join(p, "d")
		must(t, os.Mkdir(p, 0o755))
		if i%40 == 0 {
			for j := range 30 {
				write(t, filepath.Join(p, fmt.Sprint("f", j)), fmt.Sprint(i, j))
			}
			must(t, os.Mkdir(filepath.Join(p, "side"), 0o700))
		}
	}
	fds := func() int { e, _ := os.ReadDir("/proc/self/fd"); return len(e) }
	sfd, dfd := openDir(t, src), openDir(t, dst)
	before := fds()
	c := Default
	c.MaxOpen, c.Batch, c.Workers = 4, 3, 2
	res, err := c.Copy(context.Background(), sfd, dfd, true)
	must(t, err)
	treecopytest.Compare(t, src, dst, true)
	if res.MaxOpen > 4 {
		t.Errorf("held %d directory pairs open, more than 4", res.MaxOpen)
	}
	if res.Reopened < 190 {
		t.Errorf("reopened %d directories; the chain of 200 should have been let go and reopened", res.Reopened)
	}
	if after := fds(); after != before {
		t.Errorf("%d descriptors open after the copy, %d before", after, before)
	}
}

// Past MaxLinkBytes, names of further hard-linked files become files of their
// own: the data is all there, memory stays bounded.
func TestCopyBeyondMaxLinkBytesCopiesTheData(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	// All first names in one directory, all second names in another:
	// three files wait for their second name at once.
	for i := range 3 {
		write(t, filepath.Join(src, "x", fmt.Sprint("a", i)), fmt.Sprint("data", i))
		must(t, os.MkdirAll(filepath.Join(src, "y"), 0o755))
		must(t, os.Link(filepath.Join(src, "x", fmt.Sprint("a", i)), filepath.Join(src, "y", fmt.Sprint("a", i))))
	}
	c := Default
	c.MaxLinkBytes = 400 // room for one file
	res := copyTree(t, c, src, dst, true)
	if res.Files+res.Links != 6 || res.Links < 1 || res.Unlinked < 2 {
		t.Errorf("result %+v", res)
	}
	for i := range 3 {
		for _, d := range []string{"x", "y"} {
			if b, err := os.ReadFile(filepath.Join(dst, d, fmt.Sprint("a", i))); err != nil || string(b) != fmt.Sprint("data", i) {
				t.Errorf("%s/a%d: %q %v", d, i, b, err)
			}
		}
	}
}

// A copy stops with its context, leaving no worker behind, and a copy
// into a directory that is not empty fails rather than mixing trees.
func TestCopyStopsAndRefusesToMix(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for i := range 200 {
		write(t, filepath.Join(src, fmt.Sprint("d", i%10), fmt.Sprint(i)), "x")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Default.Copy(ctx, openDir(t, src), openDir(t, dst), false); !errors.Is(err, context.Canceled) {
		t.Errorf("Copy with a cancelled context: %v", err)
	}
	dst2 := t.TempDir()
	write(t, filepath.Join(dst2, "d3", "x"), "other")
	if _, err := Default.Copy(context.Background(), openDir(t, src), openDir(t, dst2), false); !errors.Is(err, unix.EEXIST) {
		t.Errorf("Copy into a directory holding d3: %v", err)
	}
}

// A directory changed while the copy had let it go abandons the copy
// rather than skipping the wrong entries.
func TestChangedDirectoryAbandonsTheCopy(t *testing.T) {
	src := t.TempDir()
	deep := filepath.Join(src, "a/b/c/d")
	write(t, filepath.Join(deep, "f"), "x")
	write(t, filepath.Join(src, "a/z"), "later")
	abandoned := false
	for try := 0; try < 20 && !abandoned; try++ {
		dst := t.TempDir()
		c := Default
		c.MaxOpen, c.Batch, c.Workers = 2, 1, 1
		done := make(chan error, 1)
		stop := make(chan struct{})
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				os.WriteFile(filepath.Join(src, "a", fmt.Sprint("new", i%3)), nil, 0o644)
				os.Remove(filepath.Join(src, "a", fmt.Sprint("new", (i+1)%3)))
			}
		}()
		go func() {
			_, err := c.Copy(context.Background(), openDir(t, src), openDir(t, dst), false)
			done <- err
		}()
		err := <-done
		close(stop)
		abandoned = errors.Is(err, ErrChanged)
	}
	if !abandoned {
		t.Error("entries added and removed under a let-go directory never abandoned the copy")
	}
}

// Where the file system cannot point out holes (NFS before 4.2), blocks
// of zeros read from the source are left as holes in the copy, and the
// data is intact; holesKnown tells the two kinds of file system apart.
func TestZeroBlocksStayHoles(t *testing.T) {
	dir := t.TempDir()
	b := make([]byte, 64*blockSize+100)
	copy(b[3*blockSize:], "data in block 3")
	copy(b[40*blockSize+7:], "data in block 40")
	b[len(b)-1] = 'z'
	f, err := os.Create(filepath.Join(dir, "copy"))
	must(t, err)
	defer f.Close()
	n, err := writeAt(int(f.Fd()), b, 0, true)
	must(t, err)
	must(t, f.Truncate(int64(len(b))))
	got, _ := os.ReadFile(filepath.Join(dir, "copy"))
	if !bytes.Equal(got, b) {
		t.Fatal("the copy's data differs")
	}
	if n != 2*blockSize+100 {
		t.Errorf("wrote %d bytes for two blocks and a tail of data (%d)", n, 2*blockSize+100)
	}
	var st unix.Stat_t
	must(t, unix.Fstat(int(f.Fd()), &st))
	if st.Blocks*512 > 8*blockSize {
		t.Errorf("the copy allocates %d bytes: the zero blocks were written", st.Blocks*512)
	}
	if !holesKnown(int(f.Fd()), st.Size) {
		t.Error("ext4 points out holes, holesKnown says it does not")
	}
}

// countingLimiter lets everything through and counts what it was asked.
type countingLimiter struct{ n atomic.Int64 }

func (l *countingLimiter) Wait(ctx context.Context, n int) error {
	l.n.Add(int64(n))
	return ctx.Err()
}

// The limiter is asked once per entry, and the progress ends where the
// result does.
func TestCopyIsPacedAndFollowed(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for i := range 30 {
		write(t, filepath.Join(src, fmt.Sprint("d", i%4), fmt.Sprint(i)), strings.Repeat("p", i))
	}
	var lim countingLimiter
	var prog Progress
	c := Default
	c.Limit, c.Progress = &lim, &prog
	res := copyTree(t, c, src, dst, false)
	if lim.n.Load() != 34 || prog.Entries.Load() != 34 {
		t.Errorf("limiter asked for %d entries, progress saw %d; the tree has 34", lim.n.Load(), prog.Entries.Load())
	}
	if prog.Bytes.Load() != res.Bytes || res.Bytes != 435 {
		t.Errorf("progress %d bytes, result %d, want 435", prog.Bytes.Load(), res.Bytes)
	}
}
