package treewalk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func was(t *testing.T, dir string, changed bool) Was {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	w := Was{Dev: uint64(st.Dev), Ino: st.Ino}
	if changed {
		w.Changed = &st.Ctim
	}
	return w
}

// A parent let go is found again through "..", and the walk goes on after
// the entries it had read; one of fewer entries now ends the skip early.
func TestReopenFindsTheParentAndSkipsWhatWasRead(t *testing.T) {
	dir := t.TempDir()
	for i := range 10 {
		os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o644)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	child, err := os.Open(filepath.Join(dir, "sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	for _, c := range []struct{ skip, left int }{{0, 11}, {4, 7}, {11, 0}, {50, 0}} {
		f, err := Reopen(int(child.Fd()), was(t, dir, true), c.skip, 3)
		if err != nil {
			t.Fatalf("skip %d: %v", c.skip, err)
		}
		rest, _ := f.ReadDir(-1)
		f.Close()
		if len(rest) != c.left {
			t.Errorf("skip %d: %d entries left, want %d", c.skip, len(rest), c.left)
		}
	}
}

// A directory moved, or changed where the walk asks, is not taken for the
// one let go.
func TestReopenRefusesAnotherDirectory(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "a", "sub"), 0o755)
	os.Mkdir(filepath.Join(dir, "b"), 0o755)
	wasA := was(t, filepath.Join(dir, "a"), true)
	child, err := os.Open(filepath.Join(dir, "a", "sub"))
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()
	os.WriteFile(filepath.Join(dir, "a", "new"), nil, 0o644) // a's change time moves
	if _, err := Reopen(int(child.Fd()), wasA, 0, 8); !errors.Is(err, ErrMoved) {
		t.Errorf("a changed since: %v, want ErrMoved", err)
	}
	if f, err := Reopen(int(child.Fd()), Was{Dev: wasA.Dev, Ino: wasA.Ino}, 0, 8); err != nil {
		t.Errorf("a changed, change time not asked: %v", err)
	} else {
		f.Close()
	}
	if err := os.Rename(filepath.Join(dir, "a", "sub"), filepath.Join(dir, "b", "sub")); err != nil {
		t.Fatal(err)
	}
	if _, err := Reopen(int(child.Fd()), Was{Dev: wasA.Dev, Ino: wasA.Ino}, 0, 8); !errors.Is(err, ErrMoved) {
		t.Errorf("sub moved to b: %v, want ErrMoved", err)
	}
}

// OpenDir never goes through a symlink.
func TestOpenDirFollowsNoSymlink(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "real"), 0o755)
	os.Symlink("real", filepath.Join(dir, "link"))
	root, _ := os.Open(dir)
	defer root.Close()
	if f, err := OpenDir(int(root.Fd()), "real"); err != nil {
		t.Fatal(err)
	} else {
		f.Close()
	}
	if _, err := OpenDir(int(root.Fd()), "link"); !errors.Is(err, unix.ELOOP) && !errors.Is(err, unix.ENOTDIR) {
		t.Errorf("through a symlink: %v", err)
	}
}
