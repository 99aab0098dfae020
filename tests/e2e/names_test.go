package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestNamedExportMovesOnRealNFS: a volume of a class that names its
// export (main, at the lab server's 127.0.0.1) is made, published and
// written; the driver is started again with main at 127.0.0.2, another
// address of the same server. With the volume's handle and attributes as
// they were, the node mounts it from the new address and reads the data,
// the controller's share mount is of the new address, and expansion and
// deletion work there.
func TestNamedExportMovesOnRealNFS(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	vc := lab.RWX("nfsvers=4.2")
	at := func(server string) func(*config.Config) {
		return func(c *config.Config) { c.Exports = []string{"main=" + server + ":" + lab.Export()} }
	}
	first := lab.StartDriver(t, nfsmount.NewSystem(), at(lab.Server()))
	c := lab.Connect(t, first.Endpoint)
	v := c.Create(t, "pvc-named", map[string]string{"export": "main", "subDir": "named/${pvc.metadata.name}", "csi.storage.k8s.io/pvc/name": "data"}, vc)
	if !strings.HasPrefix(v.GetVolumeId(), "n2|main|") || v.GetVolumeContext()["server"] != lab.Server() {
		t.Fatalf("volume %s, attributes %v", v.GetVolumeId(), v.GetVolumeContext())
	}
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	if src := mountSource(t, target); src != lab.Server()+":"+onExport("named/data") {
		t.Fatalf("first mount from %q", src)
	}
	if err := os.WriteFile(filepath.Join(target, "kept"), []byte("moved"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Unpublish(t, v, target)
	first.Stop()

	const moved = "127.0.0.2"
	second := lab.StartDriver(t, nfsmount.NewSystem(), at(moved))
	c = lab.Connect(t, second.Endpoint)
	c.Publish(t, v, target, vc, false)
	if src := mountSource(t, target); src != moved+":"+onExport("named/data") {
		t.Errorf("after the move, mounted from %q, want %s", src, moved)
	}
	if b, err := os.ReadFile(filepath.Join(target, "kept")); err != nil || string(b) != "moved" {
		t.Errorf("the data after the move: %q, %v", b, err)
	}
	c.Unpublish(t, v, target)
	if _, err := c.Controller.ControllerExpandVolume(lab.Ctx(t, time.Minute), &csi.ControllerExpandVolumeRequest{VolumeId: v.GetVolumeId(),
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2 << 30}}); err != nil {
		t.Fatalf("expansion after the move: %v", err)
	}
	if share := shareMountsBelow(t, second.StateDir); len(share) == 0 || !allFrom(share, moved+":") {
		t.Errorf("the controller's share mounts after the move: %v", share)
	}
	c.Delete(t, v)
	if exists(onExport("named/data")) {
		t.Error("the volume's directory is still there after its deletion")
	}
}

// mountSource is the source the mount table gives the mount at target.
func mountSource(t *testing.T, target string) string {
	t.Helper()
	e, err := nfsmount.NewSystem().Mounted(target)
	if err != nil || e == nil {
		t.Fatalf("mount at %s: %+v, %v", target, e, err)
	}
	return e.Source
}

// shareMountsBelow lists the sources of the NFS mounts below dir.
func shareMountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	table, err := nfsmount.NewSystem().Table()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for target, e := range table {
		if strings.HasPrefix(e.FsType, "nfs") && strings.HasPrefix(target, dir+"/") {
			out = append(out, e.Source)
		}
	}
	return out
}

func allFrom(sources []string, prefix string) bool {
	for _, s := range sources {
		if !strings.HasPrefix(s, prefix) {
			return false
		}
	}
	return true
}
