package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// kubeletStaging makes kubelet's directory of a CSI volume's staging path
// below kubeletDir and returns the staging path.
func kubeletStaging(t *testing.T, kubeletDir, volume string) string {
	t.Helper()
	parent := filepath.Join(kubeletDir, "plugins/kubernetes.io/csi/nfsdir.csi.io", volume)
	if err := os.MkdirAll(parent, 0o750); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(parent, "globalmount")
}

// mountsBelow returns the mountinfo lines of the mount points below dir.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(lab.Sh(t, "cat /proc/self/mountinfo"), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, line)
		}
	}
	return out
}

// TestNodeStageOnRealNFS: in NodeStage mode, four volumes of one export
// staged (each twice, as kubelet retries) make one NFS mount of the export
// on the node; each staging path and pod target shows its own volume's
// directory; a read-only publish cannot write and keeps nosuid and nodev; a
// volume directory swapped for a symlink (to another volume, out of the
// export) is refused with nothing left mounted; a plugin restarted with
// volumes still staged keeps the export's mount and unmounts it when the
// last volume is unstaged.
func TestNodeStageOnRealNFS(t *testing.T) {
	kubelet, state := t.TempDir(), t.TempDir()
	stageDir := filepath.Join(state, "node", "stage")
	mutate := func(cfg *config.Config) {
		cfg.PublishRoot, cfg.KubeletDir, cfg.NodeStage, cfg.StateDir = "", kubelet, true, state
	}
	lab.Require(t)
	d := lab.StartDriver(t, nfsmount.NewSystem(), mutate)
	c := lab.Connect(t, d.Endpoint)
	vc := lab.RWX("nfsvers=4.1")
	var vols []*csi.Volume
	var stagings []string
	for i, name := range []string{"pvc-stage-a", "pvc-stage-b", "pvc-stage-c", "pvc-stage-d"} {
		v := c.Create(t, name, params(), vc)
		vols, stagings = append(vols, v), append(stagings, kubeletStaging(t, kubelet, name))
		c.Stage(t, v, stagings[i], vc)
		c.Stage(t, v, stagings[i], vc)
	}
	if m := mountsBelow(t, stageDir); len(m) != 1 {
		t.Fatalf("four staged volumes of one export: %d node mounts of it, want 1:\n%s", len(m), strings.Join(m, "\n"))
	}
	for i, v := range vols {
		info := lab.MountInfo(t, stagings[i])
		if f := strings.Fields(info); len(f) < 10 || !strings.HasSuffix(f[len(f)-2], v.GetVolumeContext()["subDir"]) {
			t.Fatalf("staging path of %s shows %q", v.GetVolumeId(), info)
		}
	}

	rw, ro := kubeletTarget(t, kubelet, "pod-1", "a"), kubeletTarget(t, kubelet, "pod-2", "a")
	c.PublishStaged(t, vols[0], stagings[0], rw, vc, false)
	c.PublishStaged(t, vols[0], stagings[0], ro, vc, true)
	c.PublishStaged(t, vols[0], stagings[0], ro, vc, true)
	if err := os.WriteFile(filepath.Join(rw, "f"), []byte("staged"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(ro, "f")); err != nil || string(b) != "staged" {
		t.Fatalf("read through the read-only target: %q %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(ro, "g"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write through the read-only target: %v, want EROFS", err)
	}
	info := lab.MountInfo(t, ro)
	for _, flag := range []string{"ro", "nosuid", "nodev"} {
		if f := strings.Fields(info); len(f) < 6 || !strings.Contains(","+f[5]+",", ","+flag+",") {
			t.Errorf("read-only target's mount lacks %s: %q", flag, info)
		}
	}
	if b, err := os.ReadFile(onExport(strings.TrimPrefix(vols[0].GetVolumeContext()["subDir"], "/") + "/f")); err != nil || string(b) != "staged" {
		t.Fatalf("file on the server: %q %v", b, err)
	}

	// A volume's directory swapped for a symlink on the server: to another
	// volume, and out of the export (followed by the client, to the
	// node's own /etc).
	var victims []*csi.Volume
	for i, to := range []string{filepath.Base(onExport(vols[1].GetVolumeContext()["subDir"])), "/etc"} {
		name := fmt.Sprint("pvc-stage-swapped-", i)
		victim := c.Create(t, name, params(), vc)
		victims = append(victims, victim)
		dir := onExport(victim.GetVolumeContext()["subDir"])
		if err := os.Rename(dir, dir+".moved"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(to, dir); err != nil {
			t.Fatal(err)
		}
		staging := kubeletStaging(t, kubelet, name)
		err := c.TryStage(lab.Ctx(t, time.Minute), victim, staging, vc)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "nothing is staged") {
			t.Errorf("staging a volume whose directory is a symlink to %s: %v, want FailedPrecondition", to, err)
		}
		if lab.MountInfo(t, staging) != "" {
			t.Errorf("a refused stage left %s mounted", staging)
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+".moved", dir); err != nil {
			t.Fatal(err)
		}
	}

	// A restarted plugin finds the export's mount from the mount table.
	d.Stop()
	d = lab.StartDriver(t, nfsmount.NewSystem(), mutate)
	c = lab.Connect(t, d.Endpoint)
	c.Unpublish(t, vols[0], rw)
	c.Unpublish(t, vols[0], ro)
	for i, v := range vols {
		c.Unstage(t, v, stagings[i])
		c.Unstage(t, v, stagings[i])
		want := 1
		if i == len(vols)-1 {
			want = 0
		}
		if m := mountsBelow(t, stageDir); len(m) != want {
			t.Fatalf("after unstaging %d of %d: %d node mounts of the export, want %d", i+1, len(vols), len(m), want)
		}
		if lab.MountInfo(t, stagings[i]) != "" {
			t.Fatalf("%s still mounted after unstage", stagings[i])
		}
	}
	if ents, _ := os.ReadDir(stageDir); len(ents) != 0 {
		t.Errorf("stage directory keeps %d entries", len(ents))
	}
	for _, v := range append(vols, victims...) {
		c.Delete(t, v)
	}
}

// TestNodeStageWithDeadServer: in NodeStage mode with the server stopped,
// staging another volume of the export answers Unavailable within the
// probe's bound (the node's mount of the export stays), and unpublishing
// and unstaging the volumes that were staged succeed within a bound each,
// after which nothing of them is mounted: neither staging paths nor the
// export's mount.
func TestNodeStageWithDeadServer(t *testing.T) {
	kubelet, state := t.TempDir(), t.TempDir()
	c := start(t, func(cfg *config.Config) {
		cfg.PublishRoot, cfg.KubeletDir, cfg.NodeStage, cfg.StateDir = "", kubelet, true, state
	})
	vc := lab.RWX("nfsvers=4.1")
	var vols []*csi.Volume
	var stagings []string
	for _, name := range []string{"pvc-stagedead-a", "pvc-stagedead-b", "pvc-stagedead-c"} {
		vols = append(vols, c.Create(t, name, params(), vc))
		stagings = append(stagings, kubeletStaging(t, kubelet, name))
	}
	c.Stage(t, vols[0], stagings[0], vc)
	c.Stage(t, vols[1], stagings[1], vc)
	target := kubeletTarget(t, kubelet, "pod-dead", "a")
	c.PublishStaged(t, vols[0], stagings[0], target, vc, false)
	lab.StopNFSServer(t)
	restarted := false
	defer func() {
		if !restarted {
			lab.StartNFSServer(t)
		}
	}()

	bounded := func(what string, bound time.Duration, f func(ctx context.Context) error) error {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		if took := time.Since(start); took > bound {
			t.Errorf("%s took %s (bound %s)", what, took.Round(time.Millisecond), bound)
		} else {
			t.Logf("%s: %s, %v", what, took.Round(time.Millisecond), err)
		}
		return err
	}
	err := bounded("stage on a dead server", 20*time.Second, func(ctx context.Context) error { return c.TryStage(ctx, vols[2], stagings[2], vc) })
	if code := status.Code(err); code != codes.Unavailable && code != codes.DeadlineExceeded {
		t.Errorf("stage on a dead server: %v, want Unavailable", err)
	}
	if lab.MountInfo(t, stagings[2]) != "" {
		t.Errorf("a failed stage left %s mounted", stagings[2])
	}
	if err := bounded("unpublish", 15*time.Second, func(ctx context.Context) error {
		_, err := c.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: vols[0].VolumeId, TargetPath: target})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := bounded("unstage", 30*time.Second, func(ctx context.Context) error {
			_, err := c.Node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: vols[i].VolumeId, StagingTargetPath: stagings[i]})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range append(stagings, target) {
		if lab.MountInfo(t, p) != "" {
			t.Errorf("%s still mounted", p)
		}
	}
	if m := mountsBelow(t, filepath.Join(state, "node", "stage")); len(m) != 0 {
		t.Errorf("the node's mount of the export stays with nothing staged:\n%s", strings.Join(m, "\n"))
	}
	lab.StartNFSServer(t)
	restarted = true
	c.Stage(t, vols[2], stagings[2], vc)
	c.Unstage(t, vols[2], stagings[2])
	for _, v := range vols {
		c.Delete(t, v)
	}
}
