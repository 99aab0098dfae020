package treewalk_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/treewalk/treeshapes"
	"github.com/nfsdir/nfsdir/pkg/usage"
)

func openDir(t *testing.T, p string) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// The usage count and the copy engine over every hostile shape, with
// bounds far below the shapes' depth and width: each looks at every name
// once, holds no more directories open than its bound, follows no
// symlink out of the tree, changes nothing outside it, and leaves no
// descriptor open. The copy holds the same names as its source.
func TestWalksOverHostileShapes(t *testing.T) {
	counter := usage.Walker{MaxOpen: 4, Batch: 64}
	copier := treecopy.Copier{MaxOpen: 4, Batch: 64, Workers: 2, Buffer: 64 << 10, MaxLinkBytes: 1 << 20}
	for _, shape := range treeshapes.All {
		t.Run(shape.Name, func(t *testing.T) {
			src, dst := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "dst")
			if err := os.Mkdir(src, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			outsideIntact, err := treeshapes.Outside(outside)
			if err != nil {
				t.Fatal(err)
			}
			entries, err := shape.Build(src, outside)
			if err != nil {
				t.Fatal(err)
			}
			srcfd, dstfd := openDir(t, src), openDir(t, dst)
			before := treeshapes.OpenFDs()

			counted, err := counter.Count(context.Background(), srcfd)
			if err != nil {
				t.Fatalf("count: %v", err)
			}
			if counted.Entries != int64(entries) || counted.MaxOpen > counter.MaxOpen {
				t.Errorf("the count looked at %d entries of %d, with %d directories open at most (bound %d)",
					counted.Entries, entries, counted.MaxOpen, counter.MaxOpen)
			}

			copied, err := copier.Copy(context.Background(), srcfd, dstfd, false)
			if err != nil {
				t.Fatalf("copy: %v", err)
			}
			if copied.MaxOpen > copier.MaxOpen {
				t.Errorf("the copy held %d directory pairs open, bound %d", copied.MaxOpen, copier.MaxOpen)
			}
			again, err := counter.Count(context.Background(), dstfd)
			if err != nil || again.Entries != int64(entries) {
				t.Errorf("the copy holds %d entries of %d (%v)", again.Entries, entries, err)
			}
			for _, name := range []string{"out-abs", "a/b/up", "a/loop"} {
				if st, err := os.Lstat(filepath.Join(dst, name)); err == nil && st.Mode()&os.ModeSymlink == 0 {
					t.Errorf("%s was copied as %v, not as a symlink", name, st.Mode())
				}
			}

			if now := treeshapes.OpenFDs(); now != before {
				t.Errorf("%d descriptors open after the walks, %d before", now, before)
			}
			if err := outsideIntact(); err != nil {
				t.Error(err)
			}
		})
	}
}
