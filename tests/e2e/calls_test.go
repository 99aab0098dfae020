package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// TestCallsThroughTheMount: what a CreateVolume and an empty DeleteVolume
// cost the controller's NFS client (its share mount, lookupcache=none),
// median of five, on NFSv4.2: at most 9 and 20 calls (10 before the new
// directory was sealed, owned and given its mode through an O_PATH
// descriptor, which asks the server no ACCESS; 11 and 28 before the
// directory was checked through one O_PATH descriptor, the record
// read by the call reused, the records renamed with one renameat and the
// share root no longer reopened on a mount that never caches names; the
// per-call breakdown is in the README). One level down (subDir
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
		cfg.CountEvery = 0      // no usage counts beside the calls counted
		cfg.NFSSessions = false // the mount alone (TestCallsThroughASession: with its own session)
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

// TestCallsThroughASession: with its own NFSv4.1 session (the default on
// a share mounted with NFS 4.1 or 4.2), the controller's CreateVolume
// costs the server at most 2 calls, counted by the server itself, none
// through the mount: two COMPOUNDs (the record, the directory and the
// check for a shared directory's record at the path; the seal and the
// mode). The
// volume is what the mount's path makes: its record sealed with the
// directory's fileid and the handle digest the mount computes (an empty
// DeleteVolume, which checks both through the mount, removes it at once),
// its mode the StorageClass's; a CreateVolume in the server's grace
// period after a restart succeeds; and /metrics counts the session's
// calls.
func TestCallsThroughASession(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	d := lab.StartDriver(t, nfsmount.NewSystem(), func(cfg *config.Config) {
		cfg.CountEvery = 0
		cfg.MetricsAddress = "127.0.0.1:29654"
	})
	c := lab.Connect(t, d.Endpoint)
	vc := lab.RWX("nfsvers=4.2")
	p := params("onDelete", "delete", "mountPermissions", "0770")
	c.Create(t, "pvc-session-warm-up", p, vc) // mounts the share, opens the session
	var server, mount []int64
	var vols []*csi.Volume
	for i := range 5 {
		before, kernel := serverCompounds(t), lab.NFSCallsWith("lookupcache=none")
		name := fmt.Sprintf("pvc-session-%d", i) // its subDir too
		v := c.Create(t, name, p, vc)
		server = append(server, serverCompounds(t)-before)
		mount = append(mount, lab.NFSCallsWith("lookupcache=none")-kernel)
		vols = append(vols, v)
		id, err := volumeid.Parse(v.VolumeId)
		must(t, err)
		st, err := os.Lstat(onExport(name))
		must(t, err)
		if st.Mode().Perm() != 0o770 || !st.IsDir() {
			t.Errorf("%s: mode %v, want a directory of mode 0770", name, st.Mode())
		}
		rec, err := os.Readlink(onExport(".nfsdir/volumes/" + id.Key))
		must(t, err)
		if want := fmt.Sprintf(`"fileID":%d,"handle":"`, st.Sys().(*syscall.Stat_t).Ino); !strings.Contains(rec, want) {
			t.Errorf("the record of %s is not sealed with its fileid and handle: %s", name, rec)
		}
	}
	t.Logf("CreateVolume through a session: calls the server ran %v, of which through the mount %v", server, mount)
	slices.Sort(server)
	slices.Sort(mount)
	if mount[2] != 0 {
		t.Errorf("CreateVolume through a session makes %d calls through the mount (median), want none", mount[2])
	}
	if server[2] > 2 {
		t.Errorf("CreateVolume through a session costs the server %d calls (median), want at most 2", server[2])
	}
	var deletes []int64
	for i, v := range vols {
		before := serverCompounds(t)
		c.Delete(t, v)
		deletes = append(deletes, serverCompounds(t)-before)
		id, _ := volumeid.Parse(v.VolumeId)
		if name := fmt.Sprintf("pvc-session-%d", i); exists(onExport(name)) || exists(onExport(".nfsdir/volumes/"+id.Key)) {
			t.Errorf("DeleteVolume left %s or its record: the seal made through the session was not the mount's", name)
		}
	}
	t.Logf("empty DeleteVolume through a session: calls the server ran %v", deletes)
	slices.Sort(deletes)
	if deletes[2] > 6 {
		t.Errorf("an empty DeleteVolume through a session costs the server %d calls (median), want at most 6", deletes[2])
	}
	// One level down (subDir by-session/<name>): the look-ups first, all
	// at once, then the record and the directory in the parent by its
	// filehandle with the look-up of a shared directory's record at the
	// path, then the seal with the nesting look-ups again: 7 calls in
	// three round trips (16 through the mount). An empty DeleteVolume:
	// the look-ups at once, the parent walked through, and one COMPOUND
	// that moves the directory from that parent, removes it, its record,
	// and the parent nfsdir made when it is empty: 7 calls in two round
	// trips (26 through the mount). The first volume makes the parent,
	// through the mount; a retry finds the volume made; the parent goes
	// with the last volume in it.
	nested := params("onDelete", "delete", "mountPermissions", "0770", "subDir", "by-session/${pv.metadata.name}")
	// A parent of its own: TestCallsThroughTheMount leaves a volume in
	// team/.
	sibling := c.Create(t, "pvc-session-sibling", nested, vc)
	var nestedCalls, nestedDeletes []int64
	for i := range 5 {
		name := fmt.Sprintf("pvc-session-nested-%d", i)
		before := serverCompounds(t)
		v := c.Create(t, name, nested, vc)
		nestedCalls = append(nestedCalls, serverCompounds(t)-before)
		if again := c.Create(t, name, nested, vc); again.VolumeId != v.VolumeId {
			t.Errorf("a retry of %s answered %s, want %s", name, again.VolumeId, v.VolumeId)
		}
		st, err := os.Lstat(onExport("by-session/" + name))
		must(t, err)
		id, err := volumeid.Parse(v.VolumeId)
		must(t, err)
		rec, err := os.Readlink(onExport(".nfsdir/volumes/" + id.Key))
		must(t, err)
		if want := fmt.Sprintf(`"fileID":%d,"handle":"`, st.Sys().(*syscall.Stat_t).Ino); !strings.Contains(rec, want) || st.Mode().Perm() != 0o770 {
			t.Errorf("%s: mode %v, record %s; want 0770, sealed with its fileid and handle", name, st.Mode(), rec)
		}
		before = serverCompounds(t)
		c.Delete(t, v)
		nestedDeletes = append(nestedDeletes, serverCompounds(t)-before)
		if exists(onExport("by-session/" + name)) {
			t.Errorf("DeleteVolume left by-session/%s: the seal made through the session was not the mount's", name)
		}
	}
	c.Delete(t, sibling)
	if exists(onExport("by-session")) {
		t.Error("the parent nfsdir made stays after its last volume")
	}
	t.Logf("one level down through a session: calls the server ran for CreateVolume %v, for an empty DeleteVolume %v", nestedCalls, nestedDeletes)
	slices.Sort(nestedCalls)
	slices.Sort(nestedDeletes)
	if nestedCalls[2] > 7 {
		t.Errorf("CreateVolume one level down through a session costs the server %d calls (median), want at most 7", nestedCalls[2])
	}
	if nestedDeletes[2] > 7 {
		t.Errorf("an empty DeleteVolume one level down through a session costs the server %d calls (median), want at most 7", nestedDeletes[2])
	}
	// A directory replaced behind nfsdir's back is not deleted, and the
	// record stays, through the session as through the mount.
	v := c.Create(t, "pvc-session-replaced", p, vc)
	must(t, os.Rename(onExport("pvc-session-replaced"), onExport("pvc-session-replaced-moved")))
	defer os.RemoveAll(onExport("pvc-session-replaced-moved"))
	must(t, os.Mkdir(onExport("pvc-session-replaced"), 0o770))
	defer os.RemoveAll(onExport("pvc-session-replaced"))
	must(t, os.WriteFile(onExport("pvc-session-replaced/tenant-data"), []byte("keep"), 0o644))
	if _, err := c.Controller.DeleteVolume(lab.Ctx(t, time.Minute), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteVolume of a replaced directory: %v, want FailedPrecondition", err)
	}
	if b, err := os.ReadFile(onExport("pvc-session-replaced/tenant-data")); err != nil || string(b) != "keep" {
		t.Errorf("the replacing directory's data: %q, %v", b, err)
	}
	// Replaced between the look-ups and the move: the COMPOUND moves the
	// new directory into the trash, its VERIFY of the checked filehandle
	// stops it there, and the mount's path moves it back, untouched.
	v = c.Create(t, "pvc-session-swapped", p, vc)
	var swapped bool // once: the mount's path, which takes over, calls the hook again
	provision.StepHook = func(step, subDir string) {
		if step == "delete:move" && subDir == "pvc-session-swapped" && !swapped {
			swapped = true
			must(t, os.Rename(onExport(subDir), onExport(subDir+"-moved")))
			must(t, os.Mkdir(onExport(subDir), 0o770))
			must(t, os.WriteFile(onExport(subDir+"/tenant-data"), []byte("keep"), 0o644))
		}
	}
	t.Cleanup(func() { provision.StepHook = func(string, string) {} })
	defer os.RemoveAll(onExport("pvc-session-swapped-moved"))
	defer os.RemoveAll(onExport("pvc-session-swapped"))
	if _, err := c.Controller.DeleteVolume(lab.Ctx(t, time.Minute), &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("DeleteVolume of a directory replaced after its look-ups: %v, want FailedPrecondition", err)
	}
	if b, err := os.ReadFile(onExport("pvc-session-swapped/tenant-data")); err != nil || string(b) != "keep" {
		t.Errorf("the replacing directory is not back at its path with its data: %q, %v", b, err)
	}
	provision.StepHook = func(string, string) {}
	// A record written at the same key after the look-ups (another
	// volume's, by its token): the COMPOUND takes it aside, its VERIFY of
	// the link read stops it there, and it is put back.
	v = c.Create(t, "pvc-session-rerecorded", p, vc)
	key := onExport(".nfsdir/volumes/" + volumeid.KeyForDir("pvc-session-rerecorded"))
	var other string
	provision.StepHook = func(step, subDir string) {
		if step == "delete:move" && subDir == "pvc-session-rerecorded" && other == "" {
			text, err := os.Readlink(key)
			must(t, err)
			id, _ := volumeid.Parse(v.VolumeId)
			other = strings.Replace(text, `"token":"`+id.Token+`"`, `"token":"zzzzzzzz"`, 1)
			must(t, os.Remove(key))
			must(t, os.Symlink(other, key))
		}
	}
	c.Delete(t, v)
	provision.StepHook = func(string, string) {}
	if text, err := os.Readlink(key); err != nil || text != other || other == "" {
		t.Errorf("the record written after the look-ups: %q, %v; want it back in place", text, err)
	}
	os.Remove(key)
	// Right after a server restart, in its grace period, the server
	// refuses renames (NFS4ERR_GRACE): the session is made again, and the
	// seal goes through the mount, which waits the grace period out.
	lab.Sh(t, "rpc.nfsd 0 && rpc.nfsd 8")
	defer lab.StartNFSServer(t)
	t0 := time.Now()
	v = c.Create(t, "pvc-session-in-grace", p, vc)
	t.Logf("CreateVolume in the server's grace period: %v", time.Since(t0))
	rec, err := os.Readlink(onExport(".nfsdir/volumes/" + volumeid.KeyForDir("pvc-session-in-grace")))
	must(t, err)
	if !strings.Contains(rec, `"fileID":`) {
		t.Errorf("the volume made in the grace period is not sealed: %s", rec)
	}
	c.Delete(t, v)
	if exists(onExport("pvc-session-in-grace")) {
		t.Error("the volume made in the grace period was not deleted")
	}
	if n := sumMetric(httpGet(t, "http://127.0.0.1:29654/metrics"), "nfsdir_nfs_operations_total", `mount="session"`, `op="COMPOUND"`); n < 10 {
		t.Errorf("nfsdir_nfs_operations_total of COMPOUND on the session: %v after 6 volumes, want at least 10", n)
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
