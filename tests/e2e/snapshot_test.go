package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/treecopy/treecopytest"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// snapshotDir is where the complete copy of the snapshot id is on the
// server.
func snapshotDir(t *testing.T, id string) string {
	t.Helper()
	sid, err := volumeid.ParseSnapshot(id)
	if err != nil {
		t.Fatal(err)
	}
	return onExport(".nfsdir/snapshots/" + sid.Key + "." + sid.Token)
}

// snapshotUntilReady calls CreateSnapshot until the snapshot is ready,
// as csi-snapshotter does, and returns it with the number of calls made.
func snapshotUntilReady(t *testing.T, c *lab.Client, name, source string) (*csi.Snapshot, int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for calls := 1; ; calls++ {
		r, err := c.Controller.CreateSnapshot(lab.Ctx(t, time.Minute), &csi.CreateSnapshotRequest{Name: name, SourceVolumeId: source})
		switch {
		case err == nil && r.Snapshot.ReadyToUse:
			return r.Snapshot, calls
		case err != nil && status.Code(err) != codes.Unavailable && status.Code(err) != codes.Aborted && status.Code(err) != codes.DeadlineExceeded:
			t.Fatalf("CreateSnapshot %s: %v", name, err)
		case time.Now().After(deadline):
			t.Fatalf("snapshot %s not ready after 5 minutes (%v)", name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// createUntilDone calls CreateVolume until it answers, as csi-provisioner
// does while a volume is being filled, and returns the volume with the
// number of calls made.
func createUntilDone(t *testing.T, c *lab.Client, req *csi.CreateVolumeRequest) (*csi.Volume, int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for calls := 1; ; calls++ {
		r, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), req)
		switch {
		case err == nil:
			return r.Volume, calls
		case status.Code(err) != codes.Aborted && status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded:
			t.Fatalf("CreateVolume %s: %v", req.Name, err)
		case time.Now().After(deadline):
			t.Fatalf("volume %s not filled after 5 minutes: %v", req.Name, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func fromSource(name string, vc *csi.VolumeCapability, snapshot, volume string) *csi.CreateVolumeRequest {
	cs := &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: volume}}}
	if snapshot != "" {
		cs = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapshot}}}
	}
	return &csi.CreateVolumeRequest{Name: name, Parameters: params("onDelete", "delete"), VolumeCapabilities: []*csi.VolumeCapability{vc},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}, VolumeContentSource: cs}
}

// TestSnapshotRestoreCloneOnRealNFS: a snapshot of a hostile tree is the
// tree, byte for byte and attribute for attribute as the server sees
// both; a restore made after the source changed has the old data, a clone
// the new; the snapshot outlives its source and restores after it is
// gone; deleting the snapshot leaves nothing but the purge's work; nothing
// outside the managed area is touched.
func TestSnapshotRestoreCloneOnRealNFS(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.2")
	src := c.Create(t, "pvc-snap-src", params("onDelete", "delete"), vc)
	hostileTree(t, onExport("pvc-snap-src"))
	snap, calls := snapshotUntilReady(t, c, "snap-hostile", src.VolumeId)
	t.Logf("snapshot ready after %d CreateSnapshot calls", calls)
	treecopytest.Compare(t, onExport("pvc-snap-src"), snapshotDir(t, snap.SnapshotId), true)
	if snap.SizeBytes != src.CapacityBytes || snap.SourceVolumeId != src.VolumeId || snap.CreationTime.AsTime().IsZero() {
		t.Errorf("snapshot %+v", snap)
	}

	// The source changes; a restore has the snapshot's data, a clone the
	// source's.
	must(t, os.WriteFile(onExport("pvc-snap-src/plain"), []byte("changed"), 0o644))
	must(t, os.WriteFile(onExport("pvc-snap-src/added"), []byte("added"), 0o644))
	restored, _ := createUntilDone(t, c, fromSource("pvc-snap-restored", vc, snap.SnapshotId, ""))
	treecopytest.Compare(t, snapshotDir(t, snap.SnapshotId), onExport("pvc-snap-restored"), false)
	clone, _ := createUntilDone(t, c, fromSource("pvc-snap-clone", vc, "", src.VolumeId))
	treecopytest.Compare(t, onExport("pvc-snap-src"), onExport("pvc-snap-clone"), false)

	// Published, the restored volume is an ordinary volume of its own.
	target := filepath.Join(t.TempDir(), "mnt")
	c.Publish(t, restored, target, vc, false)
	b, err := os.ReadFile(filepath.Join(target, "plain"))
	if err != nil || string(b) != "hello" {
		t.Errorf("restored volume's plain through NFS = %q, %v; want the snapshot's hello", b, err)
	}
	c.Unpublish(t, restored, target)

	// The snapshot outlives its source.
	c.Delete(t, src)
	late, _ := createUntilDone(t, c, fromSource("pvc-snap-late", vc, snap.SnapshotId, ""))
	treecopytest.Compare(t, snapshotDir(t, snap.SnapshotId), onExport("pvc-snap-late"), false)
	list, err := c.Controller.ListSnapshots(lab.Ctx(t, time.Minute), &csi.ListSnapshotsRequest{SnapshotId: snap.SnapshotId})
	if err != nil || len(list.Entries) != 1 || !list.Entries[0].Snapshot.ReadyToUse {
		t.Errorf("ListSnapshots after the source was deleted: %v, %v", list, err)
	}
	for i := 0; i < 2; i++ {
		if _, err := c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId}); err != nil {
			t.Fatal(err)
		}
	}
	if exists(snapshotDir(t, snap.SnapshotId)) {
		t.Error("the snapshot's copy outlived DeleteSnapshot")
	}
	for _, v := range []*csi.Volume{restored, clone, late} {
		c.Delete(t, v)
	}
	waitTrashEmpty(t)
	left, _ := os.ReadDir(onExport(".nfsdir/snapshots"))
	if len(left) != 0 {
		t.Errorf(".nfsdir/snapshots holds %v after every snapshot was deleted", left)
	}
}

// manyFiles writes n small files in n/100 directories below dir.
func manyFiles(t *testing.T, dir string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			must(t, os.MkdirAll(sub, 0o755))
		}
		must(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d", i%100)), []byte(fmt.Sprint(i)), 0o644))
	}
}

// attempts lists the snapshot copies being made on the server.
func attempts(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir(onExport(".nfsdir/snapshots"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestSnapshotAndRestoreResumeAfterAKill: the controller is killed
// (SIGKILL) while a snapshot's copy and then a restore's fill are under
// way. Neither leaves anything that looks complete: the snapshot is not
// ready and has no final copy, the restored volume answers Aborted. After
// the restart the copies start over and finish, the results are exact
// copies, and the cut attempts' leftovers end in the trash and are purged.
func TestSnapshotAndRestoreResumeAfterAKill(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	// Paced, so that each copy outlasts the call that starts it (2 s).
	p := lab.StartBinary(t, "", "--copy-rate=500")
	c := lab.Connect(t, p.Endpoint)
	vc := lab.RWX("nfsvers=4.2")
	src := c.Create(t, "pvc-kill-src", params("onDelete", "delete"), vc)
	manyFiles(t, onExport("pvc-kill-src"), 2000)

	r, err := c.Controller.CreateSnapshot(lab.Ctx(t, time.Minute), &csi.CreateSnapshotRequest{Name: "snap-kill", SourceVolumeId: src.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	if r.Snapshot.ReadyToUse {
		t.Fatal("a 2,000-file snapshot paced at 500 entries/s was ready within the call")
	}
	p.Kill()
	if exists(snapshotDir(t, r.Snapshot.SnapshotId)) {
		t.Fatal("a killed snapshot copy left a final copy")
	}
	if len(attempts(t)) != 1 {
		t.Errorf("copies being made after the kill: %v; want the cut one", attempts(t))
	}
	must(t, p.Restart(t))
	c = lab.Connect(t, p.Endpoint)
	snap, calls := snapshotUntilReady(t, c, "snap-kill", src.VolumeId)
	t.Logf("snapshot ready %d calls after the restart", calls)
	treecopytest.Compare(t, onExport("pvc-kill-src"), snapshotDir(t, snap.SnapshotId), true)
	if a := attempts(t); len(a) != 0 {
		t.Errorf("copies being made after the snapshot is ready: %v", a)
	}

	req := fromSource("pvc-kill-restored", vc, snap.SnapshotId, "")
	if _, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), req); status.Code(err) != codes.Aborted {
		t.Fatalf("restore of 2,000 files paced at 500 entries/s answered %v within the call; want Aborted while it fills", err)
	}
	p.Kill()
	must(t, p.Restart(t))
	c = lab.Connect(t, p.Endpoint)
	list, err := c.Controller.ListVolumes(lab.Ctx(t, time.Minute), &csi.ListVolumesRequest{})
	must(t, err)
	for _, e := range list.Entries {
		if e.Volume.VolumeContext["subDir"] == "pvc-kill-restored" {
			t.Error("a volume still being filled is listed")
		}
	}
	restored, calls := createUntilDone(t, c, req)
	t.Logf("restore done %d calls after the restart", calls)
	treecopytest.Compare(t, snapshotDir(t, snap.SnapshotId), onExport("pvc-kill-restored"), false)

	if _, err := c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId}); err != nil {
		t.Fatal(err)
	}
	c.Delete(t, restored)
	c.Delete(t, src)
	waitTrashEmpty(t)
}

// freeBytes is the free space of the file system at dir, as the server
// sees it.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	must(t, unix.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}

// TestSnapshotOnReflinkExportIsMetadataOnly: on an export whose file
// system shares blocks (XFS with reflink=1), a snapshot and a restore of a
// volume holding 64 MiB take no data room on the server and move no data
// over the wire: every file goes by NFSv4.2 CLONE, with no READ, WRITE or
// COPY; the copies are still exact.
func TestSnapshotOnReflinkExportIsMetadataOnly(t *testing.T) {
	lab.Require(t)
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.2")
	xfs := func(kv ...string) map[string]string {
		p := params(kv...)
		p["share"] = lab.XFSExport()
		return p
	}
	src := c.Create(t, "pvc-reflink-src", xfs("onDelete", "delete"), vc)
	dir := filepath.Join(lab.XFSExport(), "pvc-reflink-src")
	for i := 0; i < 8; i++ {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("data-%d", i)), bytes.Repeat([]byte{byte('a' + i)}, 8<<20), 0o644))
	}
	must(t, os.Symlink("data-0", filepath.Join(dir, "link")))
	lab.Sh(t, "sync")
	free := freeBytes(t, lab.XFSExport())
	before := lab.NFSOps("")
	snap, _ := snapshotUntilReady(t, c, "snap-reflink", src.VolumeId)
	sid, err := volumeid.ParseSnapshot(snap.SnapshotId)
	must(t, err)
	copyDir := filepath.Join(lab.XFSExport(), ".nfsdir/snapshots", sid.Key+"."+sid.Token)
	treecopytest.Compare(t, dir, copyDir, true)
	req := fromSource("pvc-reflink-restored", vc, snap.SnapshotId, "")
	req.Parameters = xfs("onDelete", "delete")
	restored, _ := createUntilDone(t, c, req)
	treecopytest.Compare(t, copyDir, filepath.Join(lab.XFSExport(), "pvc-reflink-restored"), false)
	after := lab.NFSOps("")
	lab.Sh(t, "sync")
	used := free - freeBytes(t, lab.XFSExport())
	d := func(op string) int64 { return after[op] - before[op] }
	t.Logf("snapshot + restore of 64 MiB: CLONE %d, COPY %d, READ %d, WRITE %d; %d KiB of the server's room used", d("CLONE"), d("COPY"), d("READ"), d("WRITE"), used>>10)
	if d("CLONE") < 16 || d("COPY") != 0 || d("READ") != 0 || d("WRITE") != 0 {
		t.Errorf("snapshot and restore on a reflink export must clone each of the 16 files and move no data")
	}
	if used > 8<<20 {
		t.Errorf("snapshot and restore used %d bytes on the server; shared blocks take none", used)
	}
	if _, err := c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId}); err != nil {
		t.Fatal(err)
	}
	c.Delete(t, restored)
	c.Delete(t, src)
}

// TestRestoreOfACSIDriverNFSSnapshot: a snapshot csi-driver-nfs took (its
// very command, GNU tar -czf of the volume onto the share, or tar -cf for
// an uncompressed one, and its snapshot ID) restores into an nfsdir volume
// with the tree as the archive holds it (times to the second, as GNU tar
// keeps them); the archive is never removed; one reached through a
// symlink is refused.
func TestRestoreOfACSIDriverNFSSnapshot(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.2")
	src := onExport("legacy-src")
	must(t, os.Mkdir(src, 0o755))
	defer os.RemoveAll(src)
	hostileTree(t, src)
	must(t, os.MkdirAll(onExport("snapshot-legacy"), 0o755))
	defer os.RemoveAll(onExport("snapshot-legacy"))
	id := lab.Server() + "#" + strings.TrimPrefix(lab.Export(), "/") + "#snapshot-legacy#snapshot-legacy#legacy-src"
	// csi-driver-nfs archives with gzip by default and makes a plain tar
	// with --enable-snapshot-compression=false, under the same ID.
	for _, format := range []struct{ file, flags string }{{"legacy-src.tar.gz", "-czf"}, {"legacy-src.tar", "-cf"}} {
		archive := onExport("snapshot-legacy/" + format.file)
		lab.Sh(t, "/opt/gnu/tar -C "+src+" "+format.flags+" "+archive+" .")
		name := "pvc-from-" + strings.ReplaceAll(format.file, ".", "-")
		v, calls := createUntilDone(t, c, fromSource(name, vc, id, ""))
		t.Logf("%s restored after %d calls", format.file, calls)
		want, got := treecopytest.Describe(t, src), treecopytest.Describe(t, onExport(name))
		for p, e := range want {
			g, ok := got[p]
			if p == "." {
				continue
			}
			e.Mtime.Nsec, e.AllocatedBelow, g.AllocatedBelow = 0, 0, 0
			if !ok || g != e {
				t.Errorf("%s: %s:\n archived %+v\n restored %+v", format.file, p, e, g)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: restored %d entries, the archive holds %d", format.file, len(got), len(want))
		}
		c.Delete(t, v)
		if !exists(archive) {
			t.Errorf("the csi-driver-nfs archive %s is gone", format.file)
		}
		must(t, os.Remove(archive))
	}
	lab.Sh(t, "/opt/gnu/tar -C "+src+" -cf "+onExport("snapshot-legacy/legacy-src.tar")+" .")
	// An archive reached through a symlink is never opened.
	must(t, os.Symlink(onExport("snapshot-legacy"), onExport("snapshot-link")))
	defer os.Remove(onExport("snapshot-link"))
	linked := strings.Replace(id, "#snapshot-legacy#snapshot-legacy#", "#snapshot-link#snapshot-link#", 1)
	if _, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), fromSource("pvc-from-link", vc, linked, "")); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("restore through a symlinked archive: %v; want FailedPrecondition", err)
	}
	if exists(onExport("pvc-from-link")) {
		t.Error("a refused restore left a directory")
	}
}

// TestAbandonedRestoreIsDiscarded: a restore whose claim went away while
// it was filled (CreateVolume asked once, then never again: the claim was
// deleted and csi-provisioner restarted) is discarded once nobody asked
// for it for --abandon-after: record, directory and marker gone, purged;
// a restore handed out meanwhile, asked for no more either, stays with
// its data; the snapshot and its source are untouched.
func TestAbandonedRestoreIsDiscarded(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	c := start(t, func(cfg *config.Config) { cfg.AbandonAfter = 3 * time.Second })
	vc := lab.RWX("nfsvers=4.2")
	src := c.Create(t, "pvc-abandon-src", params("onDelete", "delete"), vc)
	defer c.Delete(t, src)
	manyFiles(t, onExport("pvc-abandon-src"), 600)
	snap, _ := snapshotUntilReady(t, c, "snap-abandon", src.VolumeId)
	defer c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId})

	kept, _ := createUntilDone(t, c, fromSource("pvc-abandon-kept", vc, snap.SnapshotId, ""))
	// Asked for once, with a short deadline: the answer is "being filled".
	_, err := c.Controller.CreateVolume(lab.Ctx(t, 2*time.Second), fromSource("pvc-abandoned", vc, snap.SnapshotId, ""))
	if status.Code(err) != codes.Aborted {
		t.Fatalf("the first CreateVolume of a 600-file restore = %v; want Aborted (being filled)", err)
	}
	pending, _ := os.ReadDir(onExport(".nfsdir/pending"))
	t.Logf(".nfsdir/pending: %v", pending)
	deadline := time.Now().Add(2 * time.Minute)
	for exists(onExport("pvc-abandoned")) {
		if time.Now().After(deadline) {
			t.Fatal("the abandoned restore is still on the share after 2 minutes")
		}
		time.Sleep(500 * time.Millisecond)
	}
	waitTrashEmpty(t)
	for _, l := range []string{"pvc-abandoned"} {
		if exists(onExport(l)) {
			t.Errorf("%s is back", l)
		}
	}
	left, _ := os.ReadDir(onExport(".nfsdir/pending"))
	for _, e := range left {
		if e.Name() != ".clock" {
			t.Errorf(".nfsdir/pending holds %s after the sweep", e.Name())
		}
	}
	treecopytest.Compare(t, snapshotDir(t, snap.SnapshotId), onExport("pvc-abandon-kept"), false)
	if _, err := c.Controller.ControllerGetVolume(lab.Ctx(t, time.Minute), &csi.ControllerGetVolumeRequest{VolumeId: kept.VolumeId}); err != nil {
		t.Errorf("the restore handed out: %v", err)
	}
	// Asked for again (the claim was still there after all), it is made
	// anew.
	again, _ := createUntilDone(t, c, fromSource("pvc-abandoned", vc, snap.SnapshotId, ""))
	treecopytest.Compare(t, snapshotDir(t, snap.SnapshotId), onExport("pvc-abandoned"), false)
	for _, v := range []*csi.Volume{kept, again} {
		c.Delete(t, v)
	}
}
