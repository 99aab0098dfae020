package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/treecopy/treecopytest"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// hostileTree makes, on the server's side of dir, a tree of every kind of
// entry a tenant can make: data, a sparse file, hard links across
// directories, symlinks out of the share, a FIFO, odd owners and modes, a
// read-only directory, and a chain deeper than the copy holds open.
func hostileTree(t *testing.T, dir string) {
	t.Helper()
	w := func(p, data string) {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644))
	}
	w("plain", "hello")
	w("a/b/big", strings.Repeat("b", 3<<20))
	f, err := os.Create(filepath.Join(dir, "sparse"))
	must(t, err)
	_, err = f.WriteAt(bytes.Repeat([]byte("s"), 8192), 4<<20)
	must(t, err)
	must(t, f.Truncate(64<<20))
	f.Close()
	must(t, os.Link(filepath.Join(dir, "plain"), filepath.Join(dir, "a/b/plain-link")))
	must(t, os.Symlink("/", filepath.Join(dir, "a/to-root")))
	must(t, os.Symlink("../../..", filepath.Join(dir, "a/b/up")))
	must(t, unix.Mkfifo(filepath.Join(dir, "a/fifo"), 0o600))
	must(t, os.Chown(filepath.Join(dir, "plain"), 4242, 4343))
	must(t, os.Chmod(filepath.Join(dir, "a/b"), 0o2750))
	must(t, os.Chmod(filepath.Join(dir, "a"), 0o500))
	p := filepath.Join(dir, "deep")
	must(t, os.Mkdir(p, 0o755))
	for i := range 40 {
		p = filepath.Join(p, fmt.Sprint(i%10))
		must(t, os.Mkdir(p, 0o755))
	}
	w(filepath.Join(strings.TrimPrefix(p, dir), "bottom"), "bottom")
}

// TestTreeCopyOnRealNFS: the copy engine copies a hostile tree through an
// NFS mount of the share, byte for byte and attribute for attribute (as
// the server sees both trees), with the data copied on the server over
// NFSv4.2 (copy_file_range: COPY) and through the client over NFSv4.1,
// never following the symlinks out of the share, never blocking on the
// FIFO, and holding at most its bound of directories open.
func TestTreeCopyOnRealNFS(t *testing.T) {
	lab.Require(t)
	src := onExport("copy-src")
	must(t, os.Mkdir(src, 0o755))
	defer os.RemoveAll(src)
	hostileTree(t, src)
	for _, vers := range []string{"4.2", "4.1"} {
		t.Run("nfsvers="+vers, func(t *testing.T) {
			mnt := t.TempDir()
			lab.Sh(t, fmt.Sprintf("mount -t nfs -o nfsvers=%s %s:%s %s", vers, lab.Server(), lab.Export(), mnt))
			defer lab.Sh(t, "umount "+mnt)
			dst := onExport("copy-dst-" + vers)
			must(t, os.Mkdir(dst, 0o755))
			defer os.RemoveAll(dst)
			sfd, err := unix.Open(filepath.Join(mnt, "copy-src"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(t, err)
			defer unix.Close(sfd)
			dfd, err := unix.Open(filepath.Join(mnt, "copy-dst-"+vers), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(t, err)
			defer unix.Close(dfd)
			c := treecopy.Default
			c.MaxOpen = 8
			res, err := c.Copy(context.Background(), sfd, dfd, true)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			treecopytest.Compare(t, src, dst, true)
			if res.MaxOpen > 8 || res.Reopened == 0 {
				t.Errorf("held %d directory pairs open, reopened %d: the 40-deep chain must be let go", res.MaxOpen, res.Reopened)
			}
			if res.Bytes != 5+3<<20+8192+6 {
				t.Errorf("copied %d bytes of data; the sparse file's holes must not count", res.Bytes)
			}
			// Over 4.2 the server copies (COPY); over 4.1 the kernel
			// copies through the client (READ and WRITE), whichever
			// call the engine made.
			ops := lab.NFSOps(mnt)
			t.Logf("NFS operations: COPY %d, READ %d, WRITE %d, CLONE %d", ops["COPY"], ops["READ"], ops["WRITE"], ops["CLONE"])
			if vers == "4.2" && (res.ByMethod[treecopy.CopyRange] == 0 || ops["COPY"] == 0 || ops["WRITE"] != 0) {
				t.Errorf("over NFSv4.2 the data must be copied by the server: methods %v, COPY %d, WRITE %d", res.ByMethod, ops["COPY"], ops["WRITE"])
			}
			if vers == "4.1" && ops["COPY"] != 0 {
				t.Errorf("COPY sent over NFSv4.1")
			}
		})
	}
}
