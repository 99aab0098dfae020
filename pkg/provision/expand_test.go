package provision

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
)

// TestExpandRecordsCapacity: a larger capacity is recorded, the same one
// changes nothing, a smaller one is OutOfRange; a replayed CreateVolume of
// the original size still answers with the volume; a deleted volume is
// NotFound.
func TestExpandRecordsCapacity(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	rec, err := a.Create(ctx, req("pvc-x", "pvc-x", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	id := idOf(rec)
	got, err := a.Expand(id, 2<<20)
	if err != nil || got.CapacityBytes != 2<<20 || got.Token != rec.Token || got.FileID != rec.FileID {
		t.Fatalf("expand: %+v %v", got, err)
	}
	if now, _ := a.Lookup(id); now == nil || now.CapacityBytes != 2<<20 {
		t.Fatalf("record after expand: %+v", now)
	}
	if got, err := a.Expand(id, 2<<20); err != nil || got.CapacityBytes != 2<<20 {
		t.Fatalf("same size again: %+v %v", got, err)
	}
	if _, err := a.Expand(id, 1<<20); !fault.Is(err, fault.OutOfRange) {
		t.Fatalf("shrink: %v", err)
	}
	if again, err := a.Create(ctx, req("pvc-x", "pvc-x", params.Delete)); err != nil || again.Token != rec.Token || again.CapacityBytes != 2<<20 {
		t.Fatalf("CreateVolume replayed after expand: %+v %v", again, err)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, volumesDir))
	for _, e := range ents {
		if e.Name() != rec.Key() {
			t.Errorf("left in %s: %s", volumesDir, e.Name())
		}
	}
	if _, err := a.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Expand(id, 4<<20); !fault.Is(err, fault.NotFound) {
		t.Fatalf("expand of a deleted volume: %v", err)
	}
}

// TestExpandNeverTouchesALaterVolume: a delayed expansion of a deleted
// volume (a deposed leader) leaves the record of the volume created since
// at the same directory alone.
func TestExpandNeverTouchesALaterVolume(t *testing.T) {
	ctx := context.Background()
	_, a := newShare(t)
	old, err := a.Create(ctx, req("pvc-y", "pvc-y", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Delete(ctx, idOf(old)); err != nil {
		t.Fatal(err)
	}
	later, err := a.Create(ctx, req("pvc-y", "pvc-y", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Expand(idOf(old), 8<<20); !fault.Is(err, fault.NotFound) {
		t.Fatalf("expand with the old ID: %v", err)
	}
	// The same through the update itself, as if Lookup had raced.
	if r, err := updateRecordIf(a.records(), old.Key(), old.Token, func(r *Record) error { r.CapacityBytes = 8 << 20; return nil }); r != nil || err != nil {
		t.Fatalf("update with the old token: %+v %v", r, err)
	}
	now, err := a.Lookup(idOf(later))
	if err != nil || now == nil || now.CapacityBytes != later.CapacityBytes {
		t.Fatalf("the later volume's record: %+v %v", now, err)
	}
}

// TestInterruptedExpandIsSettled: a record left aside by an interrupted
// update is put back by the next update or by DeleteVolume, never lost.
func TestInterruptedExpandIsSettled(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	for _, then := range []string{"expand", "delete"} {
		rec, err := a.Create(ctx, req("pvc-"+then, "pvc-"+then, params.Delete))
		if err != nil {
			t.Fatal(err)
		}
		key := rec.Key()
		vols := filepath.Join(dir, volumesDir)
		if err := os.Rename(filepath.Join(vols, key), filepath.Join(vols, key+updateSuffix+rec.Token)); err != nil {
			t.Fatal(err)
		}
		switch then {
		case "expand":
			got, err := a.Expand(idOf(rec), 3<<20)
			if err != nil || got.CapacityBytes != 3<<20 {
				t.Fatalf("expand after an interrupted one: %+v %v", got, err)
			}
		case "delete":
			if _, err := a.Delete(ctx, idOf(rec)); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(dir, rec.SubDir)); err == nil {
				t.Fatal("the volume's directory survived its deletion")
			}
		}
		if _, err := os.Lstat(filepath.Join(vols, key+updateSuffix+rec.Token)); err == nil {
			t.Errorf("%s: the aside record is still there", then)
		}
	}
}
