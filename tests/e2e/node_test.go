package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// kubeletTarget makes kubelet's parent directory of a CSI volume's target
// below kubeletDir (kubelet creates it before NodePublishVolume) and
// returns the target.
func kubeletTarget(t *testing.T, kubeletDir, podUID, volume string) string {
	t.Helper()
	parent := filepath.Join(kubeletDir, "pods", podUID, "volumes", "kubernetes.io~csi", volume)
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(parent, "mount")
}

// TestNodeKubeletLayoutOnRealNFS: with kubelet's layout enforced, a volume
// whose subDir and target hold a space, a tab and a backslash is published,
// re-published (OK each time, as after a kubelet restart), written and
// unpublished; targets with "..", through a symlink or outside kubelet's
// volume directories are InvalidArgument and nothing is mounted or created.
func TestNodeKubeletLayoutOnRealNFS(t *testing.T) {
	kubelet := t.TempDir()
	c := start(t, func(cfg *config.Config) { cfg.PublishRoot, cfg.KubeletDir = "", kubelet })
	vc := lab.RWX("nfsvers=4.1")
	v := c.Create(t, "pvc-odd-names", params("subDir", "team a/x\\y z"), vc)
	target := kubeletTarget(t, kubelet, "pod a\\b", "pvc odd\tname")
	for i := 0; i < 3; i++ {
		c.Publish(t, v, target, vc, false)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(onExport("team a/x\\y z/f")); err != nil || string(b) != "x" {
		t.Fatalf("file on the server: %q %v", b, err)
	}
	c.Unpublish(t, v, target)
	c.Unpublish(t, v, target)
	if lab.MountInfo(t, strings.NewReplacer(" ", `\040`, "\t", `\011`, "\\", `\134`).Replace(target)) != "" || exists(target) {
		t.Fatalf("target %q still mounted or present", target)
	}

	outside := t.TempDir()
	linked := filepath.Join(kubelet, "pods/u2/volumes/kubernetes.io~csi/linked")
	os.MkdirAll(filepath.Dir(linked), 0o750)
	if err := os.Symlink(outside, linked); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		filepath.Join(outside, "mount"),
		kubelet + "/pods/u2/volumes/kubernetes.io~csi/v/../../../../../../sbin/mount",
		filepath.Join(linked, "mount"),
	} {
		err := c.TryPublish(lab.Ctx(t, time.Minute), v, bad, vc, false)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("publish on %q = %v, want InvalidArgument", bad, err)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("created below the symlink's destination: %v", ents)
	}
	if strings.Contains(lab.Sh(t, "cat /proc/self/mountinfo"), outside) {
		t.Errorf("a refused target was mounted")
	}
}

// TestNodeReadOnlyOptionIsIdempotentOnRealNFS: "ro" among the class mount
// options with readonly=false: every identical publish is OK and the mount
// is read-only.
func TestNodeReadOnlyOptionIsIdempotentOnRealNFS(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1", "ro")
	v := c.Create(t, "pvc-ro-option", params(), lab.RWX("nfsvers=4.1"))
	target := filepath.Join(t.TempDir(), "t")
	for i := 0; i < 3; i++ {
		c.Publish(t, v, target, vc, false)
	}
	if err := os.WriteFile(filepath.Join(target, "f"), nil, 0o644); err == nil {
		t.Error("wrote to a read-only mount")
	}
	// The default policy: nosuid and nodev on every publish.
	if line := lab.MountInfo(t, target); !strings.Contains(line, "nosuid") || !strings.Contains(line, "nodev") {
		t.Errorf("mount lacks nosuid,nodev: %s", line)
	}
	c.Unpublish(t, v, target)
}

// TestNodeBackgroundMountRefusedOnRealNFS: with the server refusing
// connections, a publish asking for "bg" is InvalidArgument at once;
// nothing is mounted and no mount.nfs is left running (before, mount.nfs
// daemonized, NodePublish answered OK with nothing mounted).
func TestNodeBackgroundMountRefusedOnRealNFS(t *testing.T) {
	c := start(t, nil)
	v := c.Create(t, "pvc-bg", params(), lab.RWX("nfsvers=4.1"))
	lab.StopNFSServer(t)
	defer lab.StartNFSServer(t)
	target := filepath.Join(t.TempDir(), "t")
	err := c.TryPublish(lab.Ctx(t, time.Minute), v, target, lab.RWX("nfsvers=4.1", "bg", "hard"), false)
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"bg"`) {
		t.Fatalf("publish with bg = %v, want InvalidArgument naming bg", err)
	}
	time.Sleep(time.Second)
	if lab.MountInfo(t, target) != "" {
		t.Error("target mounted")
	}
	if ps := lab.Processes("mount.nfs"); len(ps) > 0 {
		t.Errorf("mount helpers left running: %v", ps)
	}
}

// TestUnpublishDuringOutageLeavesOtherWritersAlone:
// a writer (write + fsync in a loop) on a second target of the same volume
// sees no error while a busy first target is unpublished during a 20 s
// outage (the server unreachable: a partition, so no server state is
// lost), and resumes when the server returns. With MNT_FORCE the kernel
// failed the writer's pending fsync.
func TestUnpublishDuringOutageLeavesOtherWritersAlone(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1", "hard")
	v := c.Create(t, "pvc-outage-writer", params(), vc)
	base := t.TempDir()
	busy, other := filepath.Join(base, "busy"), filepath.Join(base, "writer")
	c.Publish(t, v, busy, vc, false)
	c.Publish(t, v, other, vc, false)
	held, err := os.Create(filepath.Join(busy, "held-open"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	f, err := os.Create(filepath.Join(other, "log"))
	if err != nil {
		t.Fatal(err)
	}
	var writes, errs atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := []byte(strings.Repeat("x", 4096))
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, err := f.Write(buf)
			if err == nil {
				err = unix.Fsync(int(f.Fd()))
			}
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				time.Sleep(10 * time.Millisecond)
				continue
			}
			writes.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	time.Sleep(time.Second)
	lab.CutNetwork(t)
	defer lab.RestoreNetwork(t)
	outage := time.Now()
	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	_, uerr := c.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: busy})
	cancel()
	took := time.Since(outage)
	if rest := 20*time.Second - time.Since(outage); rest > 0 {
		time.Sleep(rest)
	}
	beforeReturn := writes.Load()
	lab.RestoreNetwork(t)
	returned := time.Now()
	deadline := time.Now().Add(60 * time.Second)
	for writes.Load() < beforeReturn+20 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	resumed := time.Since(returned)
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("writer still blocked 90 s after the server returned")
	}
	f.Close()
	t.Logf("unpublish of the busy target during the outage: %v after %s; writer: %d writes (%d after the server returned, 20 of them within %s), %d errors (first: %v)",
		uerr, took.Round(time.Millisecond), writes.Load(), writes.Load()-beforeReturn, resumed.Round(time.Millisecond), errs.Load(), firstErr.Load())
	if uerr != nil {
		t.Errorf("unpublish of the busy target: %v", uerr)
	}
	if lab.MountInfo(t, busy) != "" {
		t.Error("busy target still mounted")
	}
	if errs.Load() != 0 {
		t.Errorf("the writer on the other target got %d errors (first: %v)", errs.Load(), firstErr.Load())
	}
	if writes.Load() < beforeReturn+20 {
		t.Errorf("the writer did not resume: %d writes after the server returned", writes.Load()-beforeReturn)
	}
	c.Unpublish(t, v, other)
}

// TestRepublishDuringOutageKeepsTheMount: kubelet
// re-publishing a volume while its server does not answer (a failover, a
// partition) gets Unavailable, and the mount the pods use stays; before,
// the failed health probe made NodePublish unmount it.
func TestRepublishDuringOutageKeepsTheMount(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1", "hard")
	v := c.Create(t, "pvc-failover", params(), vc)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	before := lab.MountInfo(t, target)
	lab.CutNetwork(t)
	defer lab.RestoreNetwork(t)
	start := time.Now()
	err := c.TryPublish(lab.Ctx(t, time.Minute), v, target, vc, false)
	took := time.Since(start)
	after := lab.MountInfo(t, target)
	lab.RestoreNetwork(t)
	t.Logf("re-publish during the outage: %v after %s", err, took.Round(time.Millisecond))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("re-publish during the outage = %v, want Unavailable", err)
	}
	if after == "" || after != before {
		t.Errorf("the mount changed during the outage:\nbefore %s\nafter  %s", before, after)
	}
	// Once the server answers again, kubelet's retry succeeds.
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := c.TryPublish(lab.Ctx(t, time.Minute), v, target, vc, false)
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("re-publish after the outage: %v", err)
		}
		time.Sleep(time.Second)
	}
	t.Logf("re-publish OK %s after the network returned", time.Since(start.Add(took)).Round(time.Second))
	c.Unpublish(t, v, target)
}

// TestHealthAfterRestartOnRealNFS: a node plugin started after the volume
// was published (a restart: nothing in memory) reports, without a publish
// path, the health of the volume's targets kubelet records: healthy, then
// StaleFileHandle once the directory is replaced on the server. Before,
// it reported healthy whatever the mount's state.
func TestHealthAfterRestartOnRealNFS(t *testing.T) {
	kubelet := t.TempDir()
	layout := func(cfg *config.Config) { cfg.PublishRoot, cfg.KubeletDir = "", kubelet }
	c := start(t, layout)
	vc := lab.RWX("nfsvers=4.1")
	v := c.Create(t, "pvc-health", params("onDelete", "retain"), vc)
	target := kubeletTarget(t, kubelet, "pod-h", "pvc-health")
	os.WriteFile(filepath.Join(filepath.Dir(target), "vol_data.json"),
		[]byte(`{"driverName":"nfsdir.csi.io","specVolID":"pvc-health","volumeHandle":"`+v.VolumeId+`","volumeLifecycleMode":"Persistent"}`), 0o644)
	c.Publish(t, v, target, vc, false)

	restarted := start(t, layout)
	health := func() []*csi.VolumeHealth_VolumeHealthEntry {
		t.Helper()
		r, err := restarted.Node.NodeGetVolumeHealth(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetVolumeHealth().GetHealthStatuses()
	}
	if st := health(); len(st) != 0 {
		t.Errorf("health of a live volume: %v", st)
	}
	lab.Sh(t, "rm -rf "+onExport("pvc-health")+" && mkdir -m 2770 "+onExport("pvc-health"))
	if st := health(); len(st) != 1 || st[0].GetReason() != "StaleFileHandle" {
		t.Errorf("health of a stale mount after a restart: %v", st)
	}
	c.Publish(t, v, target, vc, false) // heals
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}
