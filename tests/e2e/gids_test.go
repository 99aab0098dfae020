package e2e

import (
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestGIDRangeOnRealNFS: two controllers (as during a leader change)
// create 16 volumes at once from a class whose GID range holds 16: each
// volume's directory on the server has a GID of the range of its own, with
// the setgid bit. A seventeenth is ResourceExhausted. After a controller
// restart, a retried CreateVolume gets the same GID, and a deleted
// volume's GID goes to the next volume.
func TestGIDRangeOnRealNFS(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	vc := lab.RWX("nfsvers=4.2")
	p := params("gidRangeStart", "61000", "gidRangeEnd", "61015", "onDelete", "delete")
	size := &csi.CapacityRange{RequiredBytes: 1 << 30} // as lab.Client.Create asks
	first := lab.StartDriver(t, nfsmount.NewSystem(), nil)
	clients := []*lab.Client{lab.Connect(t, first.Endpoint), start(t, nil)}
	var mu sync.Mutex
	vols := map[string]*csi.Volume{}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := "pvc-gid-" + strconv.Itoa(i)
			r, err := clients[i%2].Controller.CreateVolume(lab.Ctx(t, 2*time.Minute), &csi.CreateVolumeRequest{Name: name, Parameters: p,
				VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: size})
			if err != nil {
				t.Errorf("CreateVolume %s: %v", name, err)
				return
			}
			mu.Lock()
			vols[name] = r.GetVolume()
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	gidOf := func(name string) int {
		st, err := os.Stat(onExport(name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModeSetgid == 0 {
			t.Errorf("%s: no setgid bit (%v)", name, st.Mode())
		}
		return int(st.Sys().(*syscall.Stat_t).Gid)
	}
	owner := map[int]string{}
	for name := range vols {
		g := gidOf(name)
		if g < 61000 || g > 61015 || owner[g] != "" {
			t.Errorf("%s has GID %d (also %q's)", name, g, owner[g])
		}
		owner[g] = name
	}
	_, err := clients[0].Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: "pvc-gid-16", Parameters: p,
		VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: size})
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a seventeenth volume: %v, want ResourceExhausted", err)
	}
	if exists(onExport("pvc-gid-16")) {
		t.Error("a refused volume left its directory")
	}

	first.Stop()
	restarted := start(t, nil)
	before := gidOf("pvc-gid-3")
	again := restarted.Create(t, "pvc-gid-3", p, vc)
	if again.VolumeId != vols["pvc-gid-3"].VolumeId || gidOf("pvc-gid-3") != before {
		t.Errorf("a retry after the restart: %s with GID %d, want %s with %d", again.VolumeId, gidOf("pvc-gid-3"), vols["pvc-gid-3"].VolumeId, before)
	}
	freed := gidOf("pvc-gid-5")
	restarted.Delete(t, vols["pvc-gid-5"])
	delete(vols, "pvc-gid-5")
	vols["pvc-gid-16"] = restarted.Create(t, "pvc-gid-16", p, vc)
	if g := gidOf("pvc-gid-16"); g != freed {
		t.Errorf("the next volume got GID %d, not the freed %d", g, freed)
	}
	for _, v := range vols {
		restarted.Delete(t, v)
	}
	if ents, _ := os.ReadDir(onExport(".nfsdir/gids")); len(ents) != 0 {
		t.Errorf("GIDs still claimed after every volume was deleted: %d", len(ents))
	}
}
