package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// This file holds lab tests of nfsdir's safety rules that fit no other
// file.

// TestControllerWithEmptyStateDeletesEveryVolume: mount options too long
// for the volume ID were kept only in the controller's state directory,
// which the chart backs with an emptyDir, so a new controller pod answered
// DeleteVolume with FailedPrecondition forever. The ID now carries the
// options needed to reach the share next to the digest of the full list.
func TestControllerWithEmptyStateDeletesEveryVolume(t *testing.T) {
	lab.Require(t)
	long := lab.RWX("nfsvers=4.2", "hard", "timeo=600", "retrans=5", "rsize=1048576", "wsize=1048576",
		"acregmin=3", "acregmax=60", "acdirmin=30", "acdirmax=60", "noresvport")
	first := lab.StartDriver(t, nfsmount.NewSystem(), nil)
	c := lab.Connect(t, first.Endpoint)
	v := c.Create(t, "pvc-long-options", params("onDelete", "delete"), long)
	if !strings.Contains(v.VolumeId, "|@") || !strings.Contains(v.VolumeId, "nfsvers=4.2") {
		t.Fatalf("volume ID %q: want a digest of the options and the version needed to reach the share", v.VolumeId)
	}
	os.WriteFile(onExport("pvc-long-options/data"), []byte("x"), 0o644)
	first.Stop()
	// The seal holds the directory's NFS file handle; the new controller's
	// share mount (other options, so another superblock) must see the same.
	recs, _ := filepath.Glob(onExport(".nfsdir/volumes/*"))
	for _, r := range recs {
		if b, err := os.Readlink(r); err == nil && strings.Contains(b, `"pvc-long-options"`) && !strings.Contains(b, `"handle":"`) {
			t.Errorf("record without a file handle: %s", b)
		}
	}

	fresh := filepath.Join(t.TempDir(), "new-pod-state")
	second := lab.StartDriver(t, nfsmount.NewSystem(), func(cfg *config.Config) { cfg.StateDir = fresh })
	c = lab.Connect(t, second.Endpoint)
	c.Delete(t, v)
	waitTrashEmpty(t)
	if exists(onExport("pvc-long-options")) {
		t.Error("volume directory still on the share after DeleteVolume by a controller with an empty state directory")
	}
	mounts := lab.Sh(t, "cat /proc/mounts")
	var found bool
	for _, l := range strings.Split(mounts, "\n") {
		if strings.Contains(l, fresh) {
			found = true
			if !strings.Contains(l, "vers=4.2") {
				t.Errorf("share mounted without the ID's version: %s", l)
			}
		}
	}
	if !found {
		t.Errorf("no share mount under the new state directory %s", fresh)
	}
}

// TestHungShareStallsNothingElse: one share whose server stops answering
// (a proxy that stops passing bytes) while its purge runs and calls on it
// are in flight. Calls on another share keep working, and SIGTERM ends the
// controller within the 30 s kubelet gives a pod by default.
func TestHungShareStallsNothingElse(t *testing.T) {
	lab.Require(t)
	proxy := lab.StartProxy(t)
	defer proxy.Resume() // let the kernel finish what it holds before the guest stops
	p := lab.StartBinary(t, "")
	c := lab.Connect(t, p.Endpoint)
	hung := lab.RWX("nfsvers=3", "proto=tcp", "mountproto=tcp", "nolock", fmt.Sprintf("port=%d", proxy.Port))
	healthy := lab.RWX("nfsvers=4.2")

	v := c.Create(t, "pvc-on-hung-share", params("onDelete", "delete"), hung)
	for i := 0; i < 40; i++ {
		d := onExport(fmt.Sprintf("pvc-on-hung-share/d%d", i))
		os.MkdirAll(d, 0o755)
		for j := 0; j < 250; j++ {
			os.WriteFile(filepath.Join(d, fmt.Sprint(j)), nil, 0o644)
		}
	}
	c.Delete(t, v) // the purge of 10,000 entries starts through the proxy
	proxy.Pause()
	// A call on the hung share answers within its deadline, whatever it is.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err := c.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-hung-2", Parameters: params(),
		VolumeCapabilities: []*csi.VolumeCapability{hung}})
	cancel()
	if err == nil {
		t.Error("CreateVolume on the hung share succeeded")
	}

	var slowest time.Duration
	for i := 0; i < 10; i++ {
		start := time.Now()
		w := c.Create(t, fmt.Sprintf("pvc-healthy-%d", i), params("onDelete", "delete"), healthy)
		c.Delete(t, w)
		slowest = max(slowest, time.Since(start))
	}
	t.Logf("create+delete on the healthy share while the other hangs: slowest %s", slowest)

	start := time.Now()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan error, 1)
	go func() { exited <- p.Cmd.Wait() }()
	select {
	case err := <-exited:
		t.Logf("SIGTERM to exit with a hung share: %s (%v)", time.Since(start).Round(100*time.Millisecond), err)
		if time.Since(start) > 30*time.Second {
			t.Errorf("the controller took %s to stop; kubelet kills it after 30 s", time.Since(start))
		}
	case <-time.After(90 * time.Second):
		p.Kill()
		t.Fatal("the controller did not stop within 90 s of SIGTERM")
	}
}

// TestMetadataAreaReplacedThroughTheShareRoot: whoever can write the share
// root replaces .nfsdir/trash by a link to another directory. Before, the
// next controller start listed that directory as the trash and purged it.
// Now the share is refused, naming the path, until it is put back.
func TestMetadataAreaReplacedThroughTheShareRoot(t *testing.T) {
	lab.Require(t)
	state := filepath.Join(t.TempDir(), "state")
	withState := func(cfg *config.Config) { cfg.StateDir = state }
	d := lab.StartDriver(t, nfsmount.NewSystem(), withState)
	c := lab.Connect(t, d.Endpoint)
	vc := lab.RWX("nfsvers=4.2")
	v := c.Create(t, "pvc-meta-swap", params("onDelete", "delete"), vc)
	d.Stop()

	victim := onExport("team-x-data")
	os.MkdirAll(filepath.Join(victim, "db"), 0o755)
	for i := 0; i < 20; i++ {
		os.WriteFile(filepath.Join(victim, "db", fmt.Sprint(i)), []byte("precious"), 0o644)
	}
	defer os.RemoveAll(victim)
	lab.Sh(t, "mv "+onExport(".nfsdir/trash")+" "+onExport(".nfsdir/trash.orig")+" && ln -s ../team-x-data "+onExport(".nfsdir/trash"))

	d = lab.StartDriver(t, nfsmount.NewSystem(), withState) // resumes the share's purges
	c = lab.Connect(t, d.Endpoint)
	time.Sleep(3 * time.Second)
	if ents, _ := os.ReadDir(filepath.Join(victim, "db")); len(ents) != 20 {
		t.Fatalf("directory behind the swapped trash: %d of 20 files left", len(ents))
	}
	// The whole test's calls: a loaded machine took 37 s for them.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := c.Controller.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: v.VolumeId})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), ".nfsdir/trash") {
		t.Errorf("DeleteVolume with .nfsdir/trash a symlink: %v; want FailedPrecondition naming it", err)
	}
	if !exists(onExport("pvc-meta-swap")) {
		t.Error("volume moved although the share was refused")
	}

	// Put back as it was, the share works again.
	lab.Sh(t, "rm "+onExport(".nfsdir/trash")+" && mv "+onExport(".nfsdir/trash.orig")+" "+onExport(".nfsdir/trash"))
	c.Delete(t, v)
	waitTrashEmpty(t)

	// A metadata directory others may write is refused as well.
	lab.Sh(t, "chmod 0777 "+onExport(".nfsdir"))
	defer lab.Sh(t, "chmod 0700 "+onExport(".nfsdir"))
	d.Stop()
	d = lab.StartDriver(t, nfsmount.NewSystem(), nil)
	c = lab.Connect(t, d.Endpoint)
	_, err = c.Controller.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-meta-mode", Parameters: params(),
		VolumeCapabilities: []*csi.VolumeCapability{vc}})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "mode 0777") {
		t.Errorf("CreateVolume with .nfsdir mode 0777: %v; want FailedPrecondition", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(victim, "db")); len(ents) != 20 {
		t.Errorf("directory behind the swapped trash: %d of 20 files left", len(ents))
	}
}

// TestSharedVolumesTakeNothingOver: a shared volume (allowSharedSubDir)
// joins only a directory nfsdir created as a shared directory for that
// subDir, and obeys the nesting rules. Before, it re-owned an exclusive
// volume's parent, exposing that volume to its pods, and a directory made
// by hand; and an exclusive volume could be made inside a shared one.
func TestSharedVolumesTakeNothingOver(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	vc := lab.RWX("nfsvers=4.2")
	shared := func(subDir string, kv ...string) map[string]string {
		return params(append([]string{"subDir", subDir, "allowSharedSubDir", "true", "onDelete", "retain"}, kv...)...)
	}
	owner := func(p string) string { return lab.Sh(t, "stat -c '%u:%g %a' "+onExport(p)) }

	db := c.Create(t, "pvc-db", params("subDir", "team-b/db", "onDelete", "delete"), vc)
	os.WriteFile(onExport("team-b/db/table"), []byte("rows"), 0o600)
	os.MkdirAll(onExport("handmade"), 0o750)
	before := map[string]string{"team-b": owner("team-b"), "handmade": owner("handmade")}
	for name, subDir := range map[string]string{"pvc-over-parent": "team-b", "pvc-over-handmade": "handmade", "pvc-over-volume": "team-b/db"} {
		err := createErr(c, t, name, shared(subDir, "uid", "4242", "gid", "4242", "mountPermissions", "0777"))
		if code := status.Code(err); code != codes.AlreadyExists && code != codes.FailedPrecondition {
			t.Errorf("shared volume on %s: %v; want AlreadyExists or FailedPrecondition", subDir, err)
		}
	}
	for p, was := range before {
		if now := owner(p); now != was {
			t.Errorf("%s: owner and mode %s became %s", p, strings.TrimSpace(was), strings.TrimSpace(now))
		}
	}
	if b, err := os.ReadFile(onExport("team-b/db/table")); err != nil || string(b) != "rows" {
		t.Errorf("exclusive volume's data: %q %v", b, err)
	}

	s1 := c.Create(t, "pvc-common-1", shared("common", "mountPermissions", "0770"), vc)
	s2 := c.Create(t, "pvc-common-2", shared("common", "mountPermissions", "0770"), vc)
	if err := createErr(c, t, "pvc-common-other-mode", shared("common", "mountPermissions", "0777")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("joining a shared directory with another mode: %v; want AlreadyExists", err)
	}
	for name, p := range map[string]map[string]string{
		"pvc-in-shared":        params("subDir", "common/x", "onDelete", "delete"),
		"pvc-shared-in-shared": shared("common/y"),
		"pvc-shared-in-volume": shared("team-b/db/z"),
	} {
		if err := createErr(c, t, name, p); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s (subDir %s): %v; want InvalidArgument (volumes never nest)", name, p["subDir"], err)
		}
	}
	if got := strings.TrimSpace(owner("common")); got != "0:0 770" {
		t.Errorf("shared directory: %s, want 0:0 770", got)
	}
	for _, v := range []*csi.Volume{s1, s2, db} {
		c.Delete(t, v)
	}
	// Every sharer gone, the directory stays nfsdir's shared directory:
	// a new sharer joins it, an exclusive volume still may not.
	s3 := c.Create(t, "pvc-common-3", shared("common", "mountPermissions", "0770"), vc)
	c.Delete(t, s3)
	if err := createErr(c, t, "pvc-common-exclusive", params("subDir", "common")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("exclusive volume over a shared directory: %v", err)
	}
}

// TestCrashStatesAreNeverTakenOver: states a crash leaves between the
// record and the directory's seal. A retry never seals, chowns or chmods a
// directory it cannot prove it made, and Delete leaves it alone; a record
// whose directory was never made stops blocking its subDir once abandoned.
func TestCrashStatesAreNeverTakenOver(t *testing.T) {
	// Records are edited on the server below: no client-side caching.
	vc := lab.RWX("nfsvers=4.2", "lookupcache=none", "actimeo=0")
	c := start(t, nil)
	check := canaries(t)
	defer check()
	create := func(name string, p map[string]string) error {
		_, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{
			Name: name, Parameters: p, VolumeCapabilities: []*csi.VolumeCapability{vc},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		return err
	}
	record := func(subDir string) string { return onExport(".nfsdir/volumes/" + volumeid.KeyForDir(subDir)) }
	rewrite := func(subDir string, edit func(map[string]any)) {
		m := map[string]any{}
		if b, err := os.Readlink(record(subDir)); err == nil {
			json.Unmarshal([]byte(b), &m)
		}
		edit(m)
		b, _ := json.Marshal(m)
		os.Remove(record(subDir))
		if err := os.Symlink(string(b), record(subDir)); err != nil {
			t.Fatal(err)
		}
	}

	// A crash before the seal, and someone's directory now at the path.
	p := params("subDir", "pvc-crash-a", "onDelete", "delete", "uid", "4242", "gid", "4242", "mountPermissions", "0700")
	v := c.Create(t, "pvc-crash-a", p, vc)
	rewrite("pvc-crash-a", func(m map[string]any) { delete(m, "fileID"); delete(m, "handle") })
	lab.Sh(t, "rmdir "+onExport("pvc-crash-a")+" && mkdir -m 0755 "+onExport("pvc-crash-a")+" && echo theirs > "+onExport("pvc-crash-a/file"))
	if err := create("pvc-crash-a", p); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cannot prove") {
		t.Errorf("retry over a directory nfsdir cannot prove it made: %v; want FailedPrecondition", err)
	}
	if err := deleteErr(c, t, v.VolumeId); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("delete of a directory nfsdir cannot prove it made: %v; want FailedPrecondition", err)
	}
	if got := strings.TrimSpace(lab.Sh(t, "stat -c '%u:%g %a' "+onExport("pvc-crash-a")+" && cat "+onExport("pvc-crash-a/file"))); got != "0:0 755\ntheirs" {
		t.Errorf("the directory was changed: %q", got)
	}

	// A record whose directory was never made, its claim gone since.
	rewrite("pvc-crash-b", func(m map[string]any) {
		for k, v := range map[string]any{"version": 1, "name": "pvc-old-claim", "token": "aaaaaaaa", "subDir": "pvc-crash-b",
			"onDelete": "delete", "mode": 0o777, "uid": -1, "gid": -1, "created": time.Now().UTC().Add(-10 * time.Minute)} {
			m[k] = v
		}
	})
	if err := create("pvc-crash-b-new", params("subDir", "pvc-crash-b")); status.Code(err) != codes.AlreadyExists {
		t.Errorf("subDir of a record 10 minutes old: %v; want AlreadyExists", err)
	}
	rewrite("pvc-crash-b", func(m map[string]any) { m["created"] = time.Now().UTC().Add(-2 * time.Hour) })
	if err := create("pvc-crash-b-new", params("subDir", "pvc-crash-b")); err != nil {
		t.Errorf("subDir of a record abandoned 2 hours ago: %v", err)
	}
	if !exists(onExport("pvc-crash-b")) {
		t.Error("no directory for the volume that reclaimed the subDir")
	}
}

// holdStep makes the first call that reaches step for subDir (through
// provision.StepHook, in this process's drivers) wait until release is
// closed; held is closed when it arrives. Later calls pass. The hook is
// reset when the test ends.
func holdStep(t *testing.T, step, subDir string) (held, release chan struct{}) {
	held, release = make(chan struct{}), make(chan struct{})
	var holding atomic.Bool
	provision.StepHook = func(s, d string) {
		if s == step && d == subDir && holding.CompareAndSwap(false, true) {
			close(held)
			<-release
		}
	}
	t.Cleanup(func() { provision.StepHook = func(string, string) {} })
	return held, release
}

// TestTwoControllersNeverActOnEachOthersVolumes: two controllers on one
// share (separate NFS caches: nosharecache), as during a leader change. The
// first one's DeleteVolume is held at a step (a deposed leader); meanwhile
// the second deletes the volume and the claim is created again at the same
// directory with new data. When the first resumes, the new volume's
// directory and record are untouched.
func TestTwoControllersNeverActOnEachOthersVolumes(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	vc := lab.RWX("nfsvers=4.2", "nosharecache")
	first := lab.Connect(t, lab.StartDriver(t, nfsmount.NewSystem(), nil).Endpoint)
	second := lab.Connect(t, lab.StartDriver(t, nfsmount.NewSystem(), nil).Endpoint)
	for i, step := range []string{"delete:move", "delete:rmdir", "delete:record"} {
		subDir := fmt.Sprintf("team-r/claim-%d", i)
		p := params("subDir", subDir, "onDelete", "delete")
		old := first.Create(t, "pvc-leader-change", p, vc)
		os.WriteFile(onExport(subDir+"/old-data"), []byte("old"), 0o644)

		held, release := holdStep(t, step, subDir)
		done := make(chan error, 1)
		go func() {
			_, err := first.Controller.DeleteVolume(lab.Ctx(t, 2*time.Minute), &csi.DeleteVolumeRequest{VolumeId: old.VolumeId})
			done <- err
		}()
		<-held
		second.Delete(t, old)
		waitTrashEmpty(t)
		now := second.Create(t, "pvc-leader-change", p, vc)
		os.WriteFile(onExport(subDir+"/new-data"), []byte("new"), 0o644)
		close(release)
		err := <-done
		t.Logf("%s: the held DeleteVolume answered %v", step, err)

		if b, err := os.ReadFile(onExport(subDir + "/new-data")); err != nil || string(b) != "new" {
			t.Errorf("%s: the new volume's data: %q %v", step, b, err)
		}
		id, _ := volumeid.Parse(now.VolumeId)
		if b, err := os.Readlink(onExport(".nfsdir/volumes/" + id.Key)); err != nil || !strings.Contains(b, `"token":"`+id.Token+`"`) {
			t.Errorf("%s: the new volume's record: %q %v", step, b, err)
		}
		if left, _ := filepath.Glob(onExport(".nfsdir/trash/.*")); len(left) > 0 {
			t.Errorf("%s: left pending in the trash: %v", step, left)
		}
		second.Delete(t, now)
		waitTrashEmpty(t)
		if exists(onExport(subDir)) {
			t.Errorf("%s: the new volume was not deleted", step)
		}
	}
}

// TestTwoControllersNeverNestVolumes: the first controller's CreateVolume
// of team-n/x is held between its record and its directory while the
// second creates team-n: the inner one is refused and leaves nothing.
func TestTwoControllersNeverNestVolumes(t *testing.T) {
	lab.Require(t)
	vc := lab.RWX("nfsvers=4.2", "nosharecache")
	first := lab.Connect(t, lab.StartDriver(t, nfsmount.NewSystem(), nil).Endpoint)
	second := lab.Connect(t, lab.StartDriver(t, nfsmount.NewSystem(), nil).Endpoint)
	held, release := holdStep(t, "create:dir", "team-n/x")
	done := make(chan error, 1)
	go func() {
		_, err := first.Controller.CreateVolume(lab.Ctx(t, 2*time.Minute), &csi.CreateVolumeRequest{Name: "pvc-inner",
			Parameters: params("subDir", "team-n/x"), VolumeCapabilities: []*csi.VolumeCapability{vc}})
		done <- err
	}()
	<-held
	outer := second.Create(t, "pvc-outer", params("subDir", "team-n", "onDelete", "delete"), vc)
	close(release)
	if err := <-done; status.Code(err) != codes.InvalidArgument {
		t.Errorf("inner volume created while the outer one appeared: %v; want InvalidArgument", err)
	}
	if exists(onExport("team-n/x")) {
		t.Error("the inner volume's directory was left inside the outer volume")
	}
	if exists(onExport(".nfsdir/volumes/" + volumeid.KeyForDir("team-n/x"))) {
		t.Error("the inner volume's record was left")
	}
	second.Delete(t, outer)
}

// TestOverlappingSharesNeverDestroyEachOther: two StorageClasses whose
// shares overlap (/export, and a share inside it). Records are per share,
// so neither sees the other's volumes; nfsdir still never deletes or
// purges the other share, and never makes a volume inside its root.
func TestOverlappingSharesNeverDestroyEachOther(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	vc := lab.RWX("nfsvers=4.2")
	inner := func(share string, kv ...string) map[string]string {
		p := params(kv...)
		p["share"] = onExport(share)
		return p
	}

	// The second share's root is the first share's volume directory.
	holder := c.Create(t, "pvc-holder", params("onDelete", "delete"), vc)
	b := c.Create(t, "pvc-b", inner("pvc-holder"), vc)
	os.WriteFile(onExport("pvc-holder/pvc-b/data"), []byte("b"), 0o644)
	if err := deleteErr(c, t, holder.VolumeId); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "another nfsdir share") {
		t.Errorf("delete of a volume that is another share's root: %v; want FailedPrecondition", err)
	}

	// The second share lies deeper in a deleted volume: the purge keeps it.
	deep := c.Create(t, "pvc-deep", params("onDelete", "delete"), vc)
	os.MkdirAll(onExport("pvc-deep/team/share"), 0o755)
	os.WriteFile(onExport("pvc-deep/team/other-data"), []byte("x"), 0o644)
	d := c.Create(t, "pvc-d", inner("pvc-deep/team/share"), vc)
	os.WriteFile(onExport("pvc-deep/team/share/pvc-d/data"), []byte("d"), 0o644)
	c.Delete(t, deep)
	time.Sleep(3 * time.Second)
	kept, _ := filepath.Glob(onExport(".nfsdir/trash/*/team/share/pvc-d/data"))
	if len(kept) != 1 {
		t.Errorf("the share inside a deleted volume was purged: %v", kept)
	}
	if left, _ := filepath.Glob(onExport(".nfsdir/trash/*/team/other-data")); len(left) != 0 {
		t.Errorf("the rest of the deleted volume was not purged: %v", left)
	}

	// No volume inside another share's root.
	os.MkdirAll(onExport("team-o"), 0o755)
	o := c.Create(t, "pvc-o", inner("team-o"), vc)
	if err := createErr(c, t, "pvc-in-other-share", params("subDir", "team-o/x")); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "another nfsdir share") {
		t.Errorf("volume inside another share's root: %v; want InvalidArgument", err)
	}
	for _, v := range []*csi.Volume{b, d, o} {
		c.Delete(t, v)
	}
	// Once the other share is gone, its holder is deleted as any volume.
	// (Its purges first: removing a trash the purge still works on races
	// with it.)
	waitTrashEmptyOf(t, "pvc-holder")
	waitTrashEmptyOf(t, "team-o")
	lab.Sh(t, "rm -rf "+onExport("pvc-holder/.nfsdir")+" "+onExport("team-o"))
	c.Delete(t, holder)
	// What the purge leaves alone by design goes by hand.
	lab.Sh(t, "rm -rf "+onExport(".nfsdir/trash")+"/*")
}
