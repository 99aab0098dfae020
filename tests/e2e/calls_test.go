package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestCallsThroughTheMount: what a CreateVolume and an empty DeleteVolume
// cost the controller's NFS client (its share mount, lookupcache=none),
// median of five, on NFSv4.2: at most 9 and 20 calls (10 before the new
// directory was sealed, owned and given its mode through an O_PATH
// descriptor, which asks the server no ACCESS; 11 and 28 before the
// directory was checked through one O_PATH descriptor, the record
// read by the call reused, the records renamed with one renameat and the
// share root no longer reopened on a mount that never caches names; the
// per-call breakdown is in the README). The empty volume is gone from the
// trash at once, and no purge runs after it.
func TestCallsThroughTheMount(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	c := start(t, func(cfg *config.Config) {
		cfg.CountEvery = 0 // no usage counts beside the calls counted
	})
	vc := lab.RWX("nfsvers=4.2")
	p := params("onDelete", "delete")
	c.Create(t, "pvc-calls-warm-up", p, vc) // mounts the share, makes its metadata area
	var creates, deletes []int64
	var vols []*csi.Volume
	for i := range 5 {
		before := lab.NFSCallsWith("lookupcache=none")
		vols = append(vols, c.Create(t, fmt.Sprintf("pvc-calls-%d", i), p, vc))
		creates = append(creates, lab.NFSCallsWith("lookupcache=none")-before)
	}
	for _, v := range vols {
		before, all := lab.NFSCallsWith("lookupcache=none"), lab.NFSCalls()
		c.Delete(t, v)
		deletes = append(deletes, lab.NFSCallsWith("lookupcache=none")-before)
		id, _ := volumeid.Parse(v.VolumeId)
		if left, _ := filepath.Glob(filepath.Join(lab.Export(), ".nfsdir/trash/*"+id.Key+"*")); len(left) != 0 {
			t.Errorf("an empty volume left in the trash: %v", left)
		}
		// Beside the controller's own: at most the client's lease
		// renewal, no purge (which lists the trash).
		if n := lab.NFSCalls() - all - deletes[len(deletes)-1]; n > 1 {
			t.Errorf("DeleteVolume of an empty volume: %d NFS calls on the guest's other mounts (a purge?), want at most 1", n)
		}
	}
	t.Logf("NFS calls of CreateVolume: %v; of an empty DeleteVolume: %v", creates, deletes)
	slices.Sort(creates)
	slices.Sort(deletes)
	if creates[2] > 9 {
		t.Errorf("CreateVolume costs the controller's NFS client %d calls (median), want at most 9", creates[2])
	}
	if deletes[2] > 20 {
		t.Errorf("an empty DeleteVolume costs the controller's NFS client %d calls (median), want at most 20", deletes[2])
	}
}
