package provision

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

func snapshotIDOf(vol volumeid.ID, s *Snapshot) volumeid.ID {
	return volumeid.SnapshotOf(vol, s.Key(), s.Token)
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// cloneOf makes pvc-src holding one file, and records pvc-clone to be
// filled from it; it returns the share's directory, its Area and the
// clone's record.
func cloneOf(t *testing.T) (string, *Area, *Record) {
	t.Helper()
	dir, a := newShare(t)
	src, err := a.Create(context.Background(), req("pvc-src", "pvc-src", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-src", "data"), []byte("source"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := req("pvc-clone", "pvc-clone", params.Delete)
	r.Source = &Source{Key: src.Key(), Token: src.Token}
	rec, err := a.Create(context.Background(), r)
	if err != nil || !rec.Filling {
		t.Fatalf("Create from a volume = %+v, %v; want a filling record", rec, err)
	}
	return dir, a, rec
}

// A fill cut half-way (a crash) leaves a partial copy in the volume's
// directory: the next attempt makes the directory anew, sealed again, and
// copies into it empty; nothing of the partial copy survives in it.
func TestInterruptedFillStartsOverInANewDirectory(t *testing.T) {
	dir, a, rec := cloneOf(t)
	// The cut attempt's leftovers.
	if err := os.WriteFile(filepath.Join(dir, "pvc-clone", "partial"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	first := inode(t, filepath.Join(dir, "pvc-clone"))
	if _, err := a.Fills().Fill(context.Background(), idOf(rec), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	now, err := a.Lookup(idOf(rec))
	if err != nil || now == nil || !now.Copied {
		t.Fatalf("after the fill the record is %+v, %v; want it complete", now, err)
	}
	if got := inode(t, filepath.Join(dir, "pvc-clone")); got == first || now.FileID != got {
		t.Errorf("directory %d (was %d), sealed %d: want a new directory, sealed", got, first, now.FileID)
	}
	names, _ := os.ReadDir(filepath.Join(dir, "pvc-clone"))
	if len(names) != 1 || names[0].Name() != "data" {
		t.Errorf("clone holds %v; want only data", names)
	}
	if st, _ := os.Stat(filepath.Join(dir, "pvc-clone")); st.Mode().Perm() != 0o770 || st.Mode()&os.ModeSetgid == 0 {
		t.Errorf("clone's mode %v; want the record's 2770", st.Mode())
	}
	trash, _ := os.ReadDir(filepath.Join(dir, ".nfsdir", "trash"))
	if len(trash) != 1 || !strings.HasPrefix(trash[0].Name(), "filling-") {
		t.Errorf("trash holds %v; want the cut attempt's directory", trash)
	}
}

// An attempt overtaken by another (a second controller made the directory
// anew meanwhile) never marks the volume complete.
func TestOvertakenFillNeverCompletesTheVolume(t *testing.T) {
	dir, a, rec := cloneOf(t)
	c := treecopy.Default
	once := false
	c.Limit = overtake(func() {
		if once {
			return
		}
		once = true
		// While this attempt copies, another makes the directory anew.
		os.WriteFile(filepath.Join(dir, "pvc-clone", "other-attempt"), nil, 0o644)
		cur, _ := a.Lookup(idOf(rec))
		if _, err := a.Fills().emptyDir(idOf(rec), cur); err != nil {
			t.Errorf("the other attempt: %v", err)
		}
	})
	_, err := a.Fills().Fill(context.Background(), idOf(rec), c)
	if err == nil || !strings.Contains(err.Error(), "another attempt") {
		t.Errorf("overtaken fill: %v; want it refused", err)
	}
	if now, _ := a.Lookup(idOf(rec)); now == nil || !now.Filling {
		t.Errorf("record after an overtaken fill: %+v; want it still filling", now)
	}
}

// overtake is a Limiter that runs fn once, at the copy's first entry.
type overtake func()

func (o overtake) Wait(context.Context, int) error {
	if o != nil {
		o()
	}
	return nil
}

// A snapshot attempt cut half-way leaves its copy under the attempt's
// name: the next attempt moves it into the trash and completes its own;
// the cut attempt, were it still running, can never finish (its copy is
// gone), and a complete copy is only ever under the final name.
func TestSnapshotAttemptsNeverLeaveAPartialCopy(t *testing.T) {
	dir, a := newShare(t)
	src, err := a.Create(context.Background(), req("pvc-src", "pvc-src", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-src", "data"), []byte("source"), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshots().Create("snap", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	sid := snapshotIDOf(idOf(src), snap)
	if ready, _ := a.Snapshots().Ready(snap); ready {
		t.Fatal("a snapshot is ready before its copy")
	}
	cut := filepath.Join(dir, ".nfsdir", "snapshots", snap.attemptPrefix()+"cutcutcu")
	if err := os.MkdirAll(filepath.Join(cut, "half"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshots().Fill(context.Background(), sid, treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if ready, err := a.Snapshots().Ready(snap); !ready || err != nil {
		t.Fatalf("ready = %v, %v after the fill", ready, err)
	}
	if _, err := os.Lstat(cut); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the cut attempt's copy is still there: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ".nfsdir", "snapshots", snap.dataName(), "data"))
	if err != nil || string(b) != "source" {
		t.Errorf("snapshot copy holds %q, %v", b, err)
	}
	// Deleting the source keeps the snapshot; deleting the snapshot moves
	// its copy into the trash and removes its record.
	if _, err := a.Delete(context.Background(), idOf(src)); err != nil {
		t.Fatal(err)
	}
	if ready, _ := a.Snapshots().Ready(snap); !ready {
		t.Error("the snapshot went with its source volume")
	}
	if err := a.Snapshots().Delete(sid); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.Snapshots().Lookup(sid); s != nil {
		t.Error("the record outlived DeleteSnapshot")
	}
	left, _ := os.ReadDir(filepath.Join(dir, ".nfsdir", "snapshots"))
	if len(left) != 0 {
		t.Errorf("snapshots directory holds %v after the delete", left)
	}
	if _, err := a.Snapshots().Fill(context.Background(), sid, treecopy.Default); !errors.Is(err, ErrGone) {
		t.Errorf("fill of a deleted snapshot: %v; want ErrGone", err)
	}
}

// A snapshot can only be taken of a volume nfsdir made and sealed on this
// share, and a restore only from a complete snapshot that fits.
func TestSnapshotSourcesAreChecked(t *testing.T) {
	_, a := newShare(t)
	ghost := volumeid.ID{Key: volumeid.KeyForDir("ghost"), Token: "aaaaaaaa"}
	if _, err := a.Snapshots().Create("s", ghost); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("snapshot of a volume that does not exist: %v", err)
	}
	src, err := a.Create(context.Background(), req("pvc-src", "pvc-src", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := a.Snapshots().Create("s", idOf(src))
	if err != nil {
		t.Fatal(err)
	}
	r := req("pvc-r", "pvc-r", params.Delete)
	r.Source = &Source{Snapshot: true, Key: snap.Key(), Token: snap.Token}
	if _, err := a.Create(context.Background(), r); err == nil || !strings.Contains(err.Error(), "not ready") {
		t.Errorf("restore from an unfinished snapshot: %v; want it refused", err)
	}
	if rec, _ := a.Inventory().Record(volumeid.KeyForDir("pvc-r")); rec != nil {
		t.Errorf("a refused restore left a record: %+v", rec)
	}
	shared := req("pvc-shared", "common", params.Retain)
	shared.Shared, shared.Source = true, &Source{Key: src.Key(), Token: src.Token}
	if _, err := a.Create(context.Background(), shared); err == nil {
		t.Error("a shared volume was made from a source")
	}
	shared.Source = nil
	sharer, err := a.Create(context.Background(), shared)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Snapshots().Create("s-shared", idOf(sharer)); fault.KindOf(err) != fault.FailedPrecondition {
		t.Errorf("snapshot of a volume sharing its directory: %v; want FailedPrecondition", err)
	}
	clone := req("pvc-clone-shared", "pvc-clone-shared", params.Delete)
	clone.Source = &Source{Key: sharer.Key(), Token: sharer.Token}
	if _, err := a.Create(context.Background(), clone); fault.KindOf(err) != fault.FailedPrecondition {
		t.Errorf("clone of a volume sharing its directory: %v; want FailedPrecondition", err)
	}
}

// A csi-driver-nfs archive whose files hold more than the volume asks for
// is refused with OutOfRange, before the data is written.
func TestArchiveRestoreKeepsToTheVolumeCapacity(t *testing.T) {
	dir, a := newShare(t)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2 << 20}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 2<<20))
	tw.Close()
	zw.Close()
	if err := os.WriteFile(filepath.Join(dir, "snap.tar.gz"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := req("pvc-restored", "pvc-restored", params.Delete) // 1 MiB
	r.Source = &Source{Archive: "snap.tar.gz"}
	rec, err := a.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Fills().Fill(context.Background(), idOf(rec), treecopy.Default)
	if !fault.Is(err, fault.OutOfRange) || !errors.Is(err, treecopy.ErrBounds) {
		t.Errorf("a 2 MiB archive into a 1 MiB volume: %v, want OutOfRange", err)
	}
	if st, err := os.Stat(filepath.Join(dir, "pvc-restored", "big")); err == nil {
		t.Errorf("the file was written anyway (%d bytes)", st.Size())
	}
}

// A csi-driver-nfs snapshot made without compression is a plain .tar
// where its ID names the .tar.gz: it is found and unpacked within the same
// bounds; with neither there, the restore is NotFound naming both.
func TestPlainTarArchiveIsRestored(t *testing.T) {
	dir, a := newShare(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	data := []byte("plain tar, no gzip")
	if err := tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	if err := os.WriteFile(filepath.Join(dir, "snap.tar"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	r := req("pvc-restored", "pvc-restored", params.Delete)
	r.Source = &Source{Archive: "snap.tar.gz"}
	rec, err := a.Create(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Fills().Fill(context.Background(), idOf(rec), treecopy.Default); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "pvc-restored", "f")); err != nil || !bytes.Equal(b, data) {
		t.Errorf("restored %q, %v", b, err)
	}
	if _, err := a.Fills().openArchive("gone.tar.gz"); !fault.Is(err, fault.NotFound) || !strings.Contains(err.Error(), `"gone.tar"`) {
		t.Errorf("no archive: %v, want NotFound naming both names", err)
	}
}
