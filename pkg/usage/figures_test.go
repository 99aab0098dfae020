package usage

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/capacity"
)

func openFigures(t *testing.T) (Figures, string) {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return Figures{Dir: r, Name: ".nfsdir/usage"}, dir
}

// TestAFigureIsReadOnlyForItsOwnDirectory: a stored figure is read back
// for the token it was counted with, and a later directory of the same
// key (another token) sees none; Drop leaves a later directory's figure.
func TestAFigureIsReadOnlyForItsOwnDirectory(t *testing.T) {
	f, _ := openFigures(t)
	fig := capacity.Figure{Token: "t1", Bytes: 4096, Inodes: 2, Counted: time.Now().UTC().Truncate(time.Second)}
	if err := f.Store("k", fig); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := f.Read("k", "t1"); !ok || err != nil || got.Bytes != 4096 || got.Inodes != 2 {
		t.Fatalf("Read: %+v %v %v", got, ok, err)
	}
	if _, ok, err := f.Read("k", "t2"); ok || err != nil {
		t.Fatalf("a figure of another directory was read: %v %v", ok, err)
	}
	if _, ok, err := f.Read("none", "t1"); ok || err != nil {
		t.Fatalf("no figure: %v %v", ok, err)
	}
	f.Drop("k", "t2")
	if !f.Has("k") {
		t.Fatal("Drop removed the figure of another directory")
	}
	f.Drop("k", "t1")
	if f.Has("k") {
		t.Fatal("Drop left the figure of its directory")
	}
}

// TestDropStaleKeepsLiveFiguresAndRecentTemporaries: figures of keys not
// live go, temporaries a count may still rename stay, old ones go.
func TestDropStaleKeepsLiveFiguresAndRecentTemporaries(t *testing.T) {
	f, dir := openFigures(t)
	for _, k := range []string{"a", "b", "gone"} {
		if err := f.Store(k, capacity.Figure{Token: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("x", filepath.Join(dir, "a.new.recent"))
	os.Symlink("x", filepath.Join(dir, "b.new.old"))
	old := time.Now().Add(-2 * tempGrace)
	lutimes(t, filepath.Join(dir, "b.new.old"), old)
	f.DropStale([]string{"a", "b"})
	for name, want := range map[string]bool{"a": true, "b": true, "gone": false, "a.new.recent": true, "b.new.old": false} {
		if _, err := os.Lstat(filepath.Join(dir, name)); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", name, err == nil, want)
		}
	}
}

// lutimes sets the times of the symlink p itself.
func lutimes(t *testing.T, p string, at time.Time) {
	t.Helper()
	ts := unix.NsecToTimespec(at.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}
