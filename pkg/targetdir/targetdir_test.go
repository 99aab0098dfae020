package targetdir

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
)

func target(t *testing.T, root, p string) targetpath.Target {
	t.Helper()
	tg, err := targetpath.Rule{KubeletDir: root}.Check(p)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestMakeAndRemove(t *testing.T) {
	root := t.TempDir()
	parent := filepath.Join(root, "pods/u/volumes/kubernetes.io~csi/v")
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	tg := target(t, root, parent+"/mount")
	for i := 0; i < 2; i++ {
		if err := Make(tg); err != nil {
			t.Fatalf("Make (%d): %v", i, err)
		}
	}
	if st, err := os.Lstat(tg.Path()); err != nil || !st.IsDir() {
		t.Fatalf("target after Make: %v %v", st, err)
	}
	for i := 0; i < 2; i++ {
		if err := Remove(tg); err != nil {
			t.Fatalf("Remove (%d): %v", i, err)
		}
	}
	if _, err := os.Lstat(tg.Path()); !os.IsNotExist(err) {
		t.Fatalf("target still there: %v", err)
	}
	missing := target(t, root, filepath.Join(root, "pods/gone/volumes/kubernetes.io~csi/v/mount"))
	if err := Remove(missing); err != nil {
		t.Errorf("Remove with a missing parent: %v", err)
	}
	if err := Make(missing); fault.KindOf(err) != fault.NotFound {
		t.Errorf("Make with a missing parent = %v, want NotFound", err)
	}
}

// TestSymlinksAreNeverFollowed: a symlink anywhere below the base (as a
// parent or as the target) makes Make refuse, creating nothing at the
// symlink's destination, and Remove leave everything in place.
func TestSymlinksAreNeverFollowed(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	pods := filepath.Join(root, "pods")
	os.MkdirAll(filepath.Join(pods, "u/volumes/kubernetes.io~csi"), 0o750)
	// A parent that is a symlink to elsewhere.
	if err := os.Symlink(elsewhere, filepath.Join(pods, "u/volumes/kubernetes.io~csi/v")); err != nil {
		t.Fatal(err)
	}
	tg := target(t, root, filepath.Join(pods, "u/volumes/kubernetes.io~csi/v/mount"))
	if err := Make(tg); fault.KindOf(err) != fault.InvalidArgument {
		t.Errorf("Make through a symlinked parent = %v, want InvalidArgument", err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "mount")); !os.IsNotExist(err) {
		t.Errorf("Make created the target at the symlink's destination: %v", err)
	}
	os.Mkdir(filepath.Join(elsewhere, "mount"), 0o750)
	if err := Remove(tg); fault.KindOf(err) != fault.InvalidArgument {
		t.Errorf("Remove through a symlinked parent = %v, want InvalidArgument", err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "mount")); err != nil {
		t.Errorf("Remove reached the symlink's destination: %v", err)
	}

	// A target that is itself a symlink, a file or a socket.
	os.MkdirAll(filepath.Join(pods, "w/volumes/kubernetes.io~csi/v"), 0o750)
	tw := target(t, root, filepath.Join(pods, "w/volumes/kubernetes.io~csi/v/mount"))
	os.Symlink(elsewhere, tw.Path())
	if err := Make(tw); fault.KindOf(err) != fault.InvalidArgument {
		t.Errorf("Make on a symlink target = %v", err)
	}
	if err := Remove(tw); fault.KindOf(err) != fault.FailedPrecondition {
		t.Errorf("Remove of a symlink target = %v", err)
	}
	os.Remove(tw.Path())
	os.WriteFile(tw.Path(), []byte("data"), 0o600)
	if err := Remove(tw); fault.KindOf(err) != fault.FailedPrecondition {
		t.Errorf("Remove of a regular file = %v", err)
	}
	if b, err := os.ReadFile(tw.Path()); err != nil || string(b) != "data" {
		t.Errorf("the regular file was touched: %q %v", b, err)
	}
	if _, err := os.Lstat(elsewhere); err != nil {
		t.Errorf("symlink destination gone: %v", err)
	}
}

// TestPublishedReadsOnlyKubeletsFiles: only a regular vol_data.json in a
// real kubelet volume directory counts; a FIFO (which would block a
// reader), a symlinked file or directory, and other volumes do not.
func TestPublishedReadsOnlyKubeletsFiles(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	vol := func(pod, name string) string {
		d := filepath.Join(root, "pods", pod, "volumes/kubernetes.io~csi", name)
		os.MkdirAll(d, 0o750)
		return d
	}
	data := []byte(`{"volumeHandle":"vol-1"}`)
	os.WriteFile(filepath.Join(vol("p1", "a"), "vol_data.json"), data, 0o644)
	os.WriteFile(filepath.Join(vol("p2", "b"), "vol_data.json"), []byte(`{"volumeHandle":"vol-2"}`), 0o644)
	syscall.Mkfifo(filepath.Join(vol("p3", "c"), "vol_data.json"), 0o644)
	os.WriteFile(filepath.Join(outside, "vol_data.json"), data, 0o644)
	os.Symlink(filepath.Join(outside, "vol_data.json"), filepath.Join(vol("p4", "d"), "vol_data.json"))
	os.MkdirAll(filepath.Join(root, "pods/p5/volumes/kubernetes.io~csi"), 0o750)
	os.Symlink(outside, filepath.Join(root, "pods/p5/volumes/kubernetes.io~csi/e"))
	got := Published(targetpath.Rule{KubeletDir: root}, "vol-1")
	want := []string{filepath.Join(root, "pods/p1/volumes/kubernetes.io~csi/a/mount")}
	if len(got) != 1 || got[0] != want[0] {
		t.Errorf("Published = %v, want %v", got, want)
	}
	if got := Published(targetpath.Rule{Root: root}, "vol-1"); got != nil {
		t.Errorf("a Root rule has no kubelet layout, got %v", got)
	}
}
