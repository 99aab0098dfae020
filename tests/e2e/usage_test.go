package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// stats calls NodeGetVolumeStats and returns bytes and inodes used and the
// bytes total and available.
func stats(t *testing.T, c *lab.Client, v *csi.Volume, target string) (used, inodes, total, avail int64) {
	t.Helper()
	r, err := c.Node.NodeGetVolumeStats(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: target})
	if err != nil {
		t.Fatalf("NodeGetVolumeStats: %v", err)
	}
	for _, u := range r.Usage {
		switch u.Unit {
		case csi.VolumeUsage_BYTES:
			used, total, avail = u.Used, u.Total, u.Available
		case csi.VolumeUsage_INODES:
			inodes = u.Used
		}
	}
	return used, inodes, total, avail
}

// waitStats polls NodeGetVolumeStats until ok accepts what it reports.
func waitStats(t *testing.T, c *lab.Client, v *csi.Volume, target, what string, ok func(used, inodes, total, avail int64) bool) {
	t.Helper()
	var used, inodes, total, avail int64
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if used, inodes, total, avail = stats(t, c, v, target); ok(used, inodes, total, avail) {
			return
		}
	}
	t.Fatalf("%s: NodeGetVolumeStats kept reporting used %d bytes, %d inodes, total %d, available %d", what, used, inodes, total, avail)
}

// TestUsageOnRealNFS: a fresh volume reports its capacity as total and
// nothing used at once; after writes (a file with three hard links, a
// sparse 1 GiB file with one block, a symlink to the share's root, a
// FIFO, a subdirectory) the controller's count reaches the node: each
// file once, holes and link targets not counted; over its capacity the
// volume's health says so with "uses X of Y", and an expansion clears it;
// deletes bring the figure down.
func TestUsageOnRealNFS(t *testing.T) {
	c := start(t, func(cfg *config.Config) { cfg.CountEvery = time.Second; cfg.CountRate = 0 })
	vc := lab.RWX("nfsvers=4.1")
	resp, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{
		Name: "pvc-usage", Parameters: params("onDelete", "delete"), VolumeCapabilities: []*csi.VolumeCapability{vc},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	v := resp.Volume
	defer c.Delete(t, v)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	defer c.Unpublish(t, v, target)

	used, inodes, total, avail := stats(t, c, v, target)
	if total != 2<<20 || used > 8192 || avail != 2<<20-used {
		t.Fatalf("fresh volume: used %d (%d inodes), total %d, available %d; want total 2 MiB, nothing used", used, inodes, total, avail)
	}

	big := strings.Repeat("n", 3<<20)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(target, "big"), []byte(big), 0o644))
	must(os.Mkdir(filepath.Join(target, "sub"), 0o755))
	must(os.Link(filepath.Join(target, "big"), filepath.Join(target, "sub", "link1")))
	must(os.Link(filepath.Join(target, "big"), filepath.Join(target, "link2")))
	f, err := os.Create(filepath.Join(target, "sparse"))
	must(err)
	_, err = f.WriteAt([]byte("x"), 1<<30)
	must(err)
	f.Close()
	must(os.Symlink("/", filepath.Join(target, "root")))
	lab.Sh(t, "mkfifo "+filepath.Join(target, "sub", "fifo"))
	// big (once), sparse, root, sub, fifo, and the volume's directory.
	waitStats(t, c, v, target, "after writes", func(used, inodes, total, avail int64) bool {
		return used >= 3<<20 && used < 3<<20+256<<10 && inodes == 6 && total == 2<<20 && avail == 0
	})
	health := func() []*csi.VolumeHealth_VolumeHealthEntry {
		r, err := c.Node.NodeGetVolumeHealth(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId, VolumePublishPath: target})
		if err != nil {
			t.Fatalf("NodeGetVolumeHealth: %v", err)
		}
		return r.VolumeHealth.HealthStatuses
	}
	h := health()
	if len(h) != 1 || h[0].Status != csi.VolumeHealthErrorType_DEGRADED || h[0].Reason != "OverCapacity" || !strings.Contains(h[0].Message, "of 2.0 MiB") {
		t.Fatalf("health of a volume over its capacity: %v", h)
	}
	t.Logf("over capacity: %s", h[0].Message)

	if _, err := c.Controller.ControllerExpandVolume(lab.Ctx(t, time.Minute), &csi.ControllerExpandVolumeRequest{VolumeId: v.VolumeId, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}}); err != nil {
		t.Fatal(err)
	}
	waitStats(t, c, v, target, "after expansion", func(used, inodes, total, avail int64) bool {
		return total == 16<<20 && avail == 16<<20-used
	})
	if h := health(); len(h) != 0 {
		t.Fatalf("health after expansion: %v", h)
	}

	must(os.Remove(filepath.Join(target, "big")))
	must(os.Remove(filepath.Join(target, "link2")))
	must(os.Remove(filepath.Join(target, "sub", "link1")))
	waitStats(t, c, v, target, "after deletes", func(used, inodes, total, avail int64) bool {
		return used < 256<<10 && inodes == 5
	})
}
