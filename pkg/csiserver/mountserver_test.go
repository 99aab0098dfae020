package csiserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

// TestMountServerMovesAVolume: a VolumeAttributesClass's mountServer
// sends the volume's next publishes to another address of its server once
// the controller has seen the volume's own directory there; an address
// that serves a copy of the share (same records, other directories), or
// none, or does not answer, is refused with the record unchanged; "" goes
// back to the export's own address, and so does the export's own address.
func TestMountServerMovesAVolume(t *testing.T) {
	conn, m, _ := startFakeWith(t, nil)
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	v := createFake(t, ctl, "pvc-moves", nil)
	share := m.ExportDir("nfs.example", "/export")
	// Another name of the same server: the same directory.
	if err := os.Symlink(filepath.Dir(share), filepath.Dir(m.ExportDir("alias.example", "/export"))); err != nil {
		t.Fatal(err)
	}
	// A server holding a copy of the share.
	copied := m.ExportDir("copy.example", "/export")
	os.MkdirAll(filepath.Dir(copied), 0o755)
	if out, err := exec.Command("cp", "-a", share, copied).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	m.MountErr["dead.example:/export"] = fault.New(fault.Unavailable, "mount.nfs: Connection timed out")
	modify := func(server string) error {
		_, err := ctl.ControllerModifyVolume(ctx, &csi.ControllerModifyVolumeRequest{VolumeId: v.VolumeId, MutableParameters: map[string]string{"mountServer": server}})
		return err
	}
	publishedFrom := func() string {
		t.Helper()
		target := filepath.Join(t.TempDir(), "t")
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: rwx, VolumeContext: v.VolumeContext}); err != nil {
			t.Fatal(err)
		}
		defer node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target})
		e, _ := m.Mounted(target)
		return e.Source
	}
	subDir := v.VolumeContext["subDir"]
	if got := publishedFrom(); !strings.HasPrefix(got, "nfs.example:") {
		t.Fatalf("published from %s before any move", got)
	}
	if err := modify("alias.example"); err != nil {
		t.Fatal(err)
	}
	if rec := readRecordFile(t, share, subDir); rec.MountServer != "alias.example" {
		t.Fatalf("record after the move: %+v", rec)
	}
	if got := publishedFrom(); got != "alias.example:/export/"+subDir {
		t.Fatalf("published from %s after the move to alias.example", got)
	}
	for server, want := range map[string]codes.Code{"copy.example": codes.FailedPrecondition, "dead.example": codes.Unavailable, "none.example": codes.Unavailable} {
		err := modify(server)
		if status.Code(err) != want {
			t.Errorf("move to %s: %v, want %s", server, err, want)
		}
		if rec := readRecordFile(t, share, subDir); rec.MountServer != "alias.example" {
			t.Errorf("a refused move to %s changed the record: %+v", server, rec)
		}
	}
	for _, back := range []string{"", "nfs.example"} {
		if err := modify("alias.example"); err != nil {
			t.Fatal(err)
		}
		if err := modify(back); err != nil {
			t.Fatal(err)
		}
		if rec := readRecordFile(t, share, subDir); rec.MountServer != "" {
			t.Fatalf("record after moving back with %q: %+v", back, rec)
		}
		if got := publishedFrom(); !strings.HasPrefix(got, "nfs.example:") {
			t.Fatalf("published from %s after moving back with %q", got, back)
		}
	}
	// Given at creation (a claim of a class naming mountServer), and again
	// by a retry of that creation.
	for range 2 {
		r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-born-moved", VolumeCapabilities: []*csi.VolumeCapability{rwx},
			Parameters: map[string]string{"server": "nfs.example", "share": "/export"}, MutableParameters: map[string]string{"mountServer": "alias.example"}})
		if err != nil {
			t.Fatal(err)
		}
		if rec := readRecordFile(t, share, r.GetVolume().GetVolumeContext()["subDir"]); rec.MountServer != "alias.example" {
			t.Fatalf("record of a volume made with mountServer: %+v", rec)
		}
	}
	if !slices.ContainsFunc(m.Actions(), func(a string) bool { return strings.HasPrefix(a, "mount alias.example:/export ") }) {
		t.Errorf("the controller never mounted the new address: %v", m.Actions())
	}
}
