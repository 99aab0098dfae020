package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
)

// TestMetadataAreaMustBeNfsdirs: a metadata directory that is a symlink,
// writable by others or owned by another user makes the share unusable
// (FailedPrecondition naming it), with or without create.
func TestMetadataAreaMustBeNfsdirs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to chown")
	}
	cases := map[string]struct {
		spoil func(dir string)
		want  string
	}{
		"trash symlink": {func(dir string) {
			os.MkdirAll(filepath.Join(dir, "victim"), 0o755)
			os.Remove(filepath.Join(dir, ".nfsdir/trash"))
			os.Symlink("../victim", filepath.Join(dir, ".nfsdir/trash"))
		}, ".nfsdir/trash on the share is not as nfsdir made it: it is a symbolic link"},
		"meta symlink": {func(dir string) {
			os.Rename(filepath.Join(dir, ".nfsdir"), filepath.Join(dir, "elsewhere"))
			os.Symlink("elsewhere", filepath.Join(dir, ".nfsdir"))
		}, ".nfsdir on the share is not as nfsdir made it: it is a symbolic link"},
		"meta world-writable": {func(dir string) {
			os.Chmod(filepath.Join(dir, ".nfsdir"), 0o777)
		}, "its mode 0777 lets others"},
		"volumes foreign owner": {func(dir string) {
			os.Chown(filepath.Join(dir, ".nfsdir/volumes"), 1234, 1234)
		}, "owned by uid 1234"},
		"parents a file": {func(dir string) {
			os.Remove(filepath.Join(dir, ".nfsdir/parents"))
			os.WriteFile(filepath.Join(dir, ".nfsdir/parents"), nil, 0o600)
		}, "it is a regular file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir, a := newShare(t)
			a.Close()
			c.spoil(dir)
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			for _, create := range []bool{false, true} {
				_, err := OpenArea(root, create)
				if !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("create=%v: %v; want FailedPrecondition with %q", create, err, c.want)
				}
			}
		})
	}
}

// TestTrashIsReachedThroughItsHandle: replacing .nfsdir/trash by a link to
// another directory after the Area was opened changes nothing: deleted
// volumes still go to the trash nfsdir checked.
func TestTrashIsReachedThroughItsHandle(t *testing.T) {
	dir, a := newShare(t)
	rec, err := a.Create(context.Background(), req("pvc-1", "ns/pvc-1", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "ns/pvc-1/data"), []byte("x"), 0o644) // not empty: left to the purge
	os.MkdirAll(filepath.Join(dir, "victim"), 0o755)
	os.Rename(filepath.Join(dir, ".nfsdir/trash"), filepath.Join(dir, ".nfsdir/trash-real"))
	os.Symlink("../victim", filepath.Join(dir, ".nfsdir/trash"))
	if _, err := a.Delete(context.Background(), idOf(rec)); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "victim")); len(ents) != 0 {
		t.Errorf("volume moved into the directory a link pointed to: %v", ents)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, ".nfsdir/trash-real")); len(ents) != 1 {
		t.Errorf("volume not in the trash opened with the Area: %v", ents)
	}
}

// TestAreaWithoutRecordsDirectory: a share whose .nfsdir has no records
// directory (an admin's file there, a half-made area) has no volumes:
// opened without create it is ErrNoArea, and nothing is created. An area
// with records but no parents or trash directory is completed on open;
// with create every missing directory is made.
func TestAreaWithoutRecordsDirectory(t *testing.T) {
	for _, missing := range metaDirs {
		t.Run(missing, func(t *testing.T) {
			dir, a := newShare(t)
			a.Close()
			os.RemoveAll(filepath.Join(dir, ".nfsdir", missing))
			os.WriteFile(filepath.Join(dir, ".nfsdir/canary"), []byte("x"), 0o600)
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			if missing == "volumes" {
				if _, err := OpenArea(root, false); err != ErrNoArea {
					t.Fatalf("open without create: %v, want ErrNoArea", err)
				}
				if _, err := os.Lstat(filepath.Join(dir, ".nfsdir", missing)); err == nil {
					t.Fatalf("open without create made .nfsdir/%s", missing)
				}
			} else {
				a, err := OpenArea(root, false)
				if err != nil {
					t.Fatalf("open without create of an area with records: %v", err)
				}
				a.Close()
				if st, err := os.Lstat(filepath.Join(dir, ".nfsdir", missing)); err != nil || !st.IsDir() {
					t.Fatalf("open without create did not complete .nfsdir/%s: %v", missing, err)
				}
				os.Remove(filepath.Join(dir, ".nfsdir", missing))
			}
			b, err := OpenArea(root, true)
			if err != nil {
				t.Fatalf("open with create: %v", err)
			}
			b.Close()
			if st, err := os.Lstat(filepath.Join(dir, ".nfsdir", missing)); err != nil || !st.IsDir() {
				t.Fatalf("create did not complete the area: %v", err)
			}
		})
	}
}

// TestRecordsReadInOneCall: a record read through the records directory
// held open is what os.Root reads, whatever its length (up to the
// longest a symlink holds, 4,095 bytes); a missing one is fs.ErrNotExist; once the Area is
// closed, os.ErrClosed (the Area is opened again), never another file.
func TestRecordsReadInOneCall(t *testing.T) {
	dir, a := newShare(t)
	d := a.records()
	for _, n := range []int{1, 127, 128, 300, 4095} {
		target := strings.Repeat("x", n)
		name := fmt.Sprint("link-", n)
		if err := os.Symlink(target, filepath.Join(dir, ".nfsdir/volumes", name)); err != nil {
			t.Fatal(err)
		}
		if got, err := d.Readlink(name); err != nil || got != target {
			t.Errorf("%d bytes: read %d bytes, %v", n, len(got), err)
		}
	}
	if _, err := d.Readlink("missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing record: %v", err)
	}
	a.Close()
	if _, err := d.Readlink("link-1"); !errors.Is(err, os.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}
