// Package e2e exercises nfsdir against the lab's kernel NFS server and
// client: provisioning, publishing on two targets, each onDelete policy,
// templates, mount options, read-only mounts, stale handles and a dead
// server. Every test skips outside the lab guest.
package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

func start(t *testing.T, mutate func(*config.Config)) *lab.Client {
	lab.Require(t)
	d := lab.StartDriver(t, nfsmount.NewSystem(), mutate)
	return lab.Connect(t, d.Endpoint)
}

func params(kv ...string) map[string]string {
	p := map[string]string{"server": lab.Server(), "share": lab.Export()}
	for i := 0; i < len(kv); i += 2 {
		p[kv[i]] = kv[i+1]
	}
	return p
}

// onExport returns the path of rel on the server's side of the export.
func onExport(rel string) string { return filepath.Join(lab.Export(), rel) }

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// canaries plants files outside any volume and returns a check for them.
func canaries(t *testing.T) func() {
	t.Helper()
	files := map[string]string{
		onExport("canary-root"):         "root",
		onExport("sibling/canary"):      "sibling",
		onExport(".nfsdir/canary-meta"): "meta",
	}
	for p, v := range files {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return func() {
		t.Helper()
		for p, v := range files {
			if b, err := os.ReadFile(p); err != nil || string(b) != v {
				t.Errorf("canary %s changed: %q %v", p, b, err)
			}
		}
	}
}

func TestLifecycleEveryVersionAndPolicy(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	for _, vers := range []string{"3", "4.1", "4.2"} {
		for _, policy := range []string{"delete", "retain", "archive"} {
			t.Run("nfsvers="+vers+"/"+policy, func(t *testing.T) {
				name := "pvc-v" + strings.ReplaceAll(vers, ".", "") + "-" + policy
				vc := lab.RWX("nfsvers=" + vers)
				v := c.Create(t, name, params("onDelete", policy), vc)
				dir := onExport(name)
				st, err := os.Stat(dir)
				if err != nil || st.Mode().Perm() != 0o770 || st.Mode()&(os.ModeSetgid|os.ModeSetuid|os.ModeSticky) != 0 {
					t.Fatalf("volume directory %s: %v %v", dir, st.Mode(), err)
				}
				base := t.TempDir()
				t1, t2 := filepath.Join(base, "a"), filepath.Join(base, "b")
				c.Publish(t, v, t1, vc, false)
				c.Publish(t, v, t2, vc, false)
				c.Publish(t, v, t1, vc, false) // idempotent
				mi := lab.MountInfo(t, t1)
				if !strings.Contains(mi, "vers="+vers) || !strings.Contains(mi, lab.Server()+":"+dir) {
					t.Errorf("mountinfo of %s: %q", t1, mi)
				}
				payload := []byte("written on a, read on b: " + name)
				if err := os.WriteFile(filepath.Join(t1, "f"), payload, 0o644); err != nil {
					t.Fatal(err)
				}
				if got, err := os.ReadFile(filepath.Join(t2, "f")); err != nil || !bytes.Equal(got, payload) {
					t.Fatalf("read on b: %q %v", got, err)
				}
				c.Unpublish(t, v, t1)
				c.Unpublish(t, v, t2)
				c.Unpublish(t, v, t2) // idempotent
				if exists(t1) || lab.MountInfo(t, t1) != "" {
					t.Errorf("target %s still there after unpublish", t1)
				}
				c.Delete(t, v)
				c.Delete(t, v) // idempotent
				switch policy {
				case "retain":
					if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || !bytes.Equal(b, payload) {
						t.Errorf("retained data: %q %v", b, err)
					}
				case "archive":
					if exists(dir) || !exists(onExport("archived-"+name+"/f")) {
						t.Errorf("archive: %s exists=%v, archived exists=%v", dir, exists(dir), exists(onExport("archived-"+name)))
					}
				case "delete":
					if exists(dir) {
						t.Errorf("%s still exists", dir)
					}
					waitTrashEmpty(t)
				}
			})
		}
	}
}

func waitTrashEmpty(t *testing.T) {
	t.Helper()
	waitTrashEmptyOf(t, "")
}

// waitTrashEmptyOf waits until the trash of the share rooted at root (a
// path below the export; "" for the export itself) is empty: the
// background purge is done with it.
func waitTrashEmptyOf(t *testing.T, root string) {
	t.Helper()
	trash := onExport(filepath.Join(root, ".nfsdir/trash"))
	// Emulation on a busy machine slows purges down several-fold.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ents, err := os.ReadDir(trash)
		if err == nil && len(ents) == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Errorf("%s not purged within 2 minutes", trash)
}

func TestTemplatedSubDirAndParentPruning(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	p := params("subDir", "${pvc.metadata.namespace}/${pvc.metadata.name}",
		"csi.storage.k8s.io/pvc/name", "data", "csi.storage.k8s.io/pvc/namespace", "team-a",
		"csi.storage.k8s.io/pv/name", "pvc-tmpl-1")
	vc := lab.RWX()
	v := c.Create(t, "pvc-tmpl-1", p, vc)
	if got := v.GetVolumeContext()["subDir"]; got != "team-a/data" {
		t.Fatalf("subDir in context = %q", got)
	}
	if !exists(onExport("team-a/data")) {
		t.Fatal("templated directory missing")
	}
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	if !strings.Contains(lab.MountInfo(t, target), onExport("team-a/data")) {
		t.Errorf("mounted the wrong directory: %s", lab.MountInfo(t, target))
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
	if exists(onExport("team-a")) {
		t.Error("empty parent team-a left behind")
	}
	// A template that escapes is rejected before anything is touched.
	_, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{
		Name: "pvc-bad", VolumeCapabilities: []*csi.VolumeCapability{vc},
		Parameters: params("subDir", "${pvc.metadata.name}", "csi.storage.k8s.io/pvc/name", ".."),
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("escaping template: %v", err)
	}
}

func TestMountOptionsAndReadOnly(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.2", "timeo=150", "noatime")
	v := c.Create(t, "pvc-opts", params(), vc)
	v.VolumeContext["mountOptions"] = "retrans=4"
	target := filepath.Join(t.TempDir(), "ro")
	c.Publish(t, v, target, vc, true)
	mi := lab.MountInfo(t, target)
	for _, want := range []string{"vers=4.2", "timeo=150", "noatime", "retrans=4", " ro,"} {
		if !strings.Contains(mi, want) {
			t.Errorf("mountinfo lacks %q: %s", want, mi)
		}
	}
	if err := os.WriteFile(filepath.Join(target, "x"), []byte("x"), 0o644); err == nil {
		t.Error("wrote through a read-only publish")
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

func TestIPv6Server(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1")
	p := params()
	p["server"] = "::1"
	v := c.Create(t, "pvc-ipv6", p, vc)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	if mi := lab.MountInfo(t, target); !strings.Contains(mi, "[::1]:"+onExport("pvc-ipv6")) {
		t.Errorf("IPv6 mount: %s", mi)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

func TestCapacityAndStats(t *testing.T) {
	c := start(t, nil)
	resp, err := c.Controller.GetCapacity(lab.Ctx(t, time.Minute), &csi.GetCapacityRequest{Parameters: params()})
	if err != nil || resp.GetAvailableCapacity() <= 0 || resp.GetAvailableCapacity() > 1<<30 {
		t.Fatalf("GetCapacity = %v, %v (the lab export is a 1 GiB tmpfs)", resp, err)
	}
	vc := lab.RWX()
	v := c.Create(t, "pvc-stats", params(), vc)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	st, err := c.Node.NodeGetVolumeStats(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: target})
	if err != nil || len(st.GetUsage()) != 2 || st.GetUsage()[0].GetTotal() <= 0 {
		t.Fatalf("NodeGetVolumeStats = %v, %v", st, err)
	}
	c.Unpublish(t, v, target)
	if _, err := c.Node.NodeGetVolumeStats(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: target}); status.Code(err) != codes.NotFound {
		t.Errorf("stats of unpublished target: %v", err)
	}
	c.Delete(t, v)
}

// TestStaleHandleHeals removes and recreates a published volume's directory
// on the server, which leaves the client's mount with a stale root handle.
func TestStaleHandleHeals(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1")
	v := c.Create(t, "pvc-stale", params("onDelete", "retain"), vc)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	lab.Sh(t, "rm -rf "+onExport("pvc-stale")+" && mkdir -m 2770 "+onExport("pvc-stale")+" && echo new > "+onExport("pvc-stale/marker"))
	health, err := c.Node.NodeGetVolumeHealth(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId, VolumePublishPath: target})
	if err != nil || len(health.GetVolumeHealth().GetHealthStatuses()) != 1 ||
		health.GetVolumeHealth().GetHealthStatuses()[0].GetReason() != "StaleFileHandle" {
		t.Fatalf("health of a stale mount = %v, %v", health, err)
	}
	_, err = c.Node.NodeGetVolumeStats(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: target})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "stale") {
		t.Errorf("stats of a stale mount: %v", err)
	}
	c.Publish(t, v, target, vc, false) // heals
	if b, err := os.ReadFile(filepath.Join(target, "marker")); err != nil || string(b) != "new\n" {
		t.Fatalf("after healing publish: %q %v", b, err)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
}

// TestDeadServer stops nfsd: a publish is killed at the mount timeout with no
// mount process left behind; unpublish and stats of existing mounts return
// within bounds; after the server returns, publishing works again.
func TestDeadServer(t *testing.T) {
	c := start(t, func(cfg *config.Config) { cfg.MountTimeout = 5 * time.Second })
	vc := lab.RWX("nfsvers=4.1")
	v := c.Create(t, "pvc-dead", params("onDelete", "delete"), vc)
	base := t.TempDir()
	mounted := filepath.Join(base, "mounted")
	c.Publish(t, v, mounted, vc, false)

	lab.StopNFSServer(t)
	restarted := false
	defer func() {
		if !restarted {
			lab.StartNFSServer(t)
		}
	}()

	start := time.Now()
	err := c.TryPublish(lab.Ctx(t, time.Minute), v, filepath.Join(base, "new"), vc, false)
	took := time.Since(start)
	if status.Code(err) != codes.DeadlineExceeded || took > 20*time.Second {
		t.Errorf("publish to a dead server: %v after %s", err, took)
	}
	time.Sleep(500 * time.Millisecond)
	if ps := lab.Processes("mount"); len(ps) > 0 {
		t.Errorf("mount processes left behind: %v", ps)
	}

	start = time.Now()
	_, err = c.Node.NodeGetVolumeStats(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeStatsRequest{VolumeId: v.VolumeId, VolumePath: mounted})
	if took := time.Since(start); status.Code(err) != codes.Unavailable || took > 15*time.Second {
		t.Errorf("stats on a dead server: %v after %s", err, took)
	}
	start = time.Now()
	c.Unpublish(t, v, mounted)
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("unpublish on a dead server took %s", took)
	}
	if lab.MountInfo(t, mounted) != "" {
		t.Error("dead mount still in the mount table")
	}
	resp, err := c.Identity.Probe(lab.Ctx(t, 10*time.Second), &csi.ProbeRequest{})
	if err != nil || !resp.GetReady().GetValue() {
		t.Errorf("probe during outage: %v %v", resp, err)
	}

	lab.StartNFSServer(t)
	restarted = true
	start = time.Now()
	again := filepath.Join(base, "again")
	c.Publish(t, v, again, vc, false)
	took = time.Since(start)
	t.Logf("publish after the server returned took %s", took)
	if took > 5*time.Second {
		t.Errorf("publish after the outage took %s; the first mount to a healthy server takes well under a second", took)
	}
	c.Unpublish(t, v, again)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId}); err != nil {
		t.Errorf("delete after the outage: %v", err)
	}
}

// TestControllerRemountsStaleShare replaces the exported filesystem under a
// running controller: its kept share mount goes stale, and the next
// CreateVolume must notice, mount the share again and succeed.
func TestControllerRemountsStaleShare(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1")
	c.Create(t, "pvc-before-reexport", params(), vc)
	lab.ReplaceExport(t)
	v := c.Create(t, "pvc-after-reexport", params(), vc)
	if !exists(onExport("pvc-after-reexport")) || !exists(onExport(".nfsdir/volumes")) {
		t.Fatal("volume not created on the new filesystem")
	}
	c.Delete(t, v)
}

// TestPurgeResumesAfterRestart stops the controller while it purges a
// deleted volume; a new controller with the same state directory finishes
// the purge on its own, without any further call.
func TestPurgeResumesAfterRestart(t *testing.T) {
	lab.Require(t)
	state := filepath.Join(t.TempDir(), "state")
	withState := func(cfg *config.Config) { cfg.StateDir = state }
	d := lab.StartDriver(t, nfsmount.NewSystem(), withState)
	c := lab.Connect(t, d.Endpoint)
	vc := lab.RWX("nfsvers=4.2")
	v := c.Create(t, "pvc-resume", params("onDelete", "delete"), vc)
	for i := 0; i < 20; i++ {
		sub := onExport(filepath.Join("pvc-resume", "d"+string(rune('a'+i))))
		os.MkdirAll(sub, 0o755)
		for j := 0; j < 200; j++ {
			os.WriteFile(filepath.Join(sub, "f"+string(rune('a'+j%26))+string(rune('a'+j/26))), nil, 0o644)
		}
	}
	c.Delete(t, v)
	d.Stop()
	ents, _ := os.ReadDir(onExport(".nfsdir/trash"))
	if len(ents) != 1 {
		t.Fatalf("trash after stopping mid-purge: %d entries, want 1 (the purge must stop with the driver)", len(ents))
	}
	lab.StartDriver(t, nfsmount.NewSystem(), withState)
	waitTrashEmpty(t)
	if exists(onExport("pvc-resume")) {
		t.Error("volume directory back")
	}
}
