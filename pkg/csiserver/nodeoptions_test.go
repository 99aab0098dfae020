package csiserver

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
)

// TestMountOptionsNotApplied: a volume mounted while another mount of its
// server holds other timeo and nconnect gets those (the fake shares them
// as the Linux client does): NodePublishVolume succeeds, and
// NodeGetVolumeHealth says so (DEGRADED, MountOptionsNotApplied, naming
// the other mount), until it is unpublished; with strictMountOptions in
// the class, the same publish is FailedPrecondition and nothing stays
// mounted; with nosharecache it gets its options.
func TestMountOptionsNotApplied(t *testing.T) {
	var fake *nfsmounttest.Fake
	conn, fake, _ := startFakeWith(t, nil, func(d *Driver) {})
	fake.ShareCache = true
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	first := createFake(t, ctl, "pvc-first", nil)
	second := createFake(t, ctl, "pvc-second", nil)
	strict := createFake(t, ctl, "pvc-strict", map[string]string{"strictMountOptions": "true"})
	if strict.VolumeContext["strictMountOptions"] != "true" {
		t.Fatalf("the volume's attributes do not carry strictMountOptions: %v", strict.VolumeContext)
	}
	publish := func(v *csi.Volume, opts ...string) (string, error) {
		target := filepath.Join(t.TempDir(), "t")
		_, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, opts...), VolumeContext: v.VolumeContext})
		return target, err
	}
	health := func(v *csi.Volume, target string) []*csi.VolumeHealth_VolumeHealthEntry {
		r, err := node.NodeGetVolumeHealth(ctx, &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId, VolumePublishPath: target})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetVolumeHealth().GetHealthStatuses()
	}
	t1, err := publish(first, "nfsvers=4.2", "timeo=600", "nconnect=1")
	if err != nil {
		t.Fatal(err)
	}
	if h := health(first, t1); len(h) != 0 {
		t.Errorf("the first mount: %v", h)
	}
	t2, err := publish(second, "nfsvers=4.2", "timeo=50", "nconnect=4")
	if err != nil {
		t.Fatal(err)
	}
	h := health(second, t2)
	if len(h) != 1 || h[0].Status != csi.VolumeHealthErrorType_DEGRADED || h[0].Reason != "MountOptionsNotApplied" ||
		!strings.Contains(h[0].Message, "timeo=50 (got timeo=600)") || !strings.Contains(h[0].Message, "nconnect=4 (got nconnect=1)") ||
		!strings.Contains(h[0].Message, "this node also mounts nfs.example at") || !strings.Contains(h[0].Message, "nosharecache") {
		t.Errorf("health of the second mount: %v", h)
	}
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: second.VolumeId, TargetPath: t2}); err != nil {
		t.Fatal(err)
	}
	if h := health(second, ""); len(h) != 0 {
		t.Errorf("an unpublished target keeps its note: %v", h)
	}
	t3, err := publish(strict, "nfsvers=4.2", "timeo=50")
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "strictMountOptions") || !strings.Contains(err.Error(), "timeo=50 (got timeo=600)") {
		t.Errorf("strict publish: %v, want FailedPrecondition naming the difference", err)
	}
	if e, _ := fake.Mounted(t3); e != nil {
		t.Errorf("a strict publish that did not get its options stays mounted: %+v", e)
	}
	t4, err := publish(strict, "nfsvers=4.2", "timeo=50", "nosharecache")
	if err != nil {
		t.Fatalf("strict publish with nosharecache: %v", err)
	}
	if h := health(strict, t4); len(h) != 0 {
		t.Errorf("with nosharecache: %v", h)
	}
}
