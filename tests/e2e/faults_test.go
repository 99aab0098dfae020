package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// resources is a snapshot of this process's goroutines, OS threads and
// open file descriptors (the driver runs in-process).
type resources struct{ goroutines, threads, fds int }

func snapshot() resources {
	return resources{runtime.NumGoroutine(), int(lab.SelfStatus("Threads")), lab.OpenFDs("self")}
}

// TestDeadServerWithMountedVolumes: with the server gone, 100 rounds of
// NodeGetVolumeStats and NodeUnpublishVolume on dead mounts each return
// within a bound, Probe keeps answering, goroutines, threads and fds stay
// flat, and the mounts are gone once unpublish succeeds.
func TestDeadServerWithMountedVolumes(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1")
	base := t.TempDir()
	var vols []*csi.Volume
	var targets []string
	for i := 0; i < 3; i++ {
		v := c.Create(t, fmt.Sprintf("pvc-deadmnt-%d", i), params(), vc)
		target := filepath.Join(base, fmt.Sprint(i))
		c.Publish(t, v, target, vc, false)
		vols, targets = append(vols, v), append(targets, target)
	}
	lab.StopNFSServer(t)
	defer lab.StartNFSServer(t)

	call := func(what string, bound time.Duration, f func(ctx context.Context) error) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*bound)
		defer cancel()
		start := time.Now()
		err := f(ctx)
		took := time.Since(start)
		if took > bound {
			t.Errorf("%s took %s (bound %s)", what, took, bound)
		}
		return took, err
	}
	var first, slowest time.Duration
	var warm resources
	for round := 0; round < 100; round++ {
		for i, v := range vols {
			took, err := call("NodeGetVolumeStats", 12*time.Second, func(ctx context.Context) error {
				_, err := c.Node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: targets[i]})
				return err
			})
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("round %d: stats on a dead mount: %v", round, err)
			}
			if round == 0 && took > first {
				first = took
			} else if round > 0 && took > slowest {
				slowest = took
			}
		}
		if _, err := call("Probe", 2*time.Second, func(ctx context.Context) error {
			r, err := c.Identity.Probe(ctx, &csi.ProbeRequest{})
			if err == nil && !r.GetReady().GetValue() {
				err = fmt.Errorf("not ready")
			}
			return err
		}); err != nil {
			t.Fatalf("Probe during the outage: %v", err)
		}
		if round == 1 {
			warm = snapshot()
		}
	}
	afterStats := snapshot()
	t.Logf("stats on dead mounts: first round up to %s, later rounds up to %s; goroutines/threads/fds after round 1 %+v, after 100 %+v",
		first.Round(time.Millisecond), slowest.Round(time.Millisecond), warm, afterStats)

	var unpubSlowest time.Duration
	for round := 0; round < 100; round++ {
		for i, v := range vols {
			took, err := call("NodeUnpublishVolume", 15*time.Second, func(ctx context.Context) error {
				_, err := c.Node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: targets[i]})
				return err
			})
			if err != nil {
				t.Fatalf("round %d: unpublish of a dead mount: %v", round, err)
			}
			unpubSlowest = max(unpubSlowest, took)
		}
	}
	for _, target := range targets {
		if lab.MountInfo(t, target) != "" || exists(target) {
			t.Errorf("%s still mounted or present after unpublish", target)
		}
	}
	end := snapshot()
	t.Logf("unpublish of dead mounts: slowest %s; resources at the end %+v", unpubSlowest.Round(time.Millisecond), end)
	// Stuck statfs calls hold one goroutine (and thread) per path until the
	// server returns; retries must not add any.
	const slack = 4
	if end.goroutines > warm.goroutines+slack || end.threads > warm.threads+slack || end.fds > warm.fds+slack ||
		afterStats.goroutines > warm.goroutines+slack {
		t.Errorf("resources grew with retries: after round 1 %+v, after stats %+v, at the end %+v", warm, afterStats, end)
	}
}

// TestRetryStorms: 200 concurrent CreateVolume calls for 50 names, and
// concurrent publish/unpublish of the same targets, against the nfsdir
// binary: every answer is success or Aborted, no name gets two directories,
// no target is mounted twice, and the driver stays under 64 MiB RSS.
func TestRetryStorms(t *testing.T) {
	lab.Require(t)
	p := lab.StartBinary(t, "", "--metrics-address=127.0.0.1:29654", "--health-address=127.0.0.1:29653")
	c := lab.Connect(t, p.Endpoint)
	temps := tempRecords(t)
	vc := lab.RWX("nfsvers=4.2")
	type answer struct {
		name, id string
		err      error
	}
	create := func(name string) (*csi.CreateVolumeResponse, error) {
		return c.Controller.CreateVolume(lab.Ctx(t, 2*time.Minute), &csi.CreateVolumeRequest{Name: name,
			Parameters: params(), VolumeCapabilities: []*csi.VolumeCapability{vc}})
	}
	answers := make(chan answer, 200)
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			name := fmt.Sprintf("pvc-storm-%02d", i%50)
			r, err := create(name)
			answers <- answer{name, r.GetVolume().GetVolumeId(), err}
		}(i)
	}
	wg.Wait()
	close(answers)
	ids := map[string]string{}
	var ok, aborted int
	for a := range answers {
		switch status.Code(a.err) {
		case codes.OK:
			ok++
			if prev, seen := ids[a.name]; seen && prev != a.id {
				t.Errorf("%s answered with two IDs: %s and %s", a.name, prev, a.id)
			}
			ids[a.name] = a.id
		case codes.Aborted:
			aborted++
		default:
			t.Errorf("%s: %v", a.name, a.err)
		}
	}
	// Retry the aborted ones, as a provisioner would, until all 50 exist.
	for i := 0; i < 50; i++ {
		name := fmt.Sprintf("pvc-storm-%02d", i)
		r, err := create(name)
		if err != nil {
			t.Fatalf("retry of %s: %v", name, err)
		}
		if prev, seen := ids[name]; seen && prev != r.GetVolume().GetVolumeId() {
			t.Errorf("%s: retry returned another ID", name)
		}
		ids[name] = r.GetVolume().GetVolumeId()
	}
	dirs, _ := filepath.Glob(onExport("pvc-storm-*"))
	recs := 0
	for _, name := range recordNames(t, temps...) {
		if strings.HasPrefix(name, "pvc-storm-") {
			recs++
		}
	}
	if len(dirs) != 50 || recs != 50 {
		t.Errorf("%d directories and %d records for 50 names", len(dirs), recs)
	}
	t.Logf("create storm: %d OK, %d Aborted", ok, aborted)

	// The NFS operations of the driver's own mounts, by share, mount and
	// operation: each of the 50 volumes wrote its record and its seal, and what one more CreateVolume adds to the main
	// mount's count is what the kernel counted for it.
	before := httpGet(t, "http://127.0.0.1:29654/metrics")
	share := fmt.Sprintf(`share="%s:%s"`, lab.Server(), lab.Export())
	// (Through the mount, or through the controller's own session, where
	// a record and its seal are two COMPOUNDs.)
	if n := sumMetric(before, "nfsdir_nfs_operations_total", `mount="main"`, `op="SYMLINK"`, share) +
		sumMetric(before, "nfsdir_nfs_operations_total", `mount="session"`, `op="COMPOUND"`, share); n < 100 {
		t.Errorf("nfsdir_nfs_operations_total of SYMLINK on the main mount and COMPOUND on the session of %s: %v, want at least 100", share, n)
	}
	for _, m := range []string{"nfsdir_nfs_operation_errors_total", "nfsdir_nfs_operation_timeouts_total", "nfsdir_nfs_operation_rtt_seconds_total", "nfsdir_nfs_operation_execute_seconds_total"} {
		if !strings.Contains(before, m+`{mount="main",op="LOOKUP",`+share+`}`) {
			t.Errorf("/metrics lacks %s of LOOKUP on the main mount of %s", m, share)
		}
	}
	kernel := lab.NFSCallsWith("lookupcache=none")
	if _, err := create("pvc-storm-one-more"); err != nil {
		t.Fatal(err)
	}
	kernel = lab.NFSCallsWith("lookupcache=none") - kernel
	after := httpGet(t, "http://127.0.0.1:29654/metrics")
	metric := sumMetric(after, "nfsdir_nfs_operations_total", `mount="main"`) - sumMetric(before, "nfsdir_nfs_operations_total", `mount="main"`)
	session := sumMetric(after, "nfsdir_nfs_operations_total", `mount="session"`) - sumMetric(before, "nfsdir_nfs_operations_total", `mount="session"`)
	t.Logf("one CreateVolume: %v NFS operations on the main mount by the driver's metrics, %d by the kernel's count; %v COMPOUNDs on the session", metric, kernel, session)
	// Through the session (NFS 4.1 and 4.2) a CreateVolume may make no
	// call through the mount: its calls are counted all the same.
	if metric+session < 1 || metric > float64(kernel)+2 || metric < float64(kernel)-2 {
		t.Errorf("one CreateVolume added %v to nfsdir_nfs_operations_total of the main mount (the kernel counted %d) and %v to the session's", metric, kernel, session)
	}

	// Publish storm: 8 targets, 160 concurrent publish/unpublish calls.
	base := t.TempDir()
	vol := &csi.Volume{VolumeId: ids["pvc-storm-00"], VolumeContext: map[string]string{"server": lab.Server(), "share": lab.Export(), "subDir": "pvc-storm-00"}}
	var pubOK, pubAborted int
	var mu sync.Mutex
	for i := 0; i < 160; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			target := filepath.Join(base, fmt.Sprint(i%8))
			var err error
			if i%3 == 2 {
				_, err = c.Node.NodeUnpublishVolume(lab.Ctx(t, time.Minute), &csi.NodeUnpublishVolumeRequest{VolumeId: vol.VolumeId, TargetPath: target})
			} else {
				err = c.TryPublish(lab.Ctx(t, time.Minute), vol, target, vc, false)
			}
			mu.Lock()
			defer mu.Unlock()
			switch status.Code(err) {
			case codes.OK:
				pubOK++
			case codes.Aborted:
				pubAborted++
			default:
				t.Errorf("publish storm on %s: %v", target, err)
			}
		}(i)
	}
	wg.Wait()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for i := 0; i < 8; i++ {
		target := filepath.Join(base, fmt.Sprint(i))
		if n := strings.Count(string(mi), " "+target+" "); n > 1 {
			t.Errorf("%s mounted %d times", target, n)
		}
		c.Unpublish(t, vol, target)
	}
	// The driver's own view of the storm, scraped from /metrics (one share: its
	// mount for calls and its mount for purges).
	metrics := httpGet(t, "http://127.0.0.1:29654/metrics")
	for _, want := range []string{
		`nfsdir_csi_operations_total{code="Aborted",method="CreateVolume"}`,
		`nfsdir_csi_operations_total{code="OK",method="CreateVolume"}`,
		`nfsdir_csi_operations_total{code="OK",method="NodePublishVolume"}`,
		`nfsdir_csi_operation_duration_seconds_bucket{method="NodeUnpublishVolume",le="+Inf"}`,
		"nfsdir_share_mounts_kept 2", "nfsdir_mounts_in_progress 0", "nfsdir_purge_queue_length",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if h := httpGet(t, "http://127.0.0.1:29653/healthz"); h != "ok\n" {
		t.Errorf("/healthz = %q", h)
	}
	hwm := p.Status("VmHWM")
	t.Logf("publish storm: %d OK, %d Aborted; driver peak RSS %d KiB", pubOK, pubAborted, hwm)
	if hwm <= 0 || hwm > 64*1024 {
		t.Errorf("driver peak RSS %d KiB, want under 64 MiB", hwm)
	}
}

// sumMetric sums the samples of metric in a /metrics text whose labels
// hold every one of with.
func sumMetric(text, metric string, with ...string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		labels, value, ok := strings.Cut(strings.TrimPrefix(line, metric+"{"), "} ")
		if !ok || !strings.HasPrefix(line, metric+"{") {
			continue
		}
		all := true
		for _, w := range with {
			all = all && strings.Contains(labels, w)
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err == nil && all {
			sum += v
		}
	}
	return sum
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// recordNames returns the volume names of all records on the export, and
// fails the test on a record link under a temporary name, those in before
// excepted.
func recordNames(t *testing.T, before ...string) []string {
	t.Helper()
	names, temps := records(t)
	for _, n := range temps {
		if !slices.Contains(before, n) {
			t.Errorf("temporary record link %s left behind", n)
		}
	}
	return names
}

// tempRecords returns the records held under a temporary name now (taken
// aside, being rewritten): what earlier tests on the shared export may
// have left for the accountant to settle, which a test's own check then
// leaves out.
func tempRecords(t *testing.T) []string {
	t.Helper()
	_, temps := records(t)
	return temps
}

// records returns the names of the volumes recorded on the share, and the
// record links under a temporary name.
func records(t *testing.T) (names, temps []string) {
	t.Helper()
	ents, err := os.ReadDir(onExport(".nfsdir/volumes"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil // no volume made on the export yet
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".seal") || strings.Contains(e.Name(), ".upd.") || strings.Contains(e.Name(), ".del.") {
			temps = append(temps, e.Name())
			continue
		}
		target, err := os.Readlink(onExport(".nfsdir/volumes/" + e.Name()))
		if err != nil {
			t.Fatalf("record %s is not a symlink: %v", e.Name(), err)
		}
		var r struct{ Name string }
		if err := json.Unmarshal([]byte(target), &r); err != nil {
			t.Fatalf("record %s: %v", e.Name(), err)
		}
		names = append(names, r.Name)
	}
	return names, temps
}

// TestControllerCallsBoundedOnDeadServer: with the server gone after the
// controller mounted the share, CreateVolume, DeleteVolume,
// ValidateVolumeCapabilities, GetCapacity and ListVolumes return by their deadline
// (DeadlineExceeded or Aborted, never a hang), Probe keeps answering, and
// after the server returns the retried calls converge.
func TestControllerCallsBoundedOnDeadServer(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1")
	a := c.Create(t, "pvc-bounded-a", params(), vc)
	lab.StopNFSServer(t)
	restarted := false
	defer func() {
		if !restarted {
			lab.StartNFSServer(t)
		}
	}()
	bounded := map[codes.Code]bool{codes.DeadlineExceeded: true, codes.Aborted: true, codes.Unavailable: true}
	calls := map[string]func(context.Context) error{
		"CreateVolume": func(ctx context.Context) error {
			_, err := c.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-bounded-b", Parameters: params(), VolumeCapabilities: []*csi.VolumeCapability{vc}})
			return err
		},
		"DeleteVolume": func(ctx context.Context) error {
			_, err := c.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: a.VolumeId})
			return err
		},
		"ValidateVolumeCapabilities": func(ctx context.Context) error {
			_, err := c.Controller.ValidateVolumeCapabilities(ctx, &csi.ValidateVolumeCapabilitiesRequest{VolumeId: "n1|" + lab.Server() + "|/export|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|", VolumeCapabilities: []*csi.VolumeCapability{vc}})
			return err
		},
		"GetCapacity": func(ctx context.Context) error {
			_, err := c.Controller.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: params()})
			return err
		},
	}
	for round := 0; round < 3; round++ {
		for name, call := range calls {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			start := time.Now()
			err := call(ctx)
			took := time.Since(start)
			cancel()
			if !bounded[status.Code(err)] || took > 15*time.Second {
				t.Errorf("round %d: %s on a dead server: %v after %s", round, name, err, took.Round(time.Millisecond))
			}
			t.Logf("round %d: %s: %s after %s", round, name, status.Code(err), took.Round(time.Millisecond))
		}
		if r, err := c.Identity.Probe(lab.Ctx(t, 2*time.Second), &csi.ProbeRequest{}); err != nil || !r.GetReady().GetValue() {
			t.Errorf("Probe during the outage: %v %v", r, err)
		}
		// A listing returns by its deadline too, or at once without the
		// dead share while an earlier listing still waits on it.
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		start := time.Now()
		_, err := c.Controller.ListVolumes(ctx, &csi.ListVolumesRequest{})
		took := time.Since(start)
		cancel()
		if (err != nil && !bounded[status.Code(err)]) || took > 15*time.Second {
			t.Errorf("round %d: ListVolumes on a dead server: %v after %s", round, err, took.Round(time.Millisecond))
		}
		t.Logf("round %d: ListVolumes: %s after %s", round, status.Code(err), took.Round(time.Millisecond))
	}
	lab.StartNFSServer(t)
	restarted = true
	converge := func(name string, call func(context.Context) error) {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			err := call(ctx)
			cancel()
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the server returned: %v", name, err)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	converge("CreateVolume", calls["CreateVolume"])
	converge("DeleteVolume", calls["DeleteVolume"])
	if !exists(onExport("pvc-bounded-b")) || exists(onExport("pvc-bounded-a")) {
		t.Errorf("after recovery: b exists %v, a exists %v", exists(onExport("pvc-bounded-b")), exists(onExport("pvc-bounded-a")))
	}
}
