package e2e

import (
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

// ballast makes the file at path hold n bytes of the server's file
// system (space allocated, not a hole).
func ballast(t *testing.T, path string, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n > 0 {
		if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
			t.Fatal(err)
		}
	}
}

// exportOf is the export name a volume ID carries.
func exportOf(v *csi.Volume) string {
	f := strings.Split(v.GetVolumeId(), "|")
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// TestSharePoolOnRealNFS: a class of three exports of the lab server
// (two 256 MiB file systems, a and b, and dead, at an address nothing
// answers on) places each volume on whichever of a and b has more space
// free as the server sees it, and never on dead, which is read once and
// then left to rest; a retry finds its volume where it was placed after
// the space turned; a fill threshold passes over a full export and, when
// none is left, the error names each export's reason; a drained export
// gets nothing; a restore goes on its snapshot's export; each volume is
// written, read and deleted on its own export.
func TestSharePoolOnRealNFS(t *testing.T) {
	lab.Require(t)
	lab.AddExport(t, "/pool-a", "sec=sys")
	lab.AddExport(t, "/pool-b", "sec=sys")
	ballast(t, "/pool-b/ballast", 64<<20)
	d := lab.StartDriver(t, nfsmount.NewSystem(), func(c *config.Config) {
		c.Exports = []string{"a=" + lab.Server() + ":/pool-a", "b=" + lab.Server() + ":/pool-b", "dead=192.0.2.1:/srv"}
	})
	c := lab.Connect(t, d.Endpoint)
	vc := lab.RWX("nfsvers=4.2")
	pool := map[string]string{"export": "a,b,dead"}
	create := func(name string, p map[string]string, cs *csi.VolumeContentSource) (*csi.Volume, error) {
		began := time.Now()
		r, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: name, Parameters: p,
			VolumeCapabilities: []*csi.VolumeCapability{vc}, VolumeContentSource: cs})
		t.Logf("%s: %s in %s (%v)", name, r.GetVolume().GetVolumeId(), time.Since(began).Round(time.Millisecond), err)
		return r.GetVolume(), err
	}

	v1, err := create("pvc-p1", pool, nil)
	if err != nil || exportOf(v1) != "a" || !exists("/pool-a/pvc-p1") {
		t.Fatalf("first volume %v, %v; want it on a, the emptier", v1, err)
	}
	ballast(t, "/pool-a/ballast", 128<<20)
	v2, err := create("pvc-p2", pool, nil)
	if err != nil || exportOf(v2) != "b" || !exists("/pool-b/pvc-p2") {
		t.Fatalf("second volume %v, %v; want it on b, now the emptier", v2, err)
	}
	if again, err := create("pvc-p1", pool, nil); err != nil || again.GetVolumeId() != v1.GetVolumeId() {
		t.Errorf("the retry of pvc-p1 gave %v, %v; want %s", again, err, v1.GetVolumeId())
	}

	// Each volume holds its data on its own export.
	for _, v := range []*csi.Volume{v1, v2} {
		target := filepath.Join(t.TempDir(), "t")
		c.Publish(t, v, target, vc, false)
		if err := os.WriteFile(filepath.Join(target, "data"), []byte(v.GetVolumeId()), 0o644); err != nil {
			t.Fatal(err)
		}
		c.Unpublish(t, v, target)
		on := "/pool-" + exportOf(v) + "/" + v.GetVolumeContext()["subDir"] + "/data"
		if b, err := os.ReadFile(on); err != nil || string(b) != v.GetVolumeId() {
			t.Errorf("%s on the server: %q, %v", on, b, err)
		}
	}

	// a is half full, b a quarter: a threshold of 40% leaves b; with b
	// filled too, none.
	if v, err := create("pvc-p3", map[string]string{"export": "a,b,dead", "fillThreshold": "40"}, nil); err != nil || exportOf(v) != "b" {
		t.Errorf("a over the threshold: %v, %v; want b", v, err)
	}
	ballast(t, "/pool-b/ballast", 200<<20)
	_, err = create("pvc-p4", map[string]string{"export": "a,b,dead", "fillThreshold": "40"}, nil)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("every export over the threshold: %v", err)
	}
	for _, want := range []string{"export a: ", "export b: ", "% full, at or over fillThreshold 40%", "export dead: not reachable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if exists("/pool-a/pvc-p4") || exists("/pool-b/pvc-p4") {
		t.Error("a refused creation left a directory")
	}

	// Drained: b is emptier again, and gets nothing.
	ballast(t, "/pool-b/ballast", 0)
	if v, err := create("pvc-p5", map[string]string{"export": "a,b", "drainExports": "b"}, nil); err != nil || exportOf(v) != "a" {
		t.Errorf("with b drained: %v, %v; want a", v, err)
	}

	// A restore of v1's snapshot goes on a, though b has more room.
	snap, _ := snapshotUntilReady(t, c, "snap-p1", v1.GetVolumeId())
	restored, _ := createUntilDone(t, c, &csi.CreateVolumeRequest{Name: "pvc-restored", Parameters: pool, VolumeCapabilities: []*csi.VolumeCapability{vc},
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshotId()}}}})
	if exportOf(restored) != "a" {
		t.Errorf("restore on %s, want a", exportOf(restored))
	} else if b, err := os.ReadFile("/pool-a/pvc-restored/data"); err != nil || string(b) != v1.GetVolumeId() {
		t.Errorf("the restored data: %q, %v", b, err)
	}

	capa, err := c.Controller.GetCapacity(lab.Ctx(t, time.Minute), &csi.GetCapacityRequest{Parameters: map[string]string{"export": "a,b"}})
	if err != nil || capa.AvailableCapacity <= capa.MaximumVolumeSize.GetValue() || capa.MaximumVolumeSize.GetValue() < 200<<20 {
		t.Errorf("capacity of the pool %v, %v", capa, err)
	}

	for _, v := range []*csi.Volume{v1, v2, restored} {
		c.Delete(t, v)
		if dir := "/pool-" + exportOf(v) + "/" + v.GetVolumeContext()["subDir"]; exists(dir) {
			t.Errorf("%s is still there after its deletion", dir)
		}
	}
	if _, err := c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.GetSnapshotId()}); err != nil {
		t.Error(err)
	}
}
