package treecopy

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// swapFIFOForSymlink makes the hook that runs once a FIFO is made turn it
// into a symlink to target, as someone writing the copy meanwhile could.
func swapFIFOForSymlink(t *testing.T, target string) {
	t.Helper()
	old := fifoMade
	fifoMade = func(dirfd int, name string) {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			t.Error(err)
		}
		if err := unix.Symlinkat(target, dirfd, name); err != nil {
			t.Error(err)
		}
	}
	t.Cleanup(func() { fifoMade = old })
}

// victim is a file outside the copy with mode 0600; the test fails if its
// mode changed.
func victim(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "victim")
	must(t, os.WriteFile(p, []byte("secret"), 0o600))
	t.Cleanup(func() {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("the file outside the copy has mode %v (%v), want 0600 untouched", st.Mode(), err)
		}
	})
	return p
}

// The mode of a FIFO of the source is given to the FIFO the copy made and
// never, through a symlink put in its place, to another file.
func TestCopyNeverChmodsThroughASwappedFIFO(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must(t, unix.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	must(t, unix.Chmod(filepath.Join(src, "fifo"), 0o666))
	swapFIFOForSymlink(t, victim(t))
	_, err := Default.Copy(context.Background(), openDir(t, src), openDir(t, dst), true)
	if err == nil {
		t.Error("the copy went on with its FIFO swapped for a symlink")
	}
}

// So does a restore from an archive.
func TestUnpackNeverChmodsThroughASwappedFIFO(t *testing.T) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	must(t, w.WriteHeader(&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o666}))
	must(t, w.Close())
	swapFIFOForSymlink(t, victim(t))
	if _, err := DefaultUnpacker.Unpack(context.Background(), &buf, openDir(t, t.TempDir())); err == nil {
		t.Error("the restore went on with its FIFO swapped for a symlink")
	}
}

// Without interference, both give the FIFO its mode.
func TestFIFOsGetTheirMode(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	must(t, unix.Mkfifo(filepath.Join(src, "fifo"), 0o600))
	must(t, unix.Chmod(filepath.Join(src, "fifo"), 0o1666))
	copyTree(t, Default, src, dst, true)
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	must(t, w.WriteHeader(&tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o1666}))
	must(t, w.Close())
	restored := t.TempDir()
	if _, err := DefaultUnpacker.Unpack(context.Background(), &buf, openDir(t, restored)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(dst, "fifo"), filepath.Join(restored, "fifo")} {
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		if st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o7777 != 0o1666 {
			t.Errorf("%s: mode %o, want a FIFO with 1666", p, st.Mode)
		}
	}
}
