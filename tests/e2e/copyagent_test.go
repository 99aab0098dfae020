package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/treecopy/treecopytest"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestCopiesThroughTheCopyAgent: with a StorageClass naming a copy agent
// (copyAgent) that serves the tmpfs export for copies only
// (--copy-export: no project quotas there), the snapshot of a hostile
// tree, its restore and a clone are made by the agent on the server: each
// is the tree, byte for byte and attribute for attribute; the agent's
// audit log has each copy; restoring 2,000 files costs the NFS client
// fewer calls than files (through the controller's mount it costs about
// ten per file); the agent refuses quota calls for that export.
func TestCopiesThroughTheCopyAgent(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	pki := lab.NewPKI(t)
	c := start(t, func(cfg *config.Config) {
		cfg.QuotaCert, cfg.QuotaKey, cfg.QuotaCA = pki.Client.Cert, pki.Client.Key, pki.CA
	})
	audit := filepath.Join(t.TempDir(), "audit.log")
	agent := startAgent(t, []string{"agent", "--listen", "127.0.0.1:29700", "--copy-export", lab.Export() + "=" + lab.Export(),
		"--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key, "--client-ca", pki.CA, "--audit-log", audit})
	defer func() { agent.stop() }()
	vc := lab.RWX("nfsvers=4.2")
	p := params("onDelete", "delete", "copyAgent", "127.0.0.1:29700")
	withAgent := func(name, snapshot, volume string) *csi.CreateVolumeRequest {
		r := fromSource(name, vc, snapshot, volume)
		r.Parameters = p
		return r
	}

	src := c.Create(t, "pvc-agent-src", p, vc)
	hostileTree(t, onExport("pvc-agent-src"))
	manyFiles(t, onExport("pvc-agent-src/many"), 2000)
	snap, _ := snapshotUntilReady(t, c, "snap-agent", src.VolumeId)
	treecopytest.Compare(t, onExport("pvc-agent-src"), snapshotDir(t, snap.SnapshotId), true)

	must(t, os.WriteFile(onExport("pvc-agent-src/plain"), []byte("changed"), 0o644))
	before := lab.NFSCalls()
	restored, polls := createUntilDone(t, c, withAgent("pvc-agent-restored", snap.SnapshotId, ""))
	calls := lab.NFSCalls() - before
	treecopytest.Compare(t, snapshotDir(t, snap.SnapshotId), onExport("pvc-agent-restored"), false)
	t.Logf("restore of 2,000+ files through the agent: %d NFS calls from the client, %d CreateVolume calls", calls, polls)
	if calls >= 2000 {
		t.Errorf("the restore cost the NFS client %d calls for 2,000+ files: not copied on the server", calls)
	}
	clone, _ := createUntilDone(t, c, withAgent("pvc-agent-clone", "", src.VolumeId))
	treecopytest.Compare(t, onExport("pvc-agent-src"), onExport("pvc-agent-clone"), false)

	log, err := os.ReadFile(audit)
	must(t, err)
	var copies int
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, `"op":"copy"`) {
			copies++
			if strings.Contains(line, `"error"`) {
				t.Errorf("the agent's copy failed: %s", line)
			}
		}
	}
	if copies != 3 {
		t.Errorf("the agent's audit log has %d copies, want 3 (snapshot, restore, clone):\n%s", copies, log)
	}

	// Quotas on a copies-only export are refused, naming the flag.
	cl := dialAgent(t, pki.Client, pki.CA)
	if _, err := cl.Get(lab.Ctx(t, time.Minute), &serveragent.Volume{Share: lab.Export(), SubDir: "pvc-agent-src", Token: tokenOf(t, src.VolumeId)}); err == nil || !strings.Contains(err.Error(), "--copy-export") {
		t.Errorf("quota Get on a copies-only export: %v", err)
	}

	// A slow copy (the agent paced to 200 entries a second) shows its
	// progress in CreateVolume's answers while it runs.
	agent.stop()
	agent = startAgent(t, []string{"agent", "--listen", "127.0.0.1:29700", "--copy-export", lab.Export() + "=" + lab.Export(),
		"--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key, "--client-ca", pki.CA, "--copy-rate", "200"})
	var progress string
	for i := 0; i < 150 && progress == ""; i++ {
		_, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), withAgent("pvc-agent-slow", "", src.VolumeId))
		if err == nil {
			break
		}
		if m := regexp.MustCompile(`: ([1-9][0-9]*) entries and ([0-9]+) bytes copied so far`).FindStringSubmatch(err.Error()); m != nil {
			progress = m[0]
		}
		time.Sleep(200 * time.Millisecond)
	}
	if progress == "" {
		t.Error("CreateVolume never told how far the agent's copy had come")
	} else {
		t.Logf("while the agent copies: %s", progress)
	}
	slow, _ := createUntilDone(t, c, withAgent("pvc-agent-slow", "", src.VolumeId))
	treecopytest.Compare(t, onExport("pvc-agent-src"), onExport("pvc-agent-slow"), false)

	for _, v := range []*csi.Volume{restored, clone, slow, src} {
		c.Delete(t, v)
	}
	if _, err := c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId}); err != nil {
		t.Fatal(err)
	}
	waitTrashEmpty(t)
}

func tokenOf(t *testing.T, volumeID string) string {
	t.Helper()
	id, err := volumeid.Parse(volumeID)
	if err != nil {
		t.Fatal(err)
	}
	return id.Token
}

// TestCopyAgentWithLeastPrivilege: an agent serving copies only, run as
// nobody with exactly the capabilities docs/snapshots.md names for copies
// (CAP_DAC_READ_SEARCH, CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER,
// CAP_FSETID), snapshots a hostile tree (other owners, a setgid
// directory, a directory closed to its owner) attribute for attribute.
// Without CAP_CHOWN its copy fails, and the controller says why.
func TestCopyAgentWithLeastPrivilege(t *testing.T) {
	lab.Require(t)
	pki := lab.NewPKI(t)
	c := start(t, func(cfg *config.Config) {
		cfg.QuotaCert, cfg.QuotaKey, cfg.QuotaCA = pki.Client.Cert, pki.Client.Key, pki.CA
	})
	args := append([]string{"agent", "--listen", "127.0.0.1:29700", "--copy-export", lab.Export() + "=" + lab.Export()},
		nobodysFiles(t, pki)...)
	caps := []uintptr{unix.CAP_DAC_READ_SEARCH, unix.CAP_DAC_OVERRIDE, unix.CAP_CHOWN, unix.CAP_FOWNER, unix.CAP_FSETID}
	p := params("onDelete", "delete", "copyAgent", "127.0.0.1:29700")
	vc := lab.RWX("nfsvers=4.2")
	src := c.Create(t, "pvc-agent-least", p, vc)
	defer c.Delete(t, src)
	hostileTree(t, onExport("pvc-agent-least"))

	agent := startAgentAs(t, args, asNobody(caps[0], caps[1], caps[3], caps[4])) // no CAP_CHOWN
	var last error
	for i := 0; i < 50; i++ {
		r, err := c.Controller.CreateSnapshot(lab.Ctx(t, time.Minute), &csi.CreateSnapshotRequest{Name: "snap-least-nochown", SourceVolumeId: src.VolumeId})
		if err != nil {
			last = err
			break
		}
		if r.Snapshot.ReadyToUse {
			t.Fatal("without CAP_CHOWN the agent's snapshot was made")
		}
		time.Sleep(200 * time.Millisecond)
	}
	agent.stop()
	if last == nil || !strings.Contains(last.Error(), "not permitted") {
		t.Errorf("without CAP_CHOWN, CreateSnapshot answered %v; want the agent's refusal", last)
	} else {
		t.Logf("without CAP_CHOWN: %v", last)
	}

	agent = startAgentAs(t, args, asNobody(caps...))
	defer func() { agent.stop() }()
	// The refused one is made now, once its back-off is over (until
	// then, CreateSnapshot tells the last attempt's failure).
	for i := 0; i < 300; i++ {
		r, err := c.Controller.CreateSnapshot(lab.Ctx(t, time.Minute), &csi.CreateSnapshotRequest{Name: "snap-least-nochown", SourceVolumeId: src.VolumeId})
		if err == nil && r.Snapshot.ReadyToUse {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, name := range []string{"snap-least", "snap-least-nochown"} {
		snap, _ := snapshotUntilReady(t, c, name, src.VolumeId)
		treecopytest.Compare(t, onExport("pvc-agent-least"), snapshotDir(t, snap.SnapshotId), true)
		if _, err := c.Controller.DeleteSnapshot(lab.Ctx(t, time.Minute), &csi.DeleteSnapshotRequest{SnapshotId: snap.SnapshotId}); err != nil {
			t.Fatal(err)
		}
	}
	waitTrashEmpty(t)
}

// TestVolumesMadeOnTheServerByTheAgent: a StorageClass naming a copy agent
// has its volumes made and deleted by the agent on the server, both on a
// no_root_squash and on a root_squash export: CreateVolume and
// DeleteVolume then cost the controller's NFS client no more than 3 calls
// (a dozen and more through its mount); what the agent makes is owned as
// what the controller makes through its mount (the squashed user on the
// root_squash export), is published and written through NFS as any
// volume, and is purged after its delete; a chown the squashed user may
// not make is refused as through the mount, leaving nothing. The agent's
// audit log has every volume.
func TestVolumesMadeOnTheServerByTheAgent(t *testing.T) {
	lab.Require(t)
	check := canaries(t)
	defer check()
	pki := lab.NewPKI(t)
	c := start(t, func(cfg *config.Config) {
		cfg.QuotaCert, cfg.QuotaKey, cfg.QuotaCA = pki.Client.Cert, pki.Client.Key, pki.CA
		cfg.CountEvery = 0 // no usage counts beside the calls counted
	})
	audit := filepath.Join(t.TempDir(), "audit.log")
	agent := startAgent(t, []string{"agent", "--listen", "127.0.0.1:29700",
		"--copy-export", lab.Export() + "=" + lab.Export(), "--copy-export", lab.SquashExport() + "=" + lab.SquashExport(),
		"--tls-cert", pki.Server.Cert, "--tls-key", pki.Server.Key, "--client-ca", pki.CA, "--audit-log", audit})
	defer agent.stop()
	vc := lab.RWX("nfsvers=4.2")
	for _, share := range []string{lab.Export(), lab.SquashExport()} {
		on := func(rel string) string { return filepath.Join(share, rel) }
		p := params("share", share, "onDelete", "delete", "mountPermissions", "0770", "copyAgent", "127.0.0.1:29700")
		plain := params("share", share, "onDelete", "delete", "mountPermissions", "0770")
		mounted := c.Create(t, "pvc-mounted-"+filepath.Base(share), plain, vc) // and the share's metadata area
		var creates, deletes []int64
		var vols []*csi.Volume
		for i := range 5 {
			// The controller's own calls, on its share mount: purges
			// (of earlier tests' volumes too) run on a mount of their own.
			before := lab.NFSCallsWith("lookupcache=none")
			vols = append(vols, c.Create(t, fmt.Sprintf("pvc-agent-made-%d", i), p, vc))
			creates = append(creates, lab.NFSCallsWith("lookupcache=none")-before)
		}
		t.Logf("%s: NFS calls of CreateVolume through the agent: %v", share, creates)
		if slices.Sort(creates); creates[2] > 3 {
			t.Errorf("%s: CreateVolume through the agent costs the NFS client %d calls (median), want at most 3", share, creates[2])
		}
		var want, got unix.Stat_t
		must(t, unix.Lstat(on("pvc-mounted-"+filepath.Base(share)), &want))
		must(t, unix.Lstat(on("pvc-agent-made-0"), &got))
		if got.Uid != want.Uid || got.Gid != want.Gid || got.Mode != want.Mode {
			t.Errorf("%s: the agent's volume is %d:%d %o, the controller's %d:%d %o", share, got.Uid, got.Gid, got.Mode, want.Uid, want.Gid, want.Mode)
		}
		rec := recordOn(t, share, vols[0].VolumeId)
		if rec["serverHandle"] == nil || rec["handle"] != nil || rec["fileID"] != float64(got.Ino) {
			t.Errorf("%s: the agent's seal: %v", share, rec)
		}
		target := filepath.Join(t.TempDir(), "mnt")
		c.Publish(t, vols[0], target, vc, false)
		must(t, os.WriteFile(filepath.Join(target, "data"), []byte("written through NFS"), 0o644))
		c.Unpublish(t, vols[0], target)
		if b, err := os.ReadFile(on("pvc-agent-made-0/data")); err != nil || string(b) != "written through NFS" {
			t.Errorf("%s: the volume holds %q, %v", share, b, err)
		}
		for i, v := range vols {
			before, all := lab.NFSCallsWith("lookupcache=none"), lab.NFSCalls()
			c.Delete(t, v)
			deletes = append(deletes, lab.NFSCallsWith("lookupcache=none")-before)
			if i > 0 {
				// Empty: removed on the server at once, and no purge
				// started (a purge lists the trash, 9 calls with its
				// lookups; one call may be the client's lease renewal).
				id, _ := volumeid.Parse(v.VolumeId)
				if left, _ := filepath.Glob(on(".nfsdir/trash/*" + id.Key + "*")); len(left) != 0 {
					t.Errorf("%s: an empty volume left in the trash: %v", share, left)
				}
				if n := lab.NFSCalls() - all; n > 1 {
					t.Errorf("%s: DeleteVolume of an empty volume by the agent: %d NFS calls on the guest's mounts (a purge?), want at most 1", share, n)
				}
			}
			// The purge of the trash, after the volume written to: its
			// calls are its own.
			for i := 0; i < 300; i++ {
				if ents, _ := os.ReadDir(on(".nfsdir/trash")); len(ents) == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		t.Logf("%s: NFS calls of DeleteVolume through the agent: %v", share, deletes)
		if slices.Sort(deletes); deletes[2] > 3 {
			t.Errorf("%s: DeleteVolume through the agent costs the NFS client %d calls (median), want at most 3", share, deletes[2])
		}
		for i := range vols {
			if exists(on(fmt.Sprintf("pvc-agent-made-%d", i))) {
				t.Errorf("%s: pvc-agent-made-%d is left after its delete", share, i)
			}
		}
		c.Delete(t, mounted)
	}
	// The squashed user may not give a directory away: refused as through
	// the mount, and nothing is left.
	err := createErr(c, t, "pvc-agent-owner", params("share", lab.SquashExport(), "uid", "1000", "copyAgent", "127.0.0.1:29700"))
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "root_squash") {
		t.Errorf("chown by the agent on a squashed export: %v", err)
	}
	if exists(filepath.Join(lab.SquashExport(), "pvc-agent-owner")) {
		t.Error("half-made volume left behind")
	}
	log, err := os.ReadFile(audit)
	must(t, err)
	if n := strings.Count(string(log), `"op":"make"`); n != 11 {
		t.Errorf("the agent's audit log has %d volumes made, want 11:\n%s", n, log)
	}
	if n := strings.Count(string(log), `"op":"remove"`); n != 10 || strings.Count(string(log), `"error"`) != 1 {
		t.Errorf("the agent's audit log has %d volumes deleted, want 10, and one refusal:\n%s", n, log)
	}
}
