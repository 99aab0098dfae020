package treecopy

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type archiveEntry struct {
	h    tar.Header
	body string
}

func archiveOf(t *testing.T, entries ...archiveEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.h
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		must(t, w.WriteHeader(&h))
		_, err := w.Write([]byte(e.body))
		must(t, err)
	}
	must(t, w.Close())
	return &buf
}

// endless is an archive whose one file declares size bytes and whose data
// never ends: zeros, as fast as they are read.
func endless(t *testing.T, size int64) io.Reader {
	t.Helper()
	var hdr bytes.Buffer
	w := tar.NewWriter(&hdr)
	must(t, w.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}))
	w.Flush()
	return io.MultiReader(bytes.NewReader(hdr.Bytes()), zeros{})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// A restore stops inside a file when its context ends: one file that
// declares a terabyte does not keep it going.
func TestUnpackStopsInsideAFileWithItsContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	u := DefaultUnpacker
	u.MaxBytes = 2 << 40
	go func() {
		_, err := u.Unpack(ctx, endless(t, 1<<40), openDir(t, t.TempDir()))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Unpack: %v, want the context's deadline", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the restore went on inside its file 10 s after its context ended")
	}
}

// Files whose sizes pass the byte budget are refused, before their data
// is read.
func TestUnpackKeepsToItsByteBudget(t *testing.T) {
	u := DefaultUnpacker
	u.MaxBytes = 1 << 30
	start := time.Now()
	_, err := u.Unpack(context.Background(), endless(t, 1<<40), openDir(t, t.TempDir()))
	if !errors.Is(err, ErrBounds) || time.Since(start) > 5*time.Second {
		t.Errorf("a 1 TiB file against a 1 GiB budget: %v after %s, want ErrBounds at once", err, time.Since(start))
	}
	u.MaxBytes = 10
	_, err = u.Unpack(context.Background(), archiveOf(t,
		archiveEntry{tar.Header{Name: "a"}, "123456"}, archiveEntry{tar.Header{Name: "b"}, "123456"}), openDir(t, t.TempDir()))
	if !errors.Is(err, ErrBounds) {
		t.Errorf("12 bytes against a budget of 10: %v, want ErrBounds", err)
	}
}

// So are archives with more entries, or deeper names, than allowed.
func TestUnpackKeepsToItsEntriesAndDepth(t *testing.T) {
	var many []archiveEntry
	for i := range 20 {
		many = append(many, archiveEntry{tar.Header{Name: fmt.Sprint("f", i)}, ""})
	}
	u := DefaultUnpacker
	u.MaxEntries = 10
	if _, err := u.Unpack(context.Background(), archiveOf(t, many...), openDir(t, t.TempDir())); !errors.Is(err, ErrBounds) {
		t.Errorf("20 entries against a limit of 10: %v, want ErrBounds", err)
	}
	u = DefaultUnpacker
	u.MaxDepth = 8
	deep := strings.Repeat("d/", 9) + "f"
	if _, err := u.Unpack(context.Background(), archiveOf(t, archiveEntry{tar.Header{Name: deep}, "x"}), openDir(t, t.TempDir())); !errors.Is(err, ErrBounds) {
		t.Errorf("a name 10 deep against a limit of 8: %v, want ErrBounds", err)
	}
	if _, err := u.Unpack(context.Background(), archiveOf(t, archiveEntry{tar.Header{Name: strings.Repeat("d/", 7) + "f"}, "x"}), openDir(t, t.TempDir())); err != nil {
		t.Errorf("a name 8 deep against a limit of 8: %v", err)
	}
}

// Restored files lose setuid and setgid unless the restore keeps them; a
// directory gets its mode after its contents; a name that comes twice
// (as tar -r appends) is the later entry.
func TestUnpackStripsSetIDAndTakesTheLaterOfTwoNames(t *testing.T) {
	archive := func() *bytes.Buffer {
		return archiveOf(t,
			archiveEntry{tar.Header{Name: "ro/", Typeflag: tar.TypeDir, Mode: 0o555}, ""},
			archiveEntry{tar.Header{Name: "ro/suid", Mode: 0o4755}, "x"},
			archiveEntry{tar.Header{Name: "sgid", Mode: 0o2755}, "x"},
			archiveEntry{tar.Header{Name: "twice", Mode: 0o644}, "first"},
			archiveEntry{tar.Header{Name: "twice", Mode: 0o600}, "second"})
	}
	dst := t.TempDir()
	res, err := DefaultUnpacker.Unpack(context.Background(), archive(), openDir(t, dst))
	if err != nil {
		t.Fatalf("Unpack: %v (%+v)", err, res)
	}
	for name, want := range map[string]os.FileMode{"ro": os.ModeDir | 0o555, "ro/suid": 0o755, "sgid": 0o755, "twice": 0o600} {
		if st, err := os.Lstat(filepath.Join(dst, name)); err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", name, st.Mode(), err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "twice")); string(b) != "second" {
		t.Errorf("twice holds %q, want the later entry's data", b)
	}
	keep := DefaultUnpacker
	keep.KeepSetID = true
	dst = t.TempDir()
	if _, err := keep.Unpack(context.Background(), archive(), openDir(t, dst)); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(dst, "ro/suid")); err != nil || st.Mode() != os.ModeSetuid|0o755 {
		t.Errorf("with KeepSetID, ro/suid: mode %v (%v)", st.Mode(), err)
	}
}

// An old-GNU sparse file that declares 8 GiB against a budget of 1 MiB is
// refused at its header.
func TestUnpackRefusesADeclaredSparseGiant(t *testing.T) {
	u := DefaultUnpacker
	u.MaxBytes = 1 << 20
	if _, err := u.Unpack(context.Background(), bytes.NewReader(gnuSparse(1<<33-1)), openDir(t, t.TempDir())); !errors.Is(err, ErrBounds) {
		t.Errorf("Unpack: %v, want ErrBounds", err)
	}
}

// With an Owner, every restored entry (directories, files, symlinks,
// FIFOs) takes the volume's owner instead of the archive's; without one
// the archive's owners stay. Tests run as root, where chown works.
func TestUnpackGivesTheVolumesOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown to other owners needs root")
	}
	archive := func() *bytes.Buffer {
		return archiveOf(t,
			archiveEntry{tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 0, Gid: 0}, ""},
			archiveEntry{tar.Header{Name: "d/f", Mode: 0o644, Uid: 0, Gid: 0}, "x"},
			archiveEntry{tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "d/f", Uid: 0, Gid: 0}, ""},
			archiveEntry{tar.Header{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o600, Uid: 0, Gid: 0}, ""},
			archiveEntry{tar.Header{Name: "mine", Mode: 0o644, Uid: 1234, Gid: 5678}, "y"})
	}
	owners := func(dst string) map[string][2]uint32 {
		got := map[string][2]uint32{}
		for _, name := range []string{"d", "d/f", "l", "p", "mine"} {
			st, err := os.Lstat(filepath.Join(dst, name))
			if err != nil {
				t.Fatal(err)
			}
			s := st.Sys().(*syscall.Stat_t)
			got[name] = [2]uint32{s.Uid, s.Gid}
		}
		return got
	}
	dst := t.TempDir()
	if _, err := DefaultUnpacker.Unpack(context.Background(), archive(), openDir(t, dst)); err != nil {
		t.Fatal(err)
	}
	if got := owners(dst); got["d/f"] != [2]uint32{0, 0} || got["mine"] != [2]uint32{1234, 5678} {
		t.Errorf("without an Owner: %v; want the archive's owners", got)
	}
	for _, o := range []Owner{{UID: 1000, GID: 2000}, {UID: 1000, GID: -1}} {
		pinned := DefaultUnpacker
		pinned.Owner = &o
		dst := t.TempDir()
		if _, err := pinned.Unpack(context.Background(), archive(), openDir(t, dst)); err != nil {
			t.Fatal(err)
		}
		for name, got := range owners(dst) {
			wantGID := uint32(o.GID)
			if o.GID < 0 {
				wantGID = map[string]uint32{"mine": 5678}[name] // the archive's group
			}
			if got != [2]uint32{uint32(o.UID), wantGID} {
				t.Errorf("Owner %+v: %s owned by %v, want %d:%d", o, name, got, o.UID, wantGID)
			}
		}
	}
}
