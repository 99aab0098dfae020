package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/exportfile"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// scaleVolumes is how many volumes TestPoolAtScaleOnRealNFS makes, half
// before the move and the drain, half after.
const scaleVolumes = 1000

// TestPoolAtScaleOnRealNFS: a thousand volumes over a pool of two exports
// of the lab server (a and b, 256 MiB file systems of the same room),
// made eight at a time. The first half spreads over both, evenly. Then,
// with the driver running, b moves to another address of the server (its
// line of the exports file changes) and a is drained: the second half
// all goes on b, through its new address. ListVolumes gives every volume
// once; a volume made on b before the move mounts from the new address;
// every volume is deleted. The volumes are NFSv3 mounts, which name the
// address they were made with.
func TestPoolAtScaleOnRealNFS(t *testing.T) {
	lab.Require(t)
	lab.AddExport(t, "/scale-a", "sec=sys")
	lab.AddExport(t, "/scale-b", "sec=sys")
	file := filepath.Join(t.TempDir(), "exports")
	writeExports := func(b string) {
		text := "a=" + lab.Server() + ":/scale-a\nb=" + b + ":/scale-b\n"
		if err := os.WriteFile(file+".new", []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".new", file); err != nil {
			t.Fatal(err)
		}
	}
	writeExports(lab.Server())
	every := exportfile.Every
	exportfile.Every = 200 * time.Millisecond
	t.Cleanup(func() { exportfile.Every = every })
	d := lab.StartDriver(t, nfsmount.NewSystem(), func(c *config.Config) { c.ExportsFile = file })
	c := lab.Connect(t, d.Endpoint)
	// NFSv3: while both addresses of the one lab server answer, an NFSv4
	// client would carry mounts of the new one over its connection to
	// the old (trunking), and the mount table would name the old.
	vc := lab.RWX("nfsvers=3", "nolock")

	made := make([]*csi.Volume, scaleVolumes)
	createRange := func(from, to int, p map[string]string) time.Duration {
		began := time.Now()
		eightAtOnce(from, to, func(i int) {
			r, err := c.Controller.CreateVolume(lab.Ctx(t, 2*time.Minute), &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-scale-%04d", i),
				Parameters: p, VolumeCapabilities: []*csi.VolumeCapability{vc}})
			if err != nil {
				t.Errorf("volume %d: %v", i, err)
			}
			made[i] = r.GetVolume()
		})
		if t.Failed() {
			t.FailNow()
		}
		return time.Since(began)
	}
	count := func(vs []*csi.Volume) map[string]int {
		n := map[string]int{}
		for _, v := range vs {
			n[exportOf(v)]++
		}
		return n
	}

	half := scaleVolumes / 2
	took := createRange(0, half, map[string]string{"export": "a,b"})
	first := count(made[:half])
	t.Logf("%d volumes in %s (%.0f/s): %v", half, took.Round(time.Millisecond), float64(half)/took.Seconds(), first)
	if first["a"] < half*35/100 || first["b"] < half*35/100 {
		t.Errorf("the first half did not spread over exports of the same room: %v", first)
	}

	// b moves; the driver follows the file. A volume made on b before
	// the move mounts from the new address once it has.
	const moved = "127.0.0.2"
	writeExports(moved)
	var onB *csi.Volume
	for _, v := range made[:half] {
		if exportOf(v) == "b" {
			onB = v
			break
		}
	}
	target := filepath.Join(t.TempDir(), "t")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		c.Publish(t, onB, target, vc, false)
		src := mountSource(t, target)
		c.Unpublish(t, onB, target)
		if strings.HasPrefix(src, moved+":") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a volume of b still mounts from %s a minute after the move", src)
		}
	}

	took = createRange(half, scaleVolumes, map[string]string{"export": "a,b", "drainExports": "a"})
	second := count(made[half:])
	t.Logf("%d volumes in %s (%.0f/s) with a drained and b moved: %v", scaleVolumes-half, took.Round(time.Millisecond), float64(scaleVolumes-half)/took.Seconds(), second)
	if second["b"] != scaleVolumes-half {
		t.Errorf("with a drained, volumes went elsewhere than b: %v", second)
	}

	listed := map[string]int{}
	for token := ""; ; {
		r, err := c.Controller.ListVolumes(lab.Ctx(t, time.Minute), &csi.ListVolumesRequest{MaxEntries: 200, StartingToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.GetEntries() {
			listed[e.GetVolume().GetVolumeId()]++
		}
		if token = r.GetNextToken(); token == "" {
			break
		}
	}
	for _, v := range made {
		if listed[v.GetVolumeId()] != 1 {
			t.Errorf("%s listed %d times", v.GetVolumeId(), listed[v.GetVolumeId()])
		}
	}
	if len(listed) != scaleVolumes {
		t.Errorf("%d volumes listed, %d made", len(listed), scaleVolumes)
	}

	began := time.Now()
	eightAtOnce(0, scaleVolumes, func(i int) {
		if _, err := c.Controller.DeleteVolume(lab.Ctx(t, 2*time.Minute), &csi.DeleteVolumeRequest{VolumeId: made[i].GetVolumeId()}); err != nil {
			t.Errorf("DeleteVolume %s: %v", made[i].GetVolumeId(), err)
		}
	})
	t.Logf("%d volumes deleted in %s", scaleVolumes, time.Since(began).Round(time.Millisecond))
	for _, e := range []string{"/scale-a", "/scale-b"} {
		left, _ := filepath.Glob(filepath.Join(e, "pvc-scale-*"))
		if len(left) > 0 {
			t.Errorf("%s still holds %d volume directories, such as %s", e, len(left), left[0])
		}
	}
}

// eightAtOnce calls fn for each i from from to to (excluded), eight calls
// at a time, and returns when all are done.
func eightAtOnce(from, to int, fn func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				fn(i)
			}
		}()
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
}
