package csiserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/export"
)

// TestNamedExportMoves: volumes and snapshots of a class that names its
// export have IDs of the name; once the export moves (the driver's
// configuration says the name is at another server and path, serving
// the same files), every call on them reaches it there, the node mounts
// them from there with the volume's old attributes, and ListVolumes gives
// the same IDs. A name the configuration lacks is never taken as gone.
func TestNamedExportMoves(t *testing.T) {
	var d *Driver
	conn, m, _ := startFakeWith(t, func(c *config.Config) { c.Exports = []string{"main=nfs.example:/export"} }, func(dr *Driver) { d = dr })
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-moved", VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: map[string]string{"export": "main", "subDir": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	v := r.GetVolume()
	if !strings.HasPrefix(v.VolumeId, "n2|main|") || v.VolumeContext["export"] != "main" || v.VolumeContext["server"] != "nfs.example" || v.VolumeContext["share"] != "/export" {
		t.Fatalf("volume %s, context %v", v.VolumeId, v.VolumeContext)
	}
	if _, err := ctl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"export": "main"}}); err != nil {
		t.Errorf("GetCapacity of a named export: %v", err)
	}
	if _, err := ctl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"export": "other"}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("GetCapacity of an unknown export: %v", err)
	}
	snap, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v.VolumeId})
	if err != nil || !strings.HasPrefix(snap.GetSnapshot().GetSnapshotId(), "s2|main|") {
		t.Fatalf("snapshot %v, %v", snap, err)
	}

	// The export moves: the same files, served by another server at
	// another path.
	old := m.ExportDir("nfs.example", "/export")
	moved := m.ExportDir("nfs2.example", "/srv/moved")
	if err := os.MkdirAll(filepath.Dir(moved), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(old, moved); err != nil {
		t.Fatal(err)
	}
	to := export.Export{Server: "nfs2.example", Share: "/srv/moved"}
	d.controller.names.Replace(map[string]export.Export{"main": to})

	if _, err := ctl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}}); err != nil {
		t.Fatalf("expand after the move: %v", err)
	}
	target := filepath.Join(t.TempDir(), "t")
	if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
		VolumeCapability: rwx, VolumeContext: v.VolumeContext}); err != nil {
		t.Fatalf("publish after the move: %v", err)
	}
	if e, _ := m.Mounted(target); e == nil || e.Source != "nfs2.example:/srv/moved/a" {
		t.Errorf("published from %+v, want nfs2.example:/srv/moved/a", e)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	list, err := ctl.ListVolumes(ctx, &csi.ListVolumesRequest{})
	found := 0
	for _, e := range list.GetEntries() {
		if e.GetVolume().GetVolumeId() == v.VolumeId {
			found++
		}
	}
	if err != nil || found != 1 {
		t.Errorf("ListVolumes after the move (the old address still answers): %v, %v; want %s once", list.GetEntries(), err, v.VolumeId)
	}
	snaps, err := ctl.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(snaps.GetEntries()) != 1 || snaps.GetEntries()[0].GetSnapshot().GetSnapshotId() != snap.GetSnapshot().GetSnapshotId() {
		t.Errorf("ListSnapshots after the move: %v, %v", snaps.GetEntries(), err)
	}
	if _, err := ctl.GetSnapshot(ctx, &csi.GetSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()}); err != nil {
		t.Errorf("GetSnapshot after the move: %v", err)
	}

	// A name the configuration lacks: refused, never taken as gone.
	d.controller.names.Replace(nil)
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `export "main"`) {
		t.Errorf("DeleteVolume of an unknown export: %v", err)
	}
	if _, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteSnapshot of an unknown export: %v", err)
	}
	if _, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: map[string]string{"export": "main"}}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "chart value exports") {
		t.Errorf("CreateVolume on an unknown export: %v", err)
	}
	if _, err := os.Stat(filepath.Join(old, "a")); err != nil {
		t.Fatalf("the volume's directory: %v", err)
	}

	d.controller.names.Replace(map[string]export.Export{"main": to})
	if _, err := ctl.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshot().GetSnapshotId()}); err != nil {
		t.Fatal(err)
	}
	if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(old, "a")); !os.IsNotExist(err) {
		t.Errorf("deleted volume's directory: %v", err)
	}
}

func TestOnceEach(t *testing.T) {
	o := onceEach{max: 2}
	got := []bool{o.first("a"), o.first("a"), o.first("b"), o.first("c"), o.first("c"), o.first("b")}
	want := []bool{true, false, true, true, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("first: %v, want %v", got, want)
		}
	}
}
