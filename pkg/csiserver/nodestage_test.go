package csiserver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
)

func hasCap(t *testing.T, node csi.NodeClient, c csi.NodeServiceCapability_RPC_Type) bool {
	t.Helper()
	r, err := node.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(r.GetCapabilities(), func(x *csi.NodeServiceCapability) bool { return x.GetRpc().GetType() == c })
}

// TestNodeStageMode: with --node-stage the node stages: three volumes of
// one export on one NFS mount of it, each bound on its staging path and
// from there on its pods' targets (read-only where asked); a publish of a
// volume not staged, or a staging path outside kubelet's layout, is
// refused; unstaging the last volume unmounts the export.
func TestNodeStageMode(t *testing.T) {
	kubelet := t.TempDir()
	conn, m, _ := startFakeWith(t, func(c *config.Config) { c.PublishRoot, c.KubeletDir, c.NodeStage = "", kubelet, true })
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	if !hasCap(t, node, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		t.Fatal("STAGE_UNSTAGE_VOLUME is not offered")
	}
	staging := func(i int) string {
		p := filepath.Join(kubelet, "plugins/kubernetes.io/csi/nfsdir.csi.io", fmt.Sprint("h", i), "globalmount")
		os.MkdirAll(filepath.Dir(p), 0o750)
		return p
	}
	target := func(pod, vol string) string {
		p := filepath.Join(kubelet, "pods", pod, "volumes/kubernetes.io~csi", vol, "mount")
		os.MkdirAll(filepath.Dir(p), 0o750)
		return p
	}
	var vols []*csi.Volume
	for i := range 3 {
		v := createFake(t, ctl, fmt.Sprint("pvc-s", i), nil)
		vols = append(vols, v)
		for range 2 { // a retry is the stage done again
			if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging(i),
				VolumeCapability: rwx, VolumeContext: v.VolumeContext}); err != nil {
				t.Fatalf("stage %d: %v", i, err)
			}
		}
	}
	stageMounts := func() (mounts, binds int) {
		for _, a := range m.Actions() {
			mounts += btoi(strings.HasPrefix(a, "mount ") && strings.Contains(a, "/node/stage/"))
			binds += btoi(strings.HasPrefix(a, "bind "))
		}
		return
	}
	if mounts, binds := stageMounts(); mounts != 1 || binds != 3 {
		t.Fatalf("three staged volumes of one export: %d NFS mounts, %d binds; want 1 and 3", mounts, binds)
	}
	pub := func(v *csi.Volume, stagingPath, target string, ro bool) error {
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: stagingPath,
			TargetPath: target, VolumeCapability: rwx, VolumeContext: v.VolumeContext, Readonly: ro})
		return err
	}
	if err := pub(vols[0], staging(0), target("p1", "v0"), false); err != nil {
		t.Fatal(err)
	}
	if err := pub(vols[0], staging(0), target("p2", "v0"), true); err != nil {
		t.Fatal(err)
	}
	if e, _ := m.Mounted(target("p2", "v0")); e == nil || !slices.Contains(e.Options, "ro") || !strings.HasSuffix(e.Source, strings.TrimPrefix(vols[0].VolumeContext["subDir"], "/")) {
		t.Fatalf("read-only publish shows %+v", e)
	}
	if mounts, _ := stageMounts(); mounts != 1 {
		t.Fatalf("publishes made %d NFS mounts", mounts)
	}
	if err := pub(vols[1], staging(0), target("p3", "v1"), false); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("publish from another volume's staging path: %v", err)
	}
	if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vols[1].VolumeId, StagingTargetPath: target("p4", "v1"),
		VolumeCapability: rwx, VolumeContext: vols[1].VolumeContext}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("staging on a pod's target: %v", err)
	}
	if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: vols[1].VolumeId, StagingTargetPath: staging(0),
		VolumeCapability: rwx, VolumeContext: vols[1].VolumeContext}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("staging on another volume's staging path: %v", err)
	}
	for _, tg := range []string{target("p1", "v0"), target("p2", "v0")} {
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vols[0].VolumeId, TargetPath: tg}); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range vols {
		for range 2 {
			if _, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: v.VolumeId, StagingTargetPath: staging(i)}); err != nil {
				t.Fatalf("unstage %d: %v", i, err)
			}
		}
		table, _ := m.Table()
		left := 0
		for p := range table {
			left += btoi(strings.Contains(p, "/node/stage/"))
		}
		if want := btoi(i < 2); left != want {
			t.Fatalf("after unstaging %d of 3: %d node mounts of the export, want %d", i+1, left, want)
		}
	}
}

// TestNodeWithoutStageMode: by default the node does not offer staging
// and refuses a NodeStageVolume.
func TestNodeWithoutStageMode(t *testing.T) {
	conn, _ := startFake(t)
	node := csi.NewNodeClient(conn)
	if hasCap(t, node, csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		t.Fatal("STAGE_UNSTAGE_VOLUME offered without --node-stage")
	}
	_, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: "v", StagingTargetPath: filepath.Join(t.TempDir(), "s"), VolumeCapability: rwx})
	if status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("NodeStageVolume = %v", err)
	}
}

func TestReadOnlyFlagsKeepRestrictions(t *testing.T) {
	got := readOnlyFlags([]string{"rw", "nosuid", "nodev", "relatime", "vers=4.2", "rsize=1048576"})
	if !slices.Equal(got, []string{"ro", "nosuid", "nodev", "relatime"}) {
		t.Fatalf("readOnlyFlags = %v", got)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
