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
// per-call breakdown is in docs/benchmarks.md). One level down (subDir
// team/<name>): at most 16 and 26 (20 and 26-27 before the checks above
// went out at once, the parent was opened once for the new directory and
// pruned with one rmdir).
// The empty volume is gone from the trash at once, and no purge runs
// after it.
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
	creates, deletes := createAndDelete(t, c, "pvc-calls-", p, vc)
	// One level down, as a subDir template by namespace makes them: the
	// checks that no volume, shared directory or share lies above, the
	// parent opened once, and its pruning tried after each delete (in
	// vain while a sibling stays).
	nested := params("onDelete", "delete", "subDir", "team/${pv.metadata.name}")
	c.Create(t, "pvc-calls-sibling", nested, vc)
	nestedCreates, nestedDeletes := createAndDelete(t, c, "pvc-calls-nested-", nested, vc)
	t.Logf("below a parent: NFS calls of CreateVolume: %v; of an empty DeleteVolume: %v", nestedCreates, nestedDeletes)
	for _, s := range [][]int64{nestedCreates, nestedDeletes} {
		slices.Sort(s)
	}
	if nestedCreates[2] > 16 {
		t.Errorf("CreateVolume below a parent costs the controller's NFS client %d calls (median), want at most 16", nestedCreates[2])
	}
	if nestedDeletes[2] > 26 {
		t.Errorf("an empty DeleteVolume below a parent costs the controller's NFS client %d calls (median), want at most 26", nestedDeletes[2])
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

// createAndDelete makes five volumes named prefix0..4 with parameters p,
// then deletes them, and returns the NFS calls of the controller's share
// mount for each call; each empty volume must leave the trash at once,
// with no purge after it.
func createAndDelete(t *testing.T, c *lab.Client, prefix string, p map[string]string, vc *csi.VolumeCapability) (creates, deletes []int64) {
	t.Helper()
	var vols []*csi.Volume
	for i := range 5 {
		before := lab.NFSCallsWith("lookupcache=none")
		vols = append(vols, c.Create(t, fmt.Sprintf("%s%d", prefix, i), p, vc))
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
	return creates, deletes
}
