package shares

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

func setup(t *testing.T, workers int) (*Set, *nfsmounttest.Fake, export.Export, string) {
	t.Helper()
	f := nfsmounttest.New(t.TempDir())
	e, _ := export.New("nfs.example", "/export")
	os.MkdirAll(f.ExportDir(e.Server, e.Share), 0o755)
	state := filepath.Join(t.TempDir(), "state")
	s, err := New(Config{StateDir: state, MountTimeout: time.Minute, PurgeWorkers: workers}, f)
	if err != nil {
		t.Fatal(err)
	}
	return s, f, e, state
}

func create(t *testing.T, s *Set, e export.Export, opts mountopts.Options, name string) volumeid.ID {
	t.Helper()
	var rec *provision.Record
	var shareOpts mountopts.Options
	err := s.On(context.Background(), e, opts, true, func(a *provision.Area, share *Share) (err error) {
		shareOpts = share.Options
		rec, err = a.Create(context.Background(), provision.Request{Name: name, SubDir: name, OnDelete: params.Delete, Mode: 0o770, UID: -1, GID: -1})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := s.VolumeID(e, rec, shareOpts)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDeletedVolumeIsPurgedOnItsOwnMount: a Set that purges keeps two
// mounts of a share, purges a deleted volume, and releases both at Close.
func TestDeletedVolumeIsPurgedOnItsOwnMount(t *testing.T) {
	s, f, e, _ := setup(t, 2)
	id := create(t, s, e, mountopts.Options{"nfsvers=4.1"}, "pvc-1")
	dir := filepath.Join(f.ExportDir(e.Server, e.Share), "pvc-1")
	os.WriteFile(filepath.Join(dir, "data"), []byte("x"), 0o644)
	err := s.OnVolume(context.Background(), id, func(a *provision.Area, share *Share) error {
		if _, err := a.Delete(context.Background(), id); err != nil {
			return err
		}
		s.Purge(share)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	trash := filepath.Join(f.ExportDir(e.Server, e.Share), ".nfsdir", "trash")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		// The purge counts its work after its last removal.
		ents, _ := os.ReadDir(trash)
		if len(ents) == 0 && s.Stats().PurgesPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trash still holds %d entries; stats %+v", len(ents), s.Stats())
		}
	}
	if st := s.Stats(); st.Mounts != 2 || st.PurgedEntries != 2 {
		t.Errorf("stats %+v, want 2 mounts and 2 entries purged", st)
	}
	s.StopPurges()
	s.Close(context.Background())
	if n := s.Stats().Mounts; n != 0 {
		t.Errorf("%d mounts kept after Close", n)
	}
	unmounts := 0
	for _, a := range f.Actions() {
		if strings.HasPrefix(a, "unmount ") {
			unmounts++
		}
	}
	if unmounts != 2 {
		t.Errorf("%d unmounts at Close, want 2: %v", unmounts, f.Actions())
	}
}

// TestSetWithoutPurgesKeepsOneMount: a Set made only to create or adopt
// (no purge workers) mounts a share once and starts no purge.
func TestSetWithoutPurgesKeepsOneMount(t *testing.T) {
	s, f, e, _ := setup(t, 0)
	create(t, s, e, nil, "pvc-1")
	os.MkdirAll(filepath.Join(f.ExportDir(e.Server, e.Share), ".nfsdir", "trash", "left.aaaaaaaa"), 0o755)
	s.Resume()
	if st := s.Stats(); st.Mounts != 1 || st.PurgesPending != 0 {
		t.Errorf("stats %+v, want one mount and no purge", st)
	}
	s.Close(context.Background())
}

// TestVolumeIDOfLongOptionsReachesTheShare: options too long for an ID
// are kept in the registry, and another Set on the same state directory
// (a restarted controller) reaches the volume with them; one with an
// empty state directory reaches it with the ID's own reach options.
func TestVolumeIDOfLongOptionsReachesTheShare(t *testing.T) {
	s, f, e, state := setup(t, 0)
	long := mountopts.Options{"nfsvers=4.1", "port=2049", "timeo=600", "retrans=5", "rsize=1048576", "wsize=1048576",
		"acregmin=3", "acregmax=60", "acdirmin=30", "acdirmax=60", "nconnect=4", "lookupcache=positive"}
	id := create(t, s, e, long, "pvc-long")
	if id.OptionsRef == "" {
		t.Fatalf("ID %s carries all %d options; the test needs options too long for an ID", id, len(long))
	}
	s.Close(context.Background())
	for _, dir := range []string{state, filepath.Join(t.TempDir(), "empty")} {
		other, err := New(Config{StateDir: dir, MountTimeout: time.Minute}, f)
		if err != nil {
			t.Fatal(err)
		}
		var got *provision.Record
		err = other.OnVolume(context.Background(), id, func(a *provision.Area, share *Share) (err error) {
			got, err = a.Lookup(id)
			return err
		})
		if err != nil || got == nil || got.SubDir != "pvc-long" {
			t.Errorf("state %s: lookup %v %v", dir, got, err)
		}
		other.Close(context.Background())
	}
}
