package provision

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/usage"
)

// TestCountStoresAFigureTheViewReads: a count stores the volume's figure,
// a read-only View of the share finds the record and that figure, a
// shared volume reads its shared directory's figure, and deleting the
// volume removes its figure.
func TestCountStoresAFigureTheViewReads(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	rec, err := a.Create(ctx, req("pvc-u", "pvc-u", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := a.Figures().Of(rec); ok || err != nil {
		t.Fatalf("figure before any count: %v %v", ok, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pvc-u", "data"), []byte(strings.Repeat("x", 50000)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, fig, counted, err := countKey(ctx, a, rec.Key())
	if err != nil || !counted || fig.Bytes < 50000 || fig.Inodes != 2 || fig.Token != rec.Token {
		t.Fatalf("Count = %+v, %v, %v", fig, counted, err)
	}
	root, _ := os.OpenRoot(dir)
	defer root.Close()
	v, err := OpenView(root)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	got, err := v.Volume(idOf(rec))
	if err != nil || got == nil || got.CapacityBytes != rec.CapacityBytes {
		t.Fatalf("View.Volume = %+v, %v", got, err)
	}
	if vf, ok, err := v.Figure(got); !ok || err != nil || vf.Bytes != fig.Bytes {
		t.Fatalf("View.Figure = %+v, %v, %v; want %+v", vf, ok, err, fig)
	}
	// While an expansion holds the record aside, the View reads it there.
	if err := a.volumes.Rename(rec.Key(), rec.Key()+updateSuffix+rec.Token); err != nil {
		t.Fatal(err)
	}
	if got, err := v.Volume(idOf(rec)); err != nil || got == nil {
		t.Fatalf("View.Volume with the record aside = %+v, %v", got, err)
	}
	if err := settleUpdate(a.records(), rec.Key(), rec.Key()+updateSuffix+rec.Token); err != nil {
		t.Fatal(err)
	}

	// Shared volumes read their shared directory's figure.
	sreq := req("pvc-s1", "common", params.Retain)
	sreq.Shared = true
	s1, err := a.Create(ctx, sreq)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := a.Inventory().Keys()
	if err != nil || len(keys) != 3 {
		t.Fatalf("Keys = %v, %v; want the volume, the shared volume and its directory", keys, err)
	}
	for _, k := range keys {
		if _, _, _, err := countKey(ctx, a, k); err != nil {
			t.Fatalf("Count(%s): %v", k, err)
		}
	}
	if _, ok, err := v.Figure(s1); !ok || err != nil {
		t.Fatalf("shared volume's figure: %v %v", ok, err)
	}

	if _, err := a.Delete(ctx, idOf(rec)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".nfsdir/usage", rec.Key())); !os.IsNotExist(err) {
		t.Fatalf("figure of a deleted volume: %v", err)
	}
	// A stray figure (its record removed by hand) is swept.
	os.Symlink(`{"token":"x"}`, filepath.Join(dir, ".nfsdir/usage/stray"))
	keys, _ = a.Inventory().Keys()
	a.Figures().Drop(keys)
	if _, err := os.Lstat(filepath.Join(dir, ".nfsdir/usage/stray")); !os.IsNotExist(err) {
		t.Fatalf("stray figure kept: %v", err)
	}
}

// TestCountRefusesAReplacedDirectory: a directory put where the volume's
// was is not counted (and nothing is stored for it).
func TestCountRefusesAReplacedDirectory(t *testing.T) {
	ctx := context.Background()
	dir, a := newShare(t)
	rec, err := a.Create(ctx, req("pvc-r", "pvc-r", params.Delete))
	if err != nil {
		t.Fatal(err)
	}
	os.Rename(filepath.Join(dir, "pvc-r"), filepath.Join(dir, "moved"))
	os.Mkdir(filepath.Join(dir, "pvc-r"), 0o755)
	if _, _, counted, err := countKey(ctx, a, rec.Key()); counted || err == nil {
		t.Fatalf("Count of a replaced directory: counted %v, %v", counted, err)
	}
	os.Remove(filepath.Join(dir, "pvc-r"))
	os.Symlink("moved", filepath.Join(dir, "pvc-r"))
	if _, _, counted, err := countKey(ctx, a, rec.Key()); counted || err == nil {
		t.Fatalf("Count through a symlink: counted %v, %v", counted, err)
	}
}

// countKey reads the record under key and counts it, as the accountant
// does.
func countKey(ctx context.Context, a *Area, key string) (*Record, capacity.Figure, bool, error) {
	v, _, err := a.Book().Volume(key)
	if err != nil {
		return nil, capacity.Figure{}, false, err
	}
	rec, _ := v.Ref.(*Record)
	fig, counted, err := a.Book().Count(ctx, v, usage.DefaultWalker)
	return rec, fig, counted, err
}
