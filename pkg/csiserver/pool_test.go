package csiserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/pkg/params"
)

// startPool starts a driver that names exports a and b (one server) and
// c (another), each a fresh directory of the fake.
func startPool(t *testing.T) (csi.ControllerClient, *nfsmounttest.Fake, *Driver) {
	t.Helper()
	exports := []string{"a=nfs.example:/a", "b=nfs.example:/b", "c=nfs2.example:/c"}
	var d *Driver
	conn, m, _ := startFakeWith(t, func(c *config.Config) { c.Exports = exports }, func(dr *Driver) { d = dr })
	for _, e := range []string{"nfs.example:/a", "nfs.example:/b", "nfs2.example:/c"} {
		server, share, _ := strings.Cut(e, ":")
		if err := os.MkdirAll(m.ExportDir(server, share), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return csi.NewControllerClient(conn), m, d
}

// space makes export (server:/share) report used and available bytes.
func space(m *nfsmounttest.Fake, source string, used, avail int64) {
	m.SetSpace(source, &nfsmount.Usage{UsedBytes: used, AvailableBytes: avail, TotalBytes: used + avail}, nil)
}

func createIn(t *testing.T, ctl csi.ControllerClient, name string, p map[string]string, src *csi.VolumeContentSource) (*csi.Volume, error) {
	t.Helper()
	r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: []*csi.VolumeCapability{rwx},
		Parameters: p, VolumeContentSource: src})
	return r.GetVolume(), err
}

// on says which export a volume ID names.
func on(v *csi.Volume) string {
	f := strings.Split(v.GetVolumeId(), "|")
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

// TestSharePoolPlacement: a class that names several exports places
// each new volume on the one with the most available space, skipping
// drained ones, those that cannot be read and those at or over the fill
// threshold, and says why for each when none is left; a retry of a
// creation finds the volume where it was placed, however the space
// changed meanwhile; clones and restores go on their source's export.
func TestSharePoolPlacement(t *testing.T) {
	ctl, m, d := startPool(t)
	pool := map[string]string{"export": "a, b"}
	space(m, "nfs.example:/a", 60, 40)
	space(m, "nfs.example:/b", 10, 90)
	v1, err := createIn(t, ctl, "pvc-1", pool, nil)
	if err != nil || on(v1) != "b" || v1.VolumeContext["export"] != "b" || v1.VolumeContext["share"] != "/b" {
		t.Fatalf("first volume %v, %v; want it on b, the emptier", v1, err)
	}
	// The space turns; the retry finds pvc-1 on b, a new volume goes to a.
	space(m, "nfs.example:/a", 10, 90)
	space(m, "nfs.example:/b", 60, 40)
	again, err := createIn(t, ctl, "pvc-1", pool, nil)
	if err != nil || again.GetVolumeId() != v1.GetVolumeId() {
		t.Fatalf("retry gave %v, %v; want %s", again, err, v1.GetVolumeId())
	}
	v2, err := createIn(t, ctl, "pvc-2", pool, nil)
	if err != nil || on(v2) != "a" {
		t.Fatalf("second volume %v, %v; want it on a", v2, err)
	}

	// Drained: a has more room and gets nothing.
	if v, err := createIn(t, ctl, "pvc-3", map[string]string{"export": "a,b", "drainExports": "a"}, nil); err != nil || on(v) != "b" {
		t.Errorf("with a drained: %v, %v; want b", v, err)
	}
	// Over the threshold: a at 90%, b at 60%.
	space(m, "nfs.example:/a", 90, 10)
	if v, err := createIn(t, ctl, "pvc-4", map[string]string{"export": "a,b", "fillThreshold": "50"}, nil); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "export a: 90% full, at or over fillThreshold 50%") || !strings.Contains(err.Error(), "export b: 60% full") {
		t.Errorf("both over the threshold: %v, %v", v, err)
	}
	if v, err := createIn(t, ctl, "pvc-4", map[string]string{"export": "a,b", "fillThreshold": "70"}, nil); err != nil || on(v) != "b" {
		t.Errorf("a over 70%%: %v, %v; want b", v, err)
	}
	// One that cannot be read is skipped, and rests a while.
	space(m, "nfs.example:/a", 0, 100)
	m.SetSpace("nfs.example:/b", nil, errors.New("statfs: no answer"))
	if v, err := createIn(t, ctl, "pvc-5", map[string]string{"export": "b,a"}, nil); err != nil || on(v) != "a" {
		t.Errorf("b not answering: %v, %v; want a", v, err)
	}
	space(m, "nfs.example:/b", 0, 1000)
	if v, err := createIn(t, ctl, "pvc-6", map[string]string{"export": "b,a"}, nil); err != nil || on(v) != "a" {
		t.Errorf("b resting after it did not answer: %v, %v; want a", v, err)
	}
	if _, err := createIn(t, ctl, "pvc-7", map[string]string{"export": "b"}, nil); err != nil {
		t.Errorf("a class of b alone reads nothing of its space: %v", err)
	}
	d.controller.placer.memo.rest(export.Export{Server: "nfs.example", Share: "/b"}, nil)

	// A clone and a restore of pvc-1 (on b) go on b, though a has more
	// room; a source on an export the class does not name is refused.
	space(m, "nfs.example:/a", 0, 1000)
	space(m, "nfs.example:/b", 90, 10)
	clone, err := createIn(t, ctl, "pvc-clone", pool, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v1.GetVolumeId()}}})
	if err != nil || on(clone) != "b" {
		t.Errorf("clone %v, %v; want it on b", clone, err)
	}
	snap, err := ctl.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: v1.GetVolumeId()})
	if err != nil {
		t.Fatal(err)
	}
	restored, err := createIn(t, ctl, "pvc-restored", pool, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.GetSnapshot().GetSnapshotId()}}})
	if err != nil || on(restored) != "b" {
		t.Errorf("restore %v, %v; want it on b", restored, err)
	}
	if v, err := createIn(t, ctl, "pvc-elsewhere", map[string]string{"export": "a,c"}, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: v1.GetVolumeId()}}}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a clone from outside the class: %v, %v", v, err)
	}

	// Capacity: the room of those that take volumes, below the threshold.
	space(m, "nfs.example:/a", 20, 80)
	space(m, "nfs.example:/b", 70, 30)
	capa, err := ctl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"export": "a,b", "fillThreshold": "80"}})
	if err != nil || capa.AvailableCapacity != 60+10 || capa.MaximumVolumeSize.GetValue() != 60 {
		t.Errorf("capacity %v, %v; want 70 in all, 60 the most", capa, err)
	}
	capa, err = ctl.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"export": "a,b", "drainExports": "a"}})
	if err != nil || capa.AvailableCapacity != 30 || capa.MaximumVolumeSize.GetValue() != 30 {
		t.Errorf("capacity with a drained %v, %v; want 30", capa, err)
	}

	// Refusals at the class.
	for p, code := range map[string]codes.Code{"export=a,zz": codes.InvalidArgument, "drain=c": codes.InvalidArgument, "shared": codes.InvalidArgument} {
		params := map[string]string{"export": "a,b"}
		switch p {
		case "export=a,zz":
			params["export"] = "a,zz"
		case "drain=c":
			params["drainExports"] = "c"
		case "shared":
			params["allowSharedSubDir"], params["onDelete"] = "true", "retain"
		}
		if v, err := createIn(t, ctl, "pvc-refused", params, nil); status.Code(err) != code {
			t.Errorf("%s: %v, %v; want %v", p, v, err, code)
		}
	}

	// A creation that failed on its export is retried there, never
	// placed anew: what it left there is not found elsewhere.
	if err := os.MkdirAll(m.ExportDir("nfs.example", "/a")+"/pvc-stuck", 0o755); err != nil {
		t.Fatal(err)
	}
	space(m, "nfs.example:/a", 0, 100)
	space(m, "nfs.example:/b", 0, 10)
	if _, err := createIn(t, ctl, "pvc-stuck", pool, nil); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a directory nfsdir did not make: %v", err)
	}
	space(m, "nfs.example:/b", 0, 1000)
	if v, err := createIn(t, ctl, "pvc-stuck", pool, nil); status.Code(err) != codes.AlreadyExists {
		t.Errorf("the retry went elsewhere: %v, %v", v, err)
	}

	// Every volume is deleted through the export it is on.
	for _, v := range []*csi.Volume{v1, v2, clone, restored} {
		if v == nil {
			continue
		}
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
			t.Errorf("delete %s: %v", v.GetVolumeId(), err)
		}
	}
}

// TestStuckMemberReadsAreBounded: an export whose reads never return (a
// server that died between its statfs and its record lookup, in a hard
// mount) holds at most maxMemberReads goroutines, whatever the number of
// placements; each placement still answers within memberWait and places
// on the export that answers.
func TestStuckMemberReadsAreBounded(t *testing.T) {
	defer func(w, r time.Duration) { memberWait, memberRest = w, r }(memberWait, memberRest)
	memberWait, memberRest = 30*time.Millisecond, 0
	release := make(chan struct{})
	defer close(release)
	var stuck, peak atomic.Int64
	dead, live := export.Export{Server: "dead.example", Share: "/a"}, export.Export{Server: "live.example", Share: "/b"}
	p := &placer{read: func(ctx context.Context, m member, key string, opts mountopts.Options) (memberState, error) {
		if m.at != dead {
			return memberState{avail: 1 << 30}, nil
		}
		n := stuck.Add(1)
		for {
			if old := peak.Load(); n <= old || peak.CompareAndSwap(old, n) {
				break
			}
		}
		<-release // the kernel does not let go
		stuck.Add(-1)
		return memberState{}, nil
	}}
	members := []member{{name: "a", at: dead}, {name: "b", at: live}}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			began := time.Now()
			got := p.readMembers(context.Background(), members, fmt.Sprint("k", i), params.Placement{}, nil)
			if took := time.Since(began); took > memberWait+time.Second {
				t.Errorf("a placement took %s", took)
			}
			if got[0].Err == nil || got[1].Err != nil || got[1].AvailableBytes != 1<<30 {
				t.Errorf("members read as %+v", got)
			}
		}()
	}
	wg.Wait()
	if n := peak.Load(); n > maxMemberReads || n == 0 {
		t.Fatalf("%d reads of the dead export were in flight at once, bound %d", n, maxMemberReads)
	}
}
