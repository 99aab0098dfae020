package csiserver

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// volumeFrom asks for a volume named name, filled from cs when set.
func volumeFrom(name string, size int64, cs *csi.VolumeContentSource) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: map[string]string{"server": "nfs.example", "share": "/export"}, CapacityRange: &csi.CapacityRange{RequiredBytes: size},
		VolumeContentSource: cs}
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		case info.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "-> " + l
		case info.IsDir() && rel != ".":
			out[rel] = "dir"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d entries %v, want %d %v", what, len(got), got, len(want), want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
}

func TestSnapshotRestoreAndClone(t *testing.T) {
	conn, m := startFake(t)
	ctl := csi.NewControllerClient(conn)
	share := m.ExportDir("nfs.example", "/export")
	src, err := ctl.CreateVolume(ctx, volumeFrom("pvc-src", 1<<20, nil))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(share, "pvc-src")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a/b/data"), []byte("before"), 0o644))
	must(os.Symlink("/etc/passwd", filepath.Join(dir, "escape")))
	before := readTree(t, dir)

	snap, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: src.Volume.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	s := snap.Snapshot
	if !s.ReadyToUse || s.SourceVolumeId != src.Volume.VolumeId || s.SizeBytes != 1<<20 || s.CreationTime == nil {
		t.Fatalf("CreateSnapshot = %+v; want a ready snapshot of %q, 1 MiB", s, src.Volume.VolumeId)
	}
	again, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: src.Volume.VolumeId})
	if err != nil || again.Snapshot.SnapshotId != s.SnapshotId {
		t.Fatalf("retried CreateSnapshot = %v, %v; want the same snapshot %q", again, err, s.SnapshotId)
	}
	other, err := ctl.CreateVolume(ctx, volumeFrom("pvc-other", 0, nil))
	must(err)
	if _, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: other.Volume.VolumeId}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("same snapshot name, other source: %v; want AlreadyExists", err)
	}

	// The source changes after the snapshot; the restore has the old data.
	must(os.WriteFile(filepath.Join(dir, "a/b/data"), []byte("after"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "new"), []byte("new"), 0o644))
	if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-small", 1<<10, fromSnapshot(s.SnapshotId))); status.Code(err) != codes.OutOfRange {
		t.Errorf("restore into a smaller volume: %v; want OutOfRange", err)
	}
	restored, err := ctl.CreateVolume(ctx, volumeFrom("pvc-restored", 1<<20, fromSnapshot(s.SnapshotId)))
	if err != nil {
		t.Fatal(err)
	}
	if restored.Volume.ContentSource.GetSnapshot().GetSnapshotId() != s.SnapshotId {
		t.Errorf("restored volume's content source = %v", restored.Volume.ContentSource)
	}
	sameTree(t, "restored volume", readTree(t, filepath.Join(share, "pvc-restored")), before)
	if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-restored", 1<<20, fromSnapshot(s.SnapshotId))); err != nil {
		t.Errorf("replayed restore: %v", err)
	}
	if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-restored", 1<<20, nil)); status.Code(err) != codes.AlreadyExists {
		t.Errorf("same volume name without its source: %v; want AlreadyExists", err)
	}

	clone, err := ctl.CreateVolume(ctx, volumeFrom("pvc-clone", 1<<20, fromVolume(src.Volume.VolumeId)))
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "clone", readTree(t, filepath.Join(share, "pvc-clone")), readTree(t, dir))
	if clone.Volume.ContentSource.GetVolume().GetVolumeId() != src.Volume.VolumeId {
		t.Errorf("clone's content source = %v", clone.Volume.ContentSource)
	}

	// Listings: by ID, by source, all, paged.
	_, err = ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-2", SourceVolumeId: other.Volume.VolumeId})
	must(err)
	byID, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: s.SnapshotId})
	if err != nil || len(byID.Entries) != 1 || byID.Entries[0].Snapshot.SnapshotId != s.SnapshotId || !byID.Entries[0].Snapshot.ReadyToUse {
		t.Errorf("ListSnapshots by ID = %v, %v", byID, err)
	}
	got, err := ctl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: s.SnapshotId})
	if err != nil || got.Snapshot.SnapshotId != s.SnapshotId || got.Snapshot.SourceVolumeId != src.Volume.VolumeId ||
		!got.Snapshot.ReadyToUse || got.Snapshot.SizeBytes != 1<<20 {
		t.Errorf("GetSnapshot = %v, %v; want the ready snapshot %q of %q", got, err, s.SnapshotId, src.Volume.VolumeId)
	}
	if _, err := ctl.GetSnapshot(ctx, &csi.GetSnapshotRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetSnapshot without an ID: %v; want InvalidArgument", err)
	}
	if _, err := ctl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: "not-ours"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetSnapshot of a foreign ID: %v; want NotFound", err)
	}
	bySrc, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: other.Volume.VolumeId})
	if err != nil || len(bySrc.Entries) != 1 || bySrc.Entries[0].Snapshot.SourceVolumeId != other.Volume.VolumeId {
		t.Errorf("ListSnapshots by source = %v, %v", bySrc, err)
	}
	page, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: 1})
	if err != nil || len(page.Entries) != 1 || page.NextToken == "" {
		t.Fatalf("first page = %v, %v", page, err)
	}
	rest, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: page.NextToken})
	if err != nil || len(rest.Entries) != 1 || rest.NextToken != "" || rest.Entries[0].Snapshot.SnapshotId == page.Entries[0].Snapshot.SnapshotId {
		t.Errorf("second page = %v, %v", rest, err)
	}
	for _, e := range append(page.Entries, rest.Entries...) {
		if e.Snapshot.SnapshotId == s.SnapshotId {
			continue
		}
		if e.Snapshot.SourceVolumeId != other.Volume.VolumeId {
			t.Errorf("listed snapshot %v", e.Snapshot)
		}
	}

	// A snapshot outlives its source, and restores after it is gone.
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: src.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}
	_, err = ctl.CreateVolume(ctx, volumeFrom("pvc-late", 1<<20, fromSnapshot(s.SnapshotId)))
	must(err)
	sameTree(t, "restore after the source was deleted", readTree(t, filepath.Join(share, "pvc-late")), before)
	if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-orphan-clone", 1<<20, fromVolume(src.Volume.VolumeId))); status.Code(err) != codes.NotFound {
		t.Errorf("clone of a deleted volume: %v; want NotFound", err)
	}

	for i := 0; i < 2; i++ { // a second delete is a no-op
		if _, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: s.SnapshotId}); err != nil {
			t.Fatal(err)
		}
	}
	gone, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: s.SnapshotId})
	if err != nil || len(gone.Entries) != 0 {
		t.Errorf("ListSnapshots of a deleted snapshot = %v, %v", gone, err)
	}
	if _, err := ctl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: s.SnapshotId}); status.Code(err) != codes.NotFound {
		t.Errorf("GetSnapshot of a deleted snapshot: %v; want NotFound", err)
	}
	if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-after-delete", 1<<20, fromSnapshot(s.SnapshotId))); status.Code(err) != codes.NotFound {
		t.Errorf("restore of a deleted snapshot: %v; want NotFound", err)
	}
	// The restored volumes are volumes of their own.
	sameTree(t, "restored volume after its snapshot was deleted", readTree(t, filepath.Join(share, "pvc-restored")), before)
	entries, _ := os.ReadDir(filepath.Join(share, ".nfsdir", "snapshots"))
	for _, e := range entries {
		if e.Name() != "" && e.IsDir() && e.Name()[0] == '.' {
			t.Errorf("an attempt's copy was left: %s", e.Name())
		}
	}
	if _, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "not-ours"}); err != nil {
		t.Errorf("DeleteSnapshot of a foreign ID: %v", err)
	}
}

func TestRestoreOfACSIDriverNFSArchive(t *testing.T) {
	conn, m := startFake(t)
	ctl := csi.NewControllerClient(conn)
	share := m.ExportDir("nfs.example", "/export")
	if err := os.MkdirAll(filepath.Join(share, "snapshot-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "./a/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "./a/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 3})
	tw.Write([]byte("old"))
	tw.WriteHeader(&tar.Header{Name: "../../outside", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1})
	tw.Write([]byte("x"))
	tw.WriteHeader(&tar.Header{Name: "./a/suid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 1, Uid: 0, Gid: 0})
	tw.Write([]byte("s"))
	tw.Close()
	zw.Close()
	if err := os.WriteFile(filepath.Join(share, "snapshot-1", "pvc-old.tar.gz"), buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	id := "nfs.example#export#snapshot-1#snapshot-1#pvc-old"
	v, err := ctl.CreateVolume(ctx, volumeFrom("pvc-new", 1<<20, fromSnapshot(id)))
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, "restored csi-driver-nfs snapshot", readTree(t, filepath.Join(share, "pvc-new")), map[string]string{"a": "dir", "a/f": "old", "a/suid": "s"})
	suid := func(volume string) (os.FileMode, uint32) {
		t.Helper()
		st, err := os.Lstat(filepath.Join(share, volume, "a", "suid"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode() & (os.ModeSetuid | os.ModeSetgid | 0o777), st.Sys().(*syscall.Stat_t).Uid
	}
	if mode, _ := suid("pvc-new"); mode != 0o755 {
		t.Errorf("restored setuid file: mode %v, want its setuid bit cleared", mode)
	}
	// keepSetIDOnRestore keeps the bit; a StorageClass uid gives the
	// volume's owner to what is restored.
	kept := volumeFrom("pvc-kept", 1<<20, fromSnapshot(id))
	kept.Parameters["keepSetIDOnRestore"] = "true"
	if _, err := ctl.CreateVolume(ctx, kept); err != nil {
		t.Fatal(err)
	}
	if mode, _ := suid("pvc-kept"); mode != os.ModeSetuid|0o755 {
		t.Errorf("with keepSetIDOnRestore: mode %v", mode)
	}
	if os.Geteuid() == 0 {
		owned := volumeFrom("pvc-owned", 1<<20, fromSnapshot(id))
		owned.Parameters["uid"] = "1000"
		if _, err := ctl.CreateVolume(ctx, owned); err != nil {
			t.Fatal(err)
		}
		if _, uid := suid("pvc-owned"); uid != 1000 {
			t.Errorf("with uid 1000: the restored file is owned by %d", uid)
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(share), "outside")); err == nil {
		t.Error("an archive entry landed outside the volume")
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.Volume.VolumeId}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(share, "snapshot-1", "pvc-old.tar.gz")); err != nil {
		t.Errorf("the archive went: %v", err)
	}
	for _, bad := range []string{"nfs.example#export#missing#missing#pvc-old", "nfs.example#export#..#..#x"} {
		if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-bad", 1<<20, fromSnapshot(bad))); status.Code(err) != codes.NotFound {
			t.Errorf("restore of %q: %v; want NotFound", bad, err)
		}
	}
	if _, err := ctl.CreateVolume(ctx, volumeFrom("pvc-other", 1<<20, fromSnapshot("other.example#export#snapshot-1#snapshot-1#pvc-old"))); status.Code(err) != codes.InvalidArgument {
		t.Errorf("restore from another server: %v; want InvalidArgument", err)
	}
}

// TestAFillThatCannotSucceedLeavesNothing: csi-provisioner takes a final
// error as the end of provisioning and never deletes a volume it was not
// given, so a restore whose fill fails for good (a corrupt archive here;
// a source deleted meanwhile alike) must not leave its half volume, record
// or directory behind; a retry starts over and fails the same way.
func TestAFillThatCannotSucceedLeavesNothing(t *testing.T) {
	conn, m := startFake(t)
	ctl := csi.NewControllerClient(conn)
	share := m.ExportDir("nfs.example", "/export")
	if err := os.MkdirAll(filepath.Join(share, "snapshot-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, "snapshot-1", "pvc-old.tar.gz"), []byte("\x1f\x8b\x08\x00truncated"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := "nfs.example#export#snapshot-1#snapshot-1#pvc-old"
	for i := range 3 {
		req := volumeFrom("pvc-doomed", 1<<20, fromSnapshot(id))
		if i == 2 { // whatever its policy: a half volume is no data to keep
			req.Parameters["onDelete"] = "retain"
		}
		_, err := ctl.CreateVolume(ctx, req)
		switch status.Code(err) {
		case codes.OK, codes.Aborted, codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted:
			t.Fatalf("restore of a corrupt archive: %v; want a final error", err)
		}
		if _, serr := os.Lstat(filepath.Join(share, "pvc-doomed")); serr == nil {
			t.Errorf("after %v: the half-filled directory is left", err)
		}
		records, _ := os.ReadDir(filepath.Join(share, ".nfsdir", "volumes"))
		for _, r := range records {
			t.Errorf("after %v: record %s is left", err, r.Name())
		}
	}
}
