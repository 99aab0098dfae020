package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/csiserver"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

var (
	stageVolumes = flag.Int("stage-volumes", 200, "volumes published on one node in each node mode (the NodeStage rows; 0: none)")
	stageOnly    = flag.Bool("stage-only", false, "measure only the NodeStage rows, then stop")
)

// mStage is the measure of publishing many volumes on one node in each
// node mode.
func mStage() string {
	return fmt.Sprintf("%d volumes of one export published on one node", *stageVolumes)
}

// stageNode starts a second driver in the guest, a node plugin in
// NodeStage mode publishing below root, beside the bench's own (which
// publishes with an NFS mount each), and returns its node client and its
// stage directory.
func (b *bench) stageNode(cfg config.Config, root string) (csi.NodeClient, string) {
	cfg.Mode, cfg.NodeStage = config.ModeNode, true
	// Its targets, and so the users of its mounts of the export, are
	// below root alone: not the bench driver's own mounts of it.
	cfg.PublishRoot = root
	cfg.StateDir = filepath.Join(b.work, "state-stage")
	cfg.Endpoint = "unix://" + filepath.Join(b.work, "csi-stage.sock")
	cfg.QuotaCert, cfg.QuotaKey, cfg.QuotaCA = "", "", ""
	d, err := csiserver.New(cfg, nfsmount.NewSystem())
	if err != nil {
		die(err)
	}
	l, err := csiserver.Listen(cfg.Endpoint)
	if err != nil {
		die(err)
	}
	go d.Serve(b.ctx, l)
	conn, err := grpc.NewClient("unix:"+l.Addr().(*net.UnixAddr).Name, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die(err)
	}
	return csi.NewNodeClient(conn), filepath.Join(cfg.StateDir, "node", "stage")
}

// nfsMountsBelow counts the NFS mounts (binds of NFS included) whose mount
// points are below dir.
func nfsMountsBelow(dir string) int {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		_, after, ok := strings.Cut(line, " - ")
		if ok && len(f) > 4 && strings.HasPrefix(f[4], dir+"/") && strings.HasPrefix(after, "nfs") {
			n++
		}
	}
	return n
}

// timed runs f for each of n items, one at a time, and returns the total
// time and the NFS calls made.
func timed(n int, f func(i int) error) (time.Duration, int64) {
	c0 := lab.NFSCalls()
	t0 := time.Now()
	for i := range n {
		if err := f(i); err != nil {
			die(err)
		}
	}
	return time.Since(t0), lab.NFSCalls() - c0
}

// stageRows publishes and unpublishes -stage-volumes volumes of one export
// on the node, one at a time as a node's pods start: first with an NFS
// mount each (the default, and what csi-driver-nfs does), then in NodeStage
// mode (a stage and a publish each, one NFS mount of the export), beside
// the bare operations underneath each (mount -t nfs and umount; mount
// --bind and umount).
func (b *bench) stageRows(cfg config.Config) {
	n := *stageVolumes
	if n <= 0 {
		return
	}
	root := filepath.Join(b.work, "node-modes")
	staged, stageDir := b.stageNode(cfg, root)
	var vols []*csi.Volume
	for i := range n {
		vols = append(vols, b.create(fmt.Sprint("pvc-node-", i)))
	}
	dir := func(kind string, i int) string {
		p := filepath.Join(root, kind, fmt.Sprint(i))
		if err := os.MkdirAll(p, 0o755); err != nil {
			die(err)
		}
		return p
	}
	pub := func(node csi.NodeClient, v *csi.Volume, staging, target string, ro bool) error {
		_, err := node.NodePublishVolume(b.ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), StagingTargetPath: staging,
			TargetPath: target, VolumeCapability: b.vc, VolumeContext: v.GetVolumeContext(), Readonly: ro})
		return err
	}
	unpub := func(node csi.NodeClient, v *csi.Volume, target string) error {
		_, err := node.NodeUnpublishVolume(b.ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target})
		return err
	}
	sh := func(args ...string) error {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	src := func(i int) string {
		return b.server + ":" + filepath.Join(b.export, vols[i].GetVolumeContext()["subDir"])
	}

	// The bare operations.
	bareMount, _ := timed(n, func(i int) error {
		return sh("mount", "-t", "nfs", "-o", strings.Join(append([]string{"nosuid", "nodev"}, b.flags...), ","), src(i), dir("bare", i))
	})
	bareUmount, _ := timed(n, func(i int) error { return sh("umount", dir("bare", i)) })
	bareShare := filepath.Join(root, "bare-share")
	os.MkdirAll(bareShare, 0o755)
	if err := sh("mount", "-t", "nfs", "-o", strings.Join(b.flags, ","), b.server+":"+b.export, bareShare); err != nil {
		die(err)
	}
	bareBind, _ := timed(n, func(i int) error {
		return sh("mount", "--bind", filepath.Join(bareShare, vols[i].GetVolumeContext()["subDir"]), dir("bare-bind", i))
	})
	bareUnbind, _ := timed(n, func(i int) error { return sh("umount", dir("bare-bind", i)) })
	sh("umount", bareShare)

	// The default: an NFS mount per publish.
	perPod, perPodCalls := timed(n, func(i int) error { return pub(b.node, vols[i], "", dir("default", i), false) })
	perPodMounts := nfsMountsBelow(filepath.Join(root, "default"))
	perPodOff, perPodOffCalls := timed(n, func(i int) error { return unpub(b.node, vols[i], dir("default", i)) })

	// NodeStage: a stage and a publish each.
	staging := func(i int) string { return filepath.Join(dir("staging", i), "globalmount") }
	stageT, stageCalls := timed(n, func(i int) error {
		_, err := staged.NodeStageVolume(b.ctx, &csi.NodeStageVolumeRequest{VolumeId: vols[i].GetVolumeId(), StagingTargetPath: staging(i),
			VolumeCapability: b.vc, VolumeContext: vols[i].GetVolumeContext()})
		return err
	})
	shareMounts := nfsMountsBelow(stageDir)
	pubT, pubCalls := timed(n, func(i int) error { return pub(staged, vols[i], staging(i), dir("staged", i), false) })
	offT, offCalls := timed(n, func(i int) error { return unpub(staged, vols[i], dir("staged", i)) })
	unstageT, unstageCalls := timed(n, func(i int) error {
		_, err := staged.NodeUnstageVolume(b.ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vols[i].GetVolumeId(), StagingTargetPath: staging(i)})
		return err
	})
	if left := nfsMountsBelow(stageDir); left != 0 {
		die(fmt.Errorf("NodeStage: %d mounts of the export left after the last unstage", left))
	}

	add(mStage(), fmt.Sprintf("default: NodePublishVolume ×%d (%d NFS mounts)", n, perPodMounts), perPod, perOp(perPodCalls, -1, n),
		vsBare(fmt.Sprintf("mount -t nfs ×%d", n), bareMount))
	add(mStage(), fmt.Sprintf("NodeStage: NodeStageVolume then NodePublishVolume ×%d (%d NFS mount of the export)", n, shareMounts),
		stageT+pubT, perOp(stageCalls+pubCalls, perPodCalls, n),
		vsBare(fmt.Sprintf("mount -t nfs once, mount --bind ×%d", n), bareBind), vsOther("the default mode", "", perPod))
	add(mStage(), fmt.Sprintf("NodeStage: NodePublishVolume ×%d of staged volumes (a pod's start)", n), pubT, perOp(pubCalls, -1, n),
		vsBare(fmt.Sprintf("mount --bind ×%d", n), bareBind), vsOther("the default mode", "", perPod))
	add(mStage(), fmt.Sprintf("default: NodeUnpublishVolume ×%d", n), perPodOff, perOp(perPodOffCalls, -1, n),
		vsBare(fmt.Sprintf("umount ×%d", n), bareUmount))
	add(mStage(), fmt.Sprintf("NodeStage: NodeUnpublishVolume then NodeUnstageVolume ×%d", n), offT+unstageT, perOp(offCalls+unstageCalls, perPodOffCalls, n),
		vsBare(fmt.Sprintf("umount ×%d of binds", n), bareUnbind), vsOther("the default mode", "", perPodOff))
	for _, v := range vols {
		if _, err := b.ctl.DeleteVolume(context.WithoutCancel(b.ctx), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
			die(err)
		}
	}
}
