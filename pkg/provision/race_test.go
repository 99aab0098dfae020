package provision

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// holdAt runs fn (once) when a call reaches step for subDir, standing for
// another controller acting while this call is held there.
func holdAt(t *testing.T, step, subDir string, fn func()) {
	var done atomic.Bool
	StepHook = func(s, d string) {
		if s == step && d == subDir && done.CompareAndSwap(false, true) {
			fn()
		}
	}
	t.Cleanup(func() { StepHook = func(string, string) {} })
}

// TestConcurrentCreatesNeverNest: a volume around another one created
// while the inner one is between its record and its directory.
func TestConcurrentCreatesNeverNest(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	var outerErr error
	holdAt(t, "create:dir", "ns/x", func() { _, outerErr = a.Create(ctx, req("outer", "ns", params.Delete)) })
	_, err := a.Create(ctx, req("inner", "ns/x", params.Delete))
	if outerErr != nil {
		t.Fatalf("outer volume: %v", outerErr)
	}
	if !fault.Is(err, fault.InvalidArgument) || !strings.Contains(err.Error(), `inside volume "outer"`) {
		t.Fatalf("inner volume made inside a volume created meanwhile: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "ns/x")); err == nil {
		t.Error("the inner volume's directory was left inside the outer one")
	}
	if rec, _ := readRecord(a.records(), volumeid.KeyForDir("ns/x")); rec != nil {
		t.Error("the inner volume's record was left")
	}
}

// TestDelayedDeleteActsOnlyOnItsOwnVolume: a DeleteVolume held (a deposed
// leader) while another controller deletes the volume and the claim is
// created again at the same directory: when it resumes, it neither moves
// the new volume's directory nor removes its record.
func TestDelayedDeleteActsOnlyOnItsOwnVolume(t *testing.T) {
	for _, step := range []string{"delete:move", "delete:record"} {
		t.Run(step, func(t *testing.T) {
			ctx := context.Background()
			dir, a := newShare(t)
			r := req("pvc-1", "ns/pvc-1", params.Delete)
			old, err := a.Create(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			var now *Record
			holdAt(t, step, "ns/pvc-1", func() {
				if _, err := a.Delete(ctx, idOf(old)); err != nil {
					t.Errorf("the other controller's delete: %v", err)
				}
				if now, err = a.Create(ctx, r); err != nil {
					t.Errorf("the claim created again: %v", err)
				}
				os.WriteFile(filepath.Join(dir, "ns/pvc-1/new-data"), []byte("x"), 0o600)
			})
			_, err = a.Delete(ctx, idOf(old))
			t.Logf("the delayed delete: %v", err)
			if _, err := os.Stat(filepath.Join(dir, "ns/pvc-1/new-data")); err != nil {
				t.Errorf("the new volume's data: %v", err)
			}
			if got, err := a.Lookup(idOf(now)); err != nil || got == nil {
				t.Errorf("the new volume's record: %+v %v", got, err)
			}
			ents, _ := os.ReadDir(filepath.Join(dir, trashDir))
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), pendingPrefix) {
					t.Errorf("left pending in the trash: %s", e.Name())
				}
			}
			StepHook = func(string, string) {}
			if _, err := a.Delete(ctx, idOf(now)); err != nil {
				t.Errorf("deleting the new volume: %v", err)
			}
		})
	}
}

// TestAnEmptyVolumeIsRemovedAtOnce: DeleteVolume removes an empty
// volume's directory in the trash once it proved to be the volume's, and
// leaves nothing for the purge; a volume holding anything, even a file a
// pod wrote after the move, waits in the trash for the purge, whole.
func TestAnEmptyVolumeIsRemovedAtOnce(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	trash := func() []string {
		ents, err := os.ReadDir(filepath.Join(dir, ".nfsdir/trash"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	empty, err := a.Create(ctx, req("empty", "ns/empty", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if purge, err := a.Delete(ctx, idOf(empty)); err != nil || purge {
		t.Fatalf("delete of an empty volume: purge %v, %v", purge, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "ns/empty")); !os.IsNotExist(err) || len(trash()) != 0 {
		t.Errorf("an empty volume after its delete: %v, trash %v", err, trash())
	}
	if purge, err := a.Delete(ctx, idOf(empty)); err != nil {
		t.Errorf("replayed delete: purge %v, %v", purge, err)
	}

	late, err := a.Create(ctx, req("late", "ns/late", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	pending := filepath.Join(dir, ".nfsdir/trash", "."+trashName(idOf(late)))
	holdAt(t, "delete:rmdir", "ns/late", func() {
		if err := os.WriteFile(filepath.Join(pending, "written-late"), []byte("x"), 0o644); err != nil {
			t.Error(err)
		}
	})
	if purge, err := a.Delete(ctx, idOf(late)); err != nil || !purge {
		t.Fatalf("delete of a volume written to during its delete: purge %v, %v", purge, err)
	}
	final := filepath.Join(dir, ".nfsdir/trash", trashName(idOf(late)))
	if _, err := os.Lstat(filepath.Join(final, "written-late")); err != nil {
		t.Errorf("the volume is not in the trash, whole, for the purge: %v (trash %v)", err, trash())
	}
}
