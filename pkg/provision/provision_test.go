package provision

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

func newShare(t *testing.T) (string, *Area) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := OpenArea(root, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); root.Close() })
	return dir, a
}

func idOf(rec *Record) volumeid.ID {
	return volumeid.ID{Export: export.Export{Server: "s", Share: "/e"}, Key: rec.Key(), Token: rec.Token}
}

func req(name, sub string, policy params.OnDelete) Request {
	return Request{Name: name, SubDir: sub, OnDelete: policy, Mode: 0o2770, UID: -1, GID: -1, CapacityBytes: 1 << 20}
}

func TestCreateIdempotentAndConflicts(t *testing.T) {
	ctx := context.Background()
	dir, root := newShare(t)
	r1, err := root.Create(ctx, req("pvc-1", "ns/pvc-1", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "ns/pvc-1"))
	if err != nil || st.Mode().Perm() != 0o770 || st.Mode()&os.ModeSetgid == 0 {
		t.Fatalf("volume dir: %v %v", st.Mode(), err)
	}
	r2, err := root.Create(ctx, req("pvc-1", "ns/pvc-1", params.Delete))
	if err != nil || r2.Token != r1.Token {
		t.Fatalf("retry: %+v %v", r2, err)
	}
	bigger := req("pvc-1", "ns/pvc-1", params.Delete)
	bigger.CapacityBytes *= 2
	if _, err := root.Create(ctx, bigger); !fault.Is(err, fault.AlreadyExists) {
		t.Fatalf("different capacity: %v", err)
	}
	if _, err := root.Create(ctx, req("pvc-2", "ns/pvc-1", params.Delete)); !fault.Is(err, fault.AlreadyExists) || !strings.Contains(err.Error(), `belongs to volume "pvc-1"`) {
		t.Fatalf("second name on same dir: %v", err)
	}
	os.MkdirAll(filepath.Join(dir, "planted"), 0o755)
	if _, err := root.Create(ctx, req("pvc-3", "planted", params.Delete)); !fault.Is(err, fault.AlreadyExists) || !strings.Contains(err.Error(), "did not create") {
		t.Fatalf("foreign directory: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, volumesDir, volumeid.KeyForDir("planted"))); err == nil {
		t.Fatal("record left behind for a refused volume")
	}
	// Crash between record and directory: the retry makes the directory.
	os.Remove(filepath.Join(dir, "ns/pvc-1"))
	if _, err := root.Create(ctx, req("pvc-1", "ns/pvc-1", params.Delete)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ns/pvc-1")); err != nil {
		t.Fatal(err)
	}
}

func TestSymlinkedParentIsRefused(t *testing.T) {
	dir, root := newShare(t)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(dir, "ns")); err != nil {
		t.Fatal(err)
	}
	if _, err := root.Create(context.Background(), req("pvc-1", "ns/pvc-1", params.Delete)); err == nil {
		t.Fatal("created through a symlink")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("wrote outside the share: %v", ents)
	}
}

func TestDeletePolicies(t *testing.T) {
	ctx := context.Background()
	for _, policy := range []params.OnDelete{params.Delete, params.Retain, params.Archive} {
		t.Run(string(policy), func(t *testing.T) {
			dir, root := newShare(t)
			os.WriteFile(filepath.Join(dir, "canary"), []byte("x"), 0o600)
			rec, err := root.Create(ctx, req("pvc-1", "ns/pvc-1", policy))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, "ns/pvc-1/data"), []byte("data"), 0o600)
			if _, err := root.Delete(ctx, idOf(rec)); err != nil {
				t.Fatal(err)
			}
			_, errVol := os.Stat(filepath.Join(dir, "ns/pvc-1/data"))
			_, errArch := os.Stat(filepath.Join(dir, "archived-ns-pvc-1/data"))
			_, errParent := os.Stat(filepath.Join(dir, "ns"))
			switch policy {
			case params.Retain:
				if errVol != nil {
					t.Error("retained data gone")
				}
			case params.Archive:
				if errVol == nil || errArch != nil || errParent == nil {
					t.Errorf("archive: vol %v arch %v parent %v", errVol, errArch, errParent)
				}
			case params.Delete:
				if errVol == nil || errParent == nil {
					t.Errorf("delete: vol %v parent %v", errVol, errParent)
				}
				p := NewPurger(2)
				p.Kick(ctx, dir, root)
				p.Wait()
				if ents, _ := os.ReadDir(filepath.Join(dir, trashDir)); len(ents) != 0 {
					t.Errorf("trash not purged: %v", ents)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "canary")); err != nil {
				t.Error("canary gone")
			}
			// Deleting again is a no-op.
			if _, err := root.Delete(ctx, idOf(rec)); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestDeleteNeverTouchesForeignDirectories(t *testing.T) {
	ctx := context.Background()
	dir, root := newShare(t)
	os.MkdirAll(filepath.Join(dir, "foreign"), 0o755)
	os.WriteFile(filepath.Join(dir, "foreign/data"), []byte("x"), 0o600)
	// An ID naming the foreign directory's would-be record does nothing.
	id := volumeid.ID{Export: export.Export{Server: "s", Share: "/e"}, Key: volumeid.KeyForDir("foreign"), Token: "aaaaaaaa"}
	if _, err := root.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A recreated volume of the same name is not deleted by the old ID.
	rec, _ := root.Create(ctx, req("v", "v", params.Delete))
	old := idOf(rec)
	if _, err := root.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	rec2, _ := root.Create(ctx, req("v", "v", params.Delete))
	if _, err := root.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v")); err != nil || rec2.Token == rec.Token {
		t.Fatalf("stale ID deleted the new volume: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "foreign/data")); err != nil {
		t.Fatal("foreign data gone")
	}
}

func TestPrunesOnlyParentsItCreated(t *testing.T) {
	ctx := context.Background()
	dir, root := newShare(t)
	os.Mkdir(filepath.Join(dir, "premade"), 0o755)
	rec, err := root.Create(ctx, req("a", "premade/a", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := root.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "premade")); err != nil {
		t.Fatal("removed a parent nfsdir did not create")
	}
}

func TestPurgeNeverFollowsSymlinksAndStopsOnCancel(t *testing.T) {
	dir, root := newShare(t)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep"), []byte("x"), 0o600)
	ctx := context.Background()
	rec, err := root.Create(ctx, req("v", "v", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(dir, "v")
	os.Symlink(outside, filepath.Join(vol, "link-out"))
	os.Symlink("/", filepath.Join(vol, "link-root"))
	for i := 0; i < 50; i++ {
		os.MkdirAll(filepath.Join(vol, "d", strings.Repeat("x", i%7+1), "deep"), 0o755)
		os.WriteFile(filepath.Join(vol, "d", strings.Repeat("x", i%7+1), "f"+string(rune('a'+i%26))), nil, 0o600)
	}
	if _, err := root.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	p := NewPurger(1)
	p.Kick(cancelled, dir, root)
	p.Wait()
	if ents, _ := os.ReadDir(filepath.Join(dir, trashDir)); len(ents) != 1 {
		t.Fatalf("a cancelled purge removed the trash: %v", ents)
	}
	p.Kick(ctx, dir, root)
	p.Wait()
	if ents, _ := os.ReadDir(filepath.Join(dir, trashDir)); len(ents) != 0 {
		t.Fatalf("trash left: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(outside, "keep")); err != nil {
		t.Fatal("purge followed a symlink out of the share")
	}
}

func TestVolumesNeverNest(t *testing.T) {
	ctx := context.Background()
	_, a := newShare(t)
	if _, err := a.Create(ctx, req("outer", "team", params.Delete)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, req("inner", "team/data", params.Delete)); !fault.Is(err, fault.InvalidArgument) || !strings.Contains(err.Error(), `inside volume "outer"`) {
		t.Fatalf("volume inside a volume: %v", err)
	}
	if _, err := a.Create(ctx, req("deep", "ns/x/y", params.Delete)); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, req("around", "ns", params.Delete)); !fault.Is(err, fault.AlreadyExists) || !strings.Contains(err.Error(), "other nfsdir volumes") {
		t.Fatalf("volume around a volume: %v", err)
	}
	if _, err := a.Create(ctx, req("around2", "ns/x", params.Delete)); !fault.Is(err, fault.AlreadyExists) {
		t.Fatalf("volume around a volume: %v", err)
	}
}

func TestSharedSubDirIsOptIn(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	shared := func(name string) Request {
		r := req(name, "common", params.Retain)
		r.Shared = true
		return r
	}
	r1, err := a.Create(ctx, shared("a"))
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Create(ctx, shared("b"))
	if err != nil || r1.Key() == r2.Key() {
		t.Fatalf("second sharer: %+v %v", r2, err)
	}
	if _, err := a.Create(ctx, req("c", "common", params.Retain)); !fault.Is(err, fault.AlreadyExists) {
		t.Errorf("exclusive volume over a shared directory: %v", err)
	}
	if _, err := a.Create(ctx, req("d", "own", params.Delete)); err != nil {
		t.Fatal(err)
	}
	s := shared("e")
	s.SubDir = "own"
	if _, err := a.Create(ctx, s); !fault.Is(err, fault.AlreadyExists) || !strings.Contains(err.Error(), "does not share") {
		t.Errorf("sharing an exclusive volume's directory: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "common", "data"), []byte("x"), 0o600)
	for _, r := range []*Record{r1, r2} {
		if _, err := a.Delete(ctx, idOf(r)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "common", "data")); err != nil {
		t.Fatal("shared data gone")
	}
}

func TestAdopt(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	os.MkdirAll(filepath.Join(dir, "legacy/pvc-old"), 0o755)
	os.WriteFile(filepath.Join(dir, "legacy/pvc-old/data"), []byte("x"), 0o600)
	os.Symlink("/", filepath.Join(dir, "link"))
	for sub, kind := range map[string]fault.Kind{"missing": fault.NotFound, "link": fault.FailedPrecondition, "..": fault.InvalidArgument} {
		if _, err := a.Adoptions().Adopt(Request{Name: "x", SubDir: sub, OnDelete: params.Retain}); !fault.Is(err, kind) {
			t.Errorf("Adopt(%q) = %v, want %v", sub, err, kind)
		}
	}
	rec, err := a.Adoptions().Adopt(Request{Name: "pvc-old", SubDir: "legacy/pvc-old", OnDelete: params.Archive})
	if err != nil || !rec.Adopted {
		t.Fatal(rec, err)
	}
	if _, err := a.Adoptions().Adopt(Request{Name: "again", SubDir: "legacy/pvc-old", OnDelete: params.Archive}); !fault.Is(err, fault.AlreadyExists) {
		t.Errorf("second adoption: %v", err)
	}
	// A directory holding live volumes, exclusive or shared, is refused
	// (adopting team-b with onDelete delete, then deleting it, would trash
	// the live volume team-b/db).
	if _, err := a.Create(ctx, req("db", "team-b/db", params.Delete)); err != nil {
		t.Fatal(err)
	}
	shared := req("common", "team-c/common", params.Retain)
	shared.Shared = true
	if _, err := a.Create(ctx, shared); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"team-b", "team-c", "legacy"} {
		if _, err := a.Adoptions().Adopt(Request{Name: "grab-" + sub, SubDir: sub, OnDelete: params.Delete}); !fault.Is(err, fault.FailedPrecondition) {
			t.Errorf("Adopt(%q) around a live volume = %v, want FailedPrecondition", sub, err)
		}
	}
	os.MkdirAll(filepath.Join(dir, "team-c/common/inner"), 0o755)
	if _, err := a.Adoptions().Adopt(Request{Name: "inner", SubDir: "team-c/common/inner", OnDelete: params.Delete}); !fault.Is(err, fault.InvalidArgument) {
		t.Errorf("Adopt inside a shared directory = %v, want InvalidArgument", err)
	}
	if _, err := a.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "archived-legacy-pvc-old/data")); err != nil {
		t.Errorf("adopted volume not archived: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "legacy")); err != nil {
		t.Error("removed a parent nfsdir did not create")
	}
}

func TestReplacedDirectoryIsNeverDeleted(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	for _, policy := range []params.OnDelete{params.Delete, params.Archive} {
		name := "v-" + string(policy)
		rec, err := a.Create(ctx, req(name, name, policy))
		if err != nil || rec.FileID == 0 {
			t.Fatalf("create: %+v %v", rec, err)
		}
		// Someone moves the volume away and puts another directory there.
		os.Rename(filepath.Join(dir, name), filepath.Join(dir, name+"-moved"))
		os.Mkdir(filepath.Join(dir, name), 0o755)
		os.WriteFile(filepath.Join(dir, name, "theirs"), []byte("x"), 0o600)
		_, err = a.Delete(ctx, idOf(rec))
		if !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "replaced") {
			t.Errorf("%s: delete of a replaced directory: %v", policy, err)
		}
		if _, err := os.Stat(filepath.Join(dir, name, "theirs")); err != nil {
			t.Errorf("%s: the replacement was touched", policy)
		}
		if _, err := os.Stat(filepath.Join(dir, name+"-moved")); err != nil {
			t.Errorf("%s: the original was touched", policy)
		}
	}
	// Retain touches nothing, so a replaced directory does not block it.
	kept, _ := a.Create(ctx, req("kept", "kept", params.Retain))
	os.Rename(filepath.Join(dir, "kept"), filepath.Join(dir, "kept-moved"))
	os.Mkdir(filepath.Join(dir, "kept"), 0o755)
	if _, err := a.Delete(ctx, idOf(kept)); err != nil {
		t.Errorf("retain of a replaced directory: %v", err)
	}
	// A retry of CreateVolume seals a record a crash left unsealed, when
	// the directory is as nfsdir leaves it between mkdir and seal.
	rec, _ := a.Create(ctx, req("w", "w", params.Delete))
	unsealed := *rec
	unsealed.FileID = 0
	if err := rewriteRecord(a.records(), rec.Key(), &unsealed); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(dir, "w"), newDirPerm)
	again, err := a.Create(ctx, req("w", "w", params.Delete))
	if err != nil || again.FileID != rec.FileID {
		t.Errorf("retry did not seal: %+v %v", again, err)
	}
	if st, _ := os.Stat(filepath.Join(dir, "w")); st.Mode().Perm() != 0o770 {
		t.Errorf("sealed directory has mode %v, want the volume's", st.Mode())
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, volumesDir)); len(ents) != 3 { // v-delete, v-archive, w
		t.Errorf("records: %v (no temporary link may remain)", ents)
	}
}

// TestRetryNeverTakesAnUnprovenDirectory: a record left unsealed by a crash
// and a directory at its path that is not exactly what nfsdir leaves
// between mkdir and seal (someone's data, another mode or owner): the retry
// fails with FailedPrecondition and changes nothing; Delete leaves it too.
func TestRetryNeverTakesAnUnprovenDirectory(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	for name, spoil := range map[string]func(p string){
		"data":  func(p string) { os.Chmod(p, newDirPerm); os.WriteFile(filepath.Join(p, "theirs"), nil, 0o600) },
		"mode":  func(p string) { os.Chmod(p, 0o755) },
		"owner": func(p string) { os.Chmod(p, newDirPerm); os.Chown(p, 1234, 1234) },
	} {
		r := req("v-"+name, "v-"+name, params.Delete)
		r.UID, r.GID = 4242, 4242
		rec, err := a.Create(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, rec.SubDir)
		os.Remove(p)
		os.Mkdir(p, 0o700)
		spoil(p)
		unsealed := *rec
		unsealed.FileID = 0
		if err := rewriteRecord(a.records(), rec.Key(), &unsealed); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Lstat(p)
		if _, err := a.Create(ctx, r); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "cannot prove") {
			t.Errorf("%s: retry over an unproven directory: %v", name, err)
		}
		if _, err := a.Delete(ctx, idOf(rec)); !fault.Is(err, fault.FailedPrecondition) {
			t.Errorf("%s: delete of an unproven directory: %v", name, err)
		}
		after, err := os.Lstat(p)
		if err != nil || after.Mode() != before.Mode() || after.Sys().(*syscall.Stat_t).Uid != before.Sys().(*syscall.Stat_t).Uid {
			t.Errorf("%s: directory changed: %v -> %v (%v)", name, before.Mode(), after, err)
		}
	}
}

// TestAbandonedRecordIsReclaimed: a record whose directory was never made
// (a crash, then the claim deleted) blocks its subDir for other volumes
// only for AbandonedAfter.
func TestAbandonedRecordIsReclaimed(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	rec, err := a.Create(ctx, req("gone", "data", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "data"))
	cut := *rec
	cut.FileID = 0
	if err := rewriteRecord(a.records(), rec.Key(), &cut); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Create(ctx, req("next", "data", params.Delete)); !fault.Is(err, fault.AlreadyExists) {
		t.Fatalf("within the grace period: %v", err)
	}
	cut.Created = cut.Created.Add(-2 * AbandonedAfter)
	rewriteRecord(a.records(), rec.Key(), &cut)
	next, err := a.Create(ctx, req("next", "data", params.Delete))
	if err != nil || next.Name != "next" || next.FileID == 0 {
		t.Fatalf("after the grace period: %+v %v", next, err)
	}
	if got, _ := a.Lookup(idOf(rec)); got != nil {
		t.Error("the abandoned volume's ID still finds a record")
	}
	// A sealed record is never abandoned, however old.
	old := *next
	old.Created = old.Created.Add(-2 * AbandonedAfter)
	rewriteRecord(a.records(), next.Key(), &old)
	if _, err := a.Create(ctx, req("third", "data", params.Delete)); !fault.Is(err, fault.AlreadyExists) {
		t.Fatalf("over a sealed volume: %v", err)
	}
}

// TestSealHoldsTheFileHandle: the seal records the directory's file handle
// too, and a directory whose handle differs is not the volume's even with
// the same inode number.
func TestSealHoldsTheFileHandle(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	rec, err := a.Create(ctx, req("v", "v", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Handle == "" {
		t.Skip("this file system gives no file handles")
	}
	other := *rec
	other.Handle = strings.Repeat("0", len(rec.Handle))
	rewriteRecord(a.records(), rec.Key(), &other)
	if _, err := a.Delete(ctx, idOf(rec)); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "file handle") {
		t.Fatalf("delete with another handle: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "v")); err != nil {
		t.Fatal("directory moved")
	}
	rewriteRecord(a.records(), rec.Key(), rec)
	if _, err := a.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
}

// TestUndoingANewDirectoryRemovesNothingElse: when a creation is undone,
// only an empty directory at the path goes; a file, a symlink or a
// directory with data that another client put there meanwhile stays.
func TestUndoingANewDirectoryRemovesNothingElse(t *testing.T) {
	dir, a := newShare(t)
	os.MkdirAll(filepath.Join(dir, "p/empty"), 0o755)
	os.WriteFile(filepath.Join(dir, "p/file"), []byte("data"), 0o644)
	os.Symlink("/", filepath.Join(dir, "p/link"))
	os.MkdirAll(filepath.Join(dir, "p/full"), 0o755)
	os.WriteFile(filepath.Join(dir, "p/full/x"), []byte("data"), 0o644)
	for _, name := range []string{"empty", "file", "link", "full", "missing"} {
		a.creation().removeNewDir("p/" + name)
	}
	if _, err := os.Lstat(filepath.Join(dir, "p/empty")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the empty directory stays: %v", err)
	}
	for _, name := range []string{"file", "link", "full/x"} {
		if _, err := os.Lstat(filepath.Join(dir, "p", name)); err != nil {
			t.Errorf("%s was removed: %v", name, err)
		}
	}
}

// TestInterruptedRemovalsAreSettled: a record left aside by a removal
// that never finished is removed when it is the one the removal meant,
// put back when it is another volume's, and left alone while recent.
func TestInterruptedRemovalsAreSettled(t *testing.T) {
	dir, a := newShare(t)
	ctx := context.Background()
	gone, err := a.Create(ctx, req("pvc-gone", "gone", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	live, err := a.Create(ctx, req("pvc-live", "live", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	vols := filepath.Join(dir, ".nfsdir/volumes")
	// The removal of gone's record, cut after taking it aside; and a
	// removal that took live's record aside meaning an older token.
	fatalIf(t, os.Rename(filepath.Join(vols, gone.Key()), filepath.Join(vols, gone.Key()+asideSuffix+gone.Token)))
	fatalIf(t, os.Rename(filepath.Join(vols, live.Key()), filepath.Join(vols, live.Key()+asideSuffix+"oldtoken")))
	keys, removals, err := a.Inventory().Names()
	fatalIf(t, err)
	if len(keys) != 0 || len(removals) != 2 {
		t.Fatalf("keys %v, removals %v", keys, removals)
	}
	if n := a.Inventory().SettleRemovals(removals, time.Hour); n != 0 {
		t.Errorf("settled %d removals younger than the grace", n)
	}
	if n := a.Inventory().SettleRemovals(removals, 0); n != 2 {
		t.Errorf("settled %d of 2", n)
	}
	keys, removals, err = a.Inventory().Names()
	fatalIf(t, err)
	if len(removals) != 0 || len(keys) != 1 || keys[0] != live.Key() {
		t.Errorf("after settling: keys %v, removals %v; want only %s", keys, removals, live.Key())
	}
	if rec, err := a.Inventory().Record(live.Key()); err != nil || rec == nil || rec.Token != live.Token {
		t.Errorf("live's record: %+v %v", rec, err)
	}
}

func TestUnadoptRemovesOnlyItsAdoption(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	os.MkdirAll(filepath.Join(dir, "old"), 0o755)
	os.WriteFile(filepath.Join(dir, "old/data"), []byte("x"), 0o600)
	rec, err := a.Adoptions().Adopt(Request{Name: "pv-1", SubDir: "old", OnDelete: params.Delete})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.Adoptions().Adopt(Request{Name: "pv-1", SubDir: "old", OnDelete: params.Delete}); err != nil || again.Token != rec.Token {
		t.Errorf("the same adoption again = %+v, %v; want its record", again, err)
	}
	if _, err := a.Create(ctx, req("made", "made", params.Delete)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, sub string }{{"pv-2", "old"}, {"made", "made"}} {
		if err := a.Adoptions().Undo(tt.name, tt.sub); !fault.Is(err, fault.FailedPrecondition) {
			t.Errorf("Undo(%s, %s) = %v, want FailedPrecondition", tt.name, tt.sub, err)
		}
	}
	for range 2 {
		if err := a.Adoptions().Undo("pv-1", "old"); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := a.Lookup(volumeid.ID{Key: rec.Key(), Token: rec.Token}); got != nil {
		t.Errorf("record left: %+v", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "old/data")); err != nil || string(b) != "x" {
		t.Errorf("data after Undo: %q, %v", b, err)
	}
	if _, err := a.Adoptions().Adopt(Request{Name: "pv-1", SubDir: "old", OnDelete: params.Archive}); err != nil {
		t.Errorf("adopting again after Undo: %v", err)
	}
}

func TestDiscardFillNeverTakesACompleteVolume(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	rec, err := a.Create(ctx, req("done", "done", params.Retain))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "done", "data"), []byte("x"), 0o644)
	id := volumeid.ID{Key: rec.Key(), Token: rec.Token}
	if err := a.DiscardFill(ctx, id); !fault.Is(err, fault.FailedPrecondition) {
		t.Errorf("DiscardFill of a complete volume = %v, want FailedPrecondition", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "done", "data")); err != nil || string(b) != "x" {
		t.Errorf("data: %q, %v", b, err)
	}
	if got, _ := a.Lookup(id); got == nil {
		t.Error("record gone")
	}
}

// TestDeleteChecksWhatIsAtThePathThroughOneDescriptor: a DeleteVolume
// that read the record itself (Lookup, then DeleteFound, as the
// controller does) still refuses a volume directory that holds another
// share's metadata area, and a symlink put in its place (never followed
// to the volume's own directory, which it names), and touches neither.
func TestDeleteChecksWhatIsAtThePathThroughOneDescriptor(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	nested, _ := a.Create(ctx, req("nested", "nested", params.Delete))
	os.Mkdir(filepath.Join(dir, "nested", ".nfsdir"), 0o700)
	linked, _ := a.Create(ctx, req("linked", "linked", params.Delete))
	os.Rename(filepath.Join(dir, "linked"), filepath.Join(dir, "linked-moved"))
	os.Symlink("linked-moved", filepath.Join(dir, "linked"))
	for _, c := range []struct {
		rec  *Record
		want string
	}{{nested, "root of another nfsdir share"}, {linked, "no longer a directory"}} {
		rec, err := a.Lookup(idOf(c.rec))
		if err != nil || rec == nil {
			t.Fatalf("lookup %s: %v %v", c.rec.Name, rec, err)
		}
		if _, err := a.DeleteFound(ctx, idOf(c.rec), rec); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want FailedPrecondition %q", c.rec.Name, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "nested", ".nfsdir")); err != nil {
		t.Errorf("the nested share was touched: %v", err)
	}
	if l, err := os.Readlink(filepath.Join(dir, "linked")); err != nil || l != "linked-moved" {
		t.Errorf("the symlink was touched: %q %v", l, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "linked-moved")); err != nil {
		t.Errorf("the volume's own directory was touched: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, trashDir)); len(ents) != 0 {
		t.Errorf("trash: %v", ents)
	}
}

// TestDeleteOfAKnownRecordActsOnWhatItsLookUpsFind: a DeleteVolume given
// the record its caller read makes its first look-ups at once
// (checkDelete); what they find is acted on as when they are made one
// after the other. An update holding the record aside (one that changed
// onDelete to retain since the caller read it) is put back and its record
// followed: the directory stays. A pending entry of an interrupted attempt
// is checked and finished, and a record left aside by an interrupted
// removal is settled.
func TestDeleteOfAKnownRecordActsOnWhatItsLookUpsFind(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	vols := filepath.Join(dir, volumesDir)
	made := func(name string) (*Record, Record) {
		rec, err := a.Create(ctx, req(name, name, params.Delete))
		fatalIf(t, err)
		return rec, *rec
	}
	gone := func(what, p string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			t.Errorf("%s: %s is still there", what, p)
		}
	}

	upd, known := made("upd")
	_, err := a.Modify(idOf(upd), Change{OnDelete: params.Retain})
	fatalIf(t, err)
	fatalIf(t, os.Rename(filepath.Join(vols, upd.Key()), filepath.Join(vols, upd.Key()+updateSuffix+upd.Token)))
	_, err = a.DeleteFound(ctx, idOf(upd), &known)
	fatalIf(t, err)
	if _, err := os.Stat(filepath.Join(dir, "upd")); err != nil {
		t.Errorf("the directory of a volume an update set to retain was not retained: %v", err)
	}
	gone("update held aside", filepath.Join(volumesDir, upd.Key()+updateSuffix+upd.Token))
	gone("update held aside", filepath.Join(volumesDir, upd.Key()))

	pend, known := made("pend")
	pending := filepath.Join(trashDir, pendingPrefix+trashName(idOf(pend)))
	fatalIf(t, os.Rename(filepath.Join(dir, "pend"), filepath.Join(dir, pending)))
	purge, err := a.DeleteFound(ctx, idOf(pend), &known)
	if err != nil || purge {
		t.Errorf("delete after an interrupted move = purge %v, %v; want the empty directory removed at once", purge, err)
	}
	gone("pending entry", pending)
	gone("pending entry", filepath.Join(volumesDir, pend.Key()))

	asd, known := made("asd")
	text, err := os.Readlink(filepath.Join(vols, asd.Key()))
	fatalIf(t, err)
	fatalIf(t, os.Symlink(text, filepath.Join(vols, asd.Key()+asideSuffix+asd.Token)))
	_, err = a.DeleteFound(ctx, idOf(asd), &known)
	fatalIf(t, err)
	gone("record aside", filepath.Join(volumesDir, asd.Key()+asideSuffix+asd.Token))
	gone("record aside", filepath.Join(volumesDir, asd.Key()))
	gone("record aside", "asd")
}

// TestDeleteEndsWithTheFigureAndTheParentsItMade: the last steps of a
// DeleteVolume, made at once with the record's removal, still drop the
// volume's usage figure and prune the parent nfsdir made once it is empty,
// and never a parent it did not make; the directory got its mode (setgid
// included) through the descriptor it was sealed through.
func TestDeleteEndsWithTheFigureAndTheParentsItMade(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	os.Mkdir(filepath.Join(dir, "premade"), 0o755)
	var recs []*Record
	for _, sub := range []string{"team/a", "team/b", "premade/c"} {
		rec, err := a.Create(ctx, req(path.Base(sub), sub, params.Delete))
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Lstat(filepath.Join(dir, sub))
		if err != nil || st.Mode()&(fs.ModePerm|fs.ModeSetgid|fs.ModeSetuid|fs.ModeSticky) != 0o770|fs.ModeSetgid {
			t.Fatalf("%s: mode %v, %v; want drwxrws---", sub, st.Mode(), err)
		}
		if _, _, _, err := countKey(ctx, a, rec.Key()); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	figure := func(rec *Record) bool {
		_, err := os.Lstat(filepath.Join(dir, safepath.MetaDir, usageName, rec.Key()))
		return err == nil
	}
	for i, rec := range recs {
		if !figure(rec) {
			t.Fatalf("%s: no figure after its count", rec.SubDir)
		}
		if _, err := a.Delete(ctx, idOf(rec)); err != nil {
			t.Fatal(err)
		}
		if figure(rec) {
			t.Errorf("%s: its usage figure outlived the volume", rec.SubDir)
		}
		_, err := os.Stat(filepath.Join(dir, "team"))
		if teamLeft := i == 0; (err == nil) != teamLeft {
			t.Errorf("after deleting %s: team/ %v, want it there %v", rec.SubDir, err, teamLeft)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, safepath.MetaDir, "parents", parentMarker("team"))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the marker of the pruned parent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "premade")); err != nil {
		t.Error("removed a parent nfsdir did not create")
	}
}

// TestDeleteLooksUpWhileItReadsTheRecord: a DeleteVolume of a volume whose
// directory the Area knows from its key (its record was read or written
// here before) makes its first look-ups while it reads the record; what
// they find is judged by the record read, as when they follow it. An
// update holding the record aside (one that set onDelete to retain) is
// followed, a replaced directory and one holding another share's root
// are refused and left in place, and a record that is not the caller's
// (a later volume's, same directory) is never acted on.
func TestDeleteLooksUpWhileItReadsTheRecord(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	vols := filepath.Join(dir, volumesDir)
	made := func(name string) *Record {
		t.Helper()
		rec, err := a.Create(ctx, req(name, name, params.Delete))
		fatalIf(t, err)
		if got, ok := a.dirs.known(rec.Key()); !ok || got != name {
			t.Fatalf("dirs.known(%s) = %q %v after its creation", name, got, ok)
		}
		return rec
	}
	there := func(what, p string) {
		t.Helper()
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			t.Errorf("%s: %s: %v", what, p, err)
		}
	}

	upd := made("upd")
	_, err := a.Modify(idOf(upd), Change{OnDelete: params.Retain})
	fatalIf(t, err)
	fatalIf(t, os.Rename(filepath.Join(vols, upd.Key()), filepath.Join(vols, upd.Key()+updateSuffix+upd.Token)))
	_, err = a.Delete(ctx, idOf(upd))
	fatalIf(t, err)
	there("a volume an update set to retain", "upd")
	// The same, with the record read before the update moved it aside and
	// the look-ups made after: they find the update, and the call follows it.
	upd2 := made("upd2")
	known := *upd2
	_, err = a.Modify(idOf(upd2), Change{OnDelete: params.Retain})
	fatalIf(t, err)
	fatalIf(t, os.Rename(filepath.Join(vols, upd2.Key()), filepath.Join(vols, upd2.Key()+updateSuffix+upd2.Token)))
	early := a.deletion().checkDelete(idOf(upd2), "upd2", true)
	_, err = a.deletion().deleteFound(ctx, idOf(upd2), &known, &early)
	fatalIf(t, err)
	there("a volume an update set to retain", "upd2")

	repl := made("repl")
	fatalIf(t, os.Rename(filepath.Join(dir, "repl"), filepath.Join(dir, "repl-old")))
	fatalIf(t, os.Mkdir(filepath.Join(dir, "repl"), 0o700))
	if _, err := a.Delete(ctx, idOf(repl)); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "replaced") {
		t.Errorf("delete of a replaced directory: %v, want FailedPrecondition (replaced)", err)
	}
	there("a replaced directory", "repl")

	nested := made("nested")
	fatalIf(t, os.Mkdir(filepath.Join(dir, "nested", safepath.MetaDir), 0o700))
	if _, err := a.Delete(ctx, idOf(nested)); !fault.Is(err, fault.FailedPrecondition) || !strings.Contains(err.Error(), "root of another nfsdir share") {
		t.Errorf("delete of another share's root: %v, want FailedPrecondition", err)
	}
	there("another share's root", filepath.Join("nested", safepath.MetaDir))

	old := made("again")
	_, err = a.Delete(ctx, idOf(old))
	fatalIf(t, err)
	later := made("again")
	if purge, err := a.Delete(ctx, idOf(old)); err != nil || !purge {
		t.Errorf("a delayed DeleteVolume of the earlier volume: purge %v, %v", purge, err)
	}
	there("a later volume of the same directory", "again")
	if got, err := a.Lookup(idOf(later)); err != nil || got == nil {
		t.Errorf("the later volume's record: %v %v", got, err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, trashDir)); len(ents) != 0 {
		t.Errorf("trash: %v", ents)
	}
}

// fatalIf ends the test at once when err is set.
func fatalIf(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
