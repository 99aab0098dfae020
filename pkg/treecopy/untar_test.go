package treecopy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostileArchive is a tar archive of a small tree and of every trick an
// archive can play on an unpacker.
func hostileArchive(t *testing.T, outside string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	mt := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	add := func(h *tar.Header, body []byte) {
		h.ModTime, h.Size = mt, int64(len(body))
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			w.Write(body)
		}
	}
	add(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o777}, nil)
	add(&tar.Header{Name: "./dir/", Typeflag: tar.TypeDir, Mode: 0o2750, Uid: 1001, Gid: 1002}, nil)
	add(&tar.Header{Name: "./dir/file", Typeflag: tar.TypeReg, Mode: 0o640, Uid: 1001, Gid: 1002}, []byte("data"))
	add(&tar.Header{Name: "./dir/holes", Typeflag: tar.TypeReg, Mode: 0o644}, append(make([]byte, 1<<20), 'x'))
	add(&tar.Header{Name: "./dir/hard", Typeflag: tar.TypeLink, Linkname: "./dir/file"}, nil)
	add(&tar.Header{Name: "./dir/sym", Typeflag: tar.TypeSymlink, Linkname: "../../../etc/passwd"}, nil)
	add(&tar.Header{Name: "./fifo", Typeflag: tar.TypeFifo, Mode: 0o600}, nil)
	add(&tar.Header{Name: "./implicit/parent/file", Typeflag: tar.TypeReg, Mode: 0o600}, []byte("p"))
	// The tricks.
	add(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("out"))
	add(&tar.Header{Name: "./dir/../../escape2", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("out"))
	add(&tar.Header{Name: "/abs", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("in"))
	add(&tar.Header{Name: "./out", Typeflag: tar.TypeSymlink, Linkname: outside}, nil)
	add(&tar.Header{Name: "./out/planted", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("out"))
	add(&tar.Header{Name: "./out/sub/", Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	add(&tar.Header{Name: "./linked-out", Typeflag: tar.TypeLink, Linkname: "../escape-target"}, nil)
	add(&tar.Header{Name: "./dev", Typeflag: tar.TypeChar, Mode: 0o600, Devmajor: 1, Devminor: 3}, nil)
	w.Close()
	return buf.Bytes()
}

func TestUnpackStaysInsideAndKeepsAttributes(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	dst := filepath.Join(base, "dst")
	for _, d := range []string{outside, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(base, "escape-target"), []byte("secret"), 0o600)
	raw := hostileArchive(t, outside)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	for name, archive := range map[string][]byte{"tar": raw, "tar.gz": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(base, "dst-"+name)
			os.Mkdir(dst, 0o755)
			fd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			res, err := DefaultUnpacker.Unpack(context.Background(), bytes.NewReader(archive), fd)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			if res.Skipped != 6 { // ../escape, escape2, out/planted, out/sub, linked-out, dev
				t.Errorf("skipped %d entries, want the 6 unsafe ones", res.Skipped)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("the unpack wrote through a symlink: %v", ents)
			}
			for _, p := range []string{filepath.Join(base, "escape"), filepath.Join(base, "escape2")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written outside the directory", p)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "abs")); string(b) != "in" {
				t.Errorf("an absolute name was not unpacked inside: %q", b)
			}
			st, err := os.Stat(filepath.Join(dst, "dir"))
			if err != nil || st.Mode()&os.ModePerm != 0o750 || st.Mode()&os.ModeSetgid == 0 || !st.ModTime().Equal(time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)) {
				t.Errorf("dir: %v %v %v", st.Mode(), st.ModTime(), err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			if os.Getuid() == 0 && (sys.Uid != 1001 || sys.Gid != 1002) {
				t.Errorf("dir owned by %d:%d", sys.Uid, sys.Gid)
			}
			f, _ := os.Stat(filepath.Join(dst, "dir/file"))
			h, _ := os.Stat(filepath.Join(dst, "dir/hard"))
			if !os.SameFile(f, h) {
				t.Error("the hard link is a copy")
			}
			if l, _ := os.Readlink(filepath.Join(dst, "dir/sym")); l != "../../../etc/passwd" {
				t.Errorf("symlink %q", l)
			}
			hs, _ := os.Stat(filepath.Join(dst, "dir/holes"))
			if hs.Size() != 1<<20+1 || hs.Sys().(*syscall.Stat_t).Blocks*512 > 64<<10 {
				t.Errorf("holes: size %d, %d blocks", hs.Size(), hs.Sys().(*syscall.Stat_t).Blocks)
			}
			if fi, err := os.Lstat(filepath.Join(dst, "fifo")); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("fifo: %v %v", fi, err)
			}
			if b, _ := os.ReadFile(filepath.Join(dst, "implicit/parent/file")); string(b) != "p" {
				t.Errorf("implicit parents: %q", b)
			}
			if _, err := os.Lstat(filepath.Join(dst, "dev")); err == nil {
				t.Error("a device node was made")
			}
		})
	}
}

func TestUnpackOfATruncatedArchiveFails(t *testing.T) {
	archive := hostileArchive(t, t.TempDir())
	dst := t.TempDir()
	fd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := DefaultUnpacker.Unpack(context.Background(), bytes.NewReader(archive[:1500]), fd); err == nil {
		t.Error("a truncated archive unpacked without error")
	}
}
