package e2e

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestControllerKilledMidOperations runs 200 CreateVolume and DeleteVolume
// calls against the nfsdir binary while killing it with SIGKILL at random
// moments and restarting it; clients replay until they get an answer. The
// result must converge: every volume whose last successful call created it
// exists exactly once, every deleted one is gone, nothing outside the
// managed directories changed, and the purge finishes after the restarts.
func TestControllerKilledMidOperations(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	before := exportListing(t)
	temps := tempRecords(t)
	p := lab.StartBinary(t, "")
	c := lab.Connect(t, p.Endpoint)
	vc := lab.RWX("nfsvers=4.1")
	const volumes = 150 // 150 creates and 50 deletes
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))

	var mu sync.Mutex
	created := map[string]string{} // name -> ID, for volumes that must exist
	deleted := map[string]bool{}
	replays := 0
	retry := func(what string, f func() error) {
		for attempt := 0; ; attempt++ {
			err := f()
			if err == nil {
				return
			}
			switch status.Code(err) {
			case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded, codes.Canceled:
			default:
				t.Errorf("%s: %v", what, err)
				return
			}
			mu.Lock()
			replays++
			mu.Unlock()
			if attempt > 600 {
				t.Errorf("%s: no answer after %d attempts: %v", what, attempt, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	var started atomic.Int32
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				started.Add(1)
				name := fmt.Sprintf("pvc-crash-%03d", i)
				var id string
				retry("create "+name, func() error {
					r, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: name,
						Parameters: params("onDelete", "delete"), VolumeCapabilities: []*csi.VolumeCapability{vc}})
					id = r.GetVolume().GetVolumeId()
					return err
				})
				os.WriteFile(onExport(name+"/data"), []byte(name), 0o644)
				if i%3 == 0 {
					retry("delete "+name, func() error {
						_, err := c.Controller.DeleteVolume(lab.Ctx(t, time.Minute), &csi.DeleteVolumeRequest{VolumeId: id})
						return err
					})
					mu.Lock()
					deleted[name] = true
					mu.Unlock()
					continue
				}
				mu.Lock()
				created[name] = id
				mu.Unlock()
			}
		}()
	}
	stop := make(chan struct{})
	killed := make(chan int)
	go func() {
		// Kill after 20, 50, 80 and 110 volumes were started, plus a random
		// delay, so that kills land in the middle of calls.
		kills := 0
		defer func() { killed <- kills }()
		for _, at := range []int32{20, 50, 80, 110} {
			for started.Load() < at {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			time.Sleep(time.Duration(rng.Intn(150)) * time.Millisecond)
			p.Kill()
			kills++
			if err := p.Restart(t); err != nil {
				t.Errorf("restart after kill %d: %v", kills, err)
				return
			}
		}
	}()
	for i := 0; i < volumes; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	close(stop)
	kills := <-killed
	t.Logf("%d kills, %d replayed calls", kills, replays)
	if kills != 4 {
		t.Errorf("%d kills during the run, want 4", kills)
	}

	// Converged state.
	names := map[string]int{}
	for _, n := range recordNames(t, temps...) {
		names[n]++
	}
	for name, id := range created {
		if names[name] != 1 {
			t.Errorf("%s: %d records", name, names[name])
		}
		if b, err := os.ReadFile(onExport(name + "/data")); err != nil || string(b) != name {
			t.Errorf("%s (%s): data %q %v", name, id, b, err)
		}
	}
	for name := range deleted {
		if names[name] != 0 || exists(onExport(name)) {
			t.Errorf("deleted %s: %d records, directory exists %v", name, names[name], exists(onExport(name)))
		}
	}
	waitTrashEmpty(t)
	var unexpected []string
	known := map[string]bool{}
	for _, b := range before {
		known[b] = true
	}
	for _, path := range exportListing(t) {
		top := strings.SplitN(path, "/", 2)[0]
		if !known[path] && !strings.HasPrefix(top, "pvc-crash-") {
			unexpected = append(unexpected, path)
		}
	}
	if len(unexpected) > 0 {
		t.Errorf("paths outside the volumes changed: %v", unexpected)
	}
	for name, id := range created {
		retry("cleanup "+name, func() error {
			_, err := c.Controller.DeleteVolume(lab.Ctx(t, time.Minute), &csi.DeleteVolumeRequest{VolumeId: id})
			return err
		})
	}
	if dirs, _ := filepath.Glob(onExport("pvc-crash-*")); len(dirs) != 0 {
		t.Errorf("left after cleanup: %v", dirs)
	}
}
