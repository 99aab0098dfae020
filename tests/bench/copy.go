package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/tests/lab"
)

var (
	copyFiles = flag.Int("copy-files", 10000, "files in the tree the copy rows copy (0: skip them)")
	copyMiB   = flag.Int("copy-mib", 200, "MiB of data in that tree (the export is grown to hold three copies and a tar.gz; give the guest the memory: NFSDIR_LAB_MEM)")
	copyVers  = flag.String("copy-nfsvers", "4.2", "NFS version of the copy rows' mount")
	copyWork  = flag.Int("copy-workers", treecopy.Default.Workers, "files the copy engine copies at once")
)

// traffic is what one measured step cost.
type traffic struct {
	took        time.Duration
	calls, wire int64
}

func (t traffic) String() string {
	return fmt.Sprintf("%d calls, %.1f MiB on the wire", t.calls, float64(t.wire)/(1<<20))
}

// copyRows measures the copy engine (what clones, snapshots and restores
// will run) against what csi-driver-nfs runs for them, in the same guest
// and through the same NFS mount: `cp -a` for a clone, `tar -czf` of the
// tree onto the share then `tar -xzf` for a snapshot and its restore (GNU
// cp 9.1, tar and gzip from Debian, as in its image).
func (b *bench) copyRows(server, export, work string) {
	if *copyFiles <= 0 {
		return
	}
	// The tree, a snapshot and its restore (or tar.gz and its unpacking)
	// are on the export at once, and a deleted clone while it is purged.
	growTmpfs(export, 4**copyMiB+*copyMiB/2+64)
	src := makeCopyTree(export, *copyFiles, *copyMiB)
	defer os.RemoveAll(src)
	what := fmt.Sprintf("%s files, %s MiB, NFSv%s", num(*copyFiles), num(*copyMiB), *copyVers)
	cp, tgz := copyRowsThrough(export, filepath.Join(work, "copy-mnt"), server+":"+export, []string{"nfsvers=" + *copyVers}, what, true)
	b.agentCopyRows(server, export, src, cp, tgz, what)
	if *farFiles > 0 {
		// Through the proxy that holds every byte -far-delay each way:
		// NFSv3 (see the purge rows), so no server-side COPY; what counts
		// is how many calls wait on the wire at once.
		proxy, err := lab.NewProxy(*farDelay)
		if err != nil {
			die(err)
		}
		defer proxy.Close()
		copyRowsThrough(export, filepath.Join(work, "copy-far"), server+":"+export,
			[]string{"nfsvers=3", "proto=tcp", "mountproto=tcp", "nolock", fmt.Sprintf("port=%d", proxy.Port)},
			fmt.Sprintf("%s files, %s MiB, the server %g ms away", num(*copyFiles), num(*copyMiB), float64(*farDelay)/float64(time.Millisecond)), false)
	}
}

// makeCopyTree makes, on the server's side, a tree of files of
// incompressible data in directories of 100, and returns its path.
func makeCopyTree(export string, files, mib int) string {
	src := filepath.Join(export, "copy-src")
	size := int64(mib) << 20 / int64(files)
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, size)
	for i := range files {
		dir := filepath.Join(src, fmt.Sprint("d", i/100))
		if i%100 == 0 {
			os.MkdirAll(dir, 0o755)
		}
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), buf, 0o644); err != nil {
			die(err)
		}
	}
	return src
}

// copyRowsThrough measures the copy rows through a mount of source with
// opts at mnt; with tar, the snapshot rows too.
// It returns the baselines: cp -a, and tar.gz and back (with tar).
func copyRowsThrough(export, mnt, source string, opts []string, what string, tar bool) (cp, tgzTook traffic) {
	os.MkdirAll(mnt, 0o755)
	if out, err := exec.Command("mount", "-t", "nfs", "-o", strings.Join(opts, ","), source, mnt).CombinedOutput(); err != nil {
		die(fmt.Errorf("mount for the copy rows: %v %s", err, out))
	}
	defer exec.Command("umount", mnt).Run()
	measure := func(fn func()) traffic {
		exec.Command("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches").Run()
		ops0, wire0 := lab.NFSTraffic(mnt)
		t0 := time.Now()
		fn()
		took := time.Since(t0)
		ops, wire := lab.NFSTraffic(mnt)
		var calls int64
		for op, n := range ops {
			calls += n - ops0[op]
		}
		return traffic{took: took, calls: calls, wire: wire - wire0}
	}
	run := func(name string, args ...string) {
		if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
			die(fmt.Errorf("%s %v: %v %s", name, args, err, out))
		}
	}
	engine := func(from, to string) treecopy.Result {
		os.Mkdir(filepath.Join(mnt, to), 0o755)
		sfd, err := unix.Open(filepath.Join(mnt, from), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			die(err)
		}
		defer unix.Close(sfd)
		dfd, err := unix.Open(filepath.Join(mnt, to), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			die(err)
		}
		defer unix.Close(dfd)
		c := treecopy.Default
		c.Workers = *copyWork
		res, err := c.Copy(context.Background(), sfd, dfd, true)
		if err != nil {
			die(err)
		}
		return res
	}
	clean := func(names ...string) {
		for _, n := range names {
			os.RemoveAll(filepath.Join(export, n)) // server side: fast
		}
	}
	// A clone: one copy, against cp -a.
	var res treecopy.Result
	clone := measure(func() { res = engine("copy-src", "copy-clone") })
	sameFiles(filepath.Join(export, "copy-src"), filepath.Join(export, "copy-clone"))
	clean("copy-clone")
	cp = measure(func() { run("/opt/gnu/cp", "-a", filepath.Join(mnt, "copy-src"), filepath.Join(mnt, "copy-cp")) })
	clean("copy-cp")
	fmt.Printf("  copy engine: %+v\n  clone %s; cp -a %s\n", res, clone, cp)
	add(mCopy, "clone by the copy engine through NFS, "+what, clone.took,
		fmt.Sprintf("%d vs %d; %.0f vs %.0f MiB on the wire", clone.calls, cp.calls, float64(clone.wire)/(1<<20), float64(cp.wire)/(1<<20)),
		vsIncumbent("GNU cp -a", cp.took))

	if !tar {
		return cp, tgzTook
	}
	// A snapshot and its restore: two copies, against tar.gz and back.
	snap := measure(func() {
		engine("copy-src", "copy-snap")
		engine("copy-snap", "copy-restored")
	})
	sameFiles(filepath.Join(export, "copy-src"), filepath.Join(export, "copy-restored"))
	clean("copy-snap", "copy-restored")
	tgz := filepath.Join(mnt, "copy.tar.gz")
	tgzTook = measure(func() {
		run("/opt/gnu/tar", "--use-compress-program=/opt/gnu/gzip", "-cf", tgz, "-C", filepath.Join(mnt, "copy-src"), ".")
		os.Mkdir(filepath.Join(mnt, "copy-untar"), 0o755)
		run("/opt/gnu/tar", "--use-compress-program=/opt/gnu/gzip", "-xpf", tgz, "-C", filepath.Join(mnt, "copy-untar"))
	})
	clean("copy.tar.gz", "copy-untar")
	fmt.Printf("  snapshot+restore %s; tar.gz and back %s\n", snap, tgzTook)
	add(mCopy, "snapshot and restore by the copy engine through NFS, "+what, snap.took,
		fmt.Sprintf("%d vs %d; %.0f vs %.0f MiB on the wire", snap.calls, tgzTook.calls, float64(snap.wire)/(1<<20), float64(tgzTook.wire)/(1<<20)),
		vsIncumbent("tar -czf onto the share, tar -xzf", tgzTook.took))
	return cp, tgzTook
}

// agentCopyRows measures a clone, and a snapshot with its restore, made by
// the copy agent on the server (StorageClass parameter copyAgent; the
// bench's agent serves the export for copies), end to end through the
// driver's CSI calls as csi-provisioner and csi-snapshotter make them
// (called again every 200 ms until done), against the baselines measured
// through the mount. The tree at src is moved into a volume for it, on
// the server's side, and back after.
func (b *bench) agentCopyRows(server, export, src string, cp, tgz traffic, what string) {
	params := map[string]string{"server": server, "share": export, "copyAgent": quotaAgentAddr, "onDelete": "delete"}
	volume := func(name string, source *csi.VolumeContentSource) (v *csi.Volume) {
		poll("CreateVolume "+name, func() (bool, error) {
			r, err := b.ctl.CreateVolume(b.ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params, VolumeContentSource: source,
				VolumeCapabilities: []*csi.VolumeCapability{b.vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 4 << 30}})
			v = r.GetVolume()
			return err == nil, err
		})
		return v
	}
	dirOf := func(v *csi.Volume) string { return filepath.Join(export, v.GetVolumeContext()["subDir"]) }
	vol := volume("pvc-agent-src", nil)
	names, err := os.ReadDir(src)
	if err != nil {
		die(err)
	}
	move := func(from, to string) {
		for _, n := range names {
			if err := os.Rename(filepath.Join(from, n.Name()), filepath.Join(to, n.Name())); err != nil {
				die(err)
			}
		}
	}
	move(src, dirOf(vol))
	measure := func(fn func()) traffic {
		exec.Command("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches").Run()
		calls0, t0 := lab.NFSCalls(), time.Now()
		fn()
		return traffic{took: time.Since(t0), calls: lab.NFSCalls() - calls0}
	}
	var clone, restored *csi.Volume
	var snapID string
	cloneT := measure(func() {
		clone = volume("pvc-agent-clone", &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: vol.GetVolumeId()}}})
	})
	sameFiles(dirOf(vol), dirOf(clone))
	if _, err := b.ctl.DeleteVolume(b.ctx, &csi.DeleteVolumeRequest{VolumeId: clone.GetVolumeId()}); err != nil {
		die(err)
	}
	snapT := measure(func() {
		poll("CreateSnapshot", func() (bool, error) {
			r, err := b.ctl.CreateSnapshot(b.ctx, &csi.CreateSnapshotRequest{Name: "snap-agent", SourceVolumeId: vol.GetVolumeId()})
			snapID = r.GetSnapshot().GetSnapshotId()
			return err == nil && r.GetSnapshot().GetReadyToUse(), err
		})
		restored = volume("pvc-agent-restored", &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snapID}}})
	})
	sameFiles(dirOf(vol), dirOf(restored))
	fmt.Printf("  through the copy agent: clone %s; snapshot+restore %s\n", cloneT, snapT)
	move(dirOf(vol), src)
	for _, v := range []*csi.Volume{restored, vol} {
		if _, err := b.ctl.DeleteVolume(b.ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
			die(err)
		}
	}
	if _, err := b.ctl.DeleteSnapshot(b.ctx, &csi.DeleteSnapshotRequest{SnapshotId: snapID}); err != nil {
		die(err)
	}
	add(mCopy, "clone by the copy agent on the server, through the CSI calls, "+what, cloneT.took,
		fmt.Sprintf("%d vs %d", cloneT.calls, cp.calls), vsIncumbent("GNU cp -a", cp.took))
	add(mCopy, "snapshot and restore by the copy agent on the server, through the CSI calls, "+what, snapT.took,
		fmt.Sprintf("%d vs %d", snapT.calls, tgz.calls), vsIncumbent("tar -czf onto the share, tar -xzf", tgz.took))
}

// poll calls f every 200 ms, as the CSI sidecars call again, until it is
// done; errors that ask for a later call (Unavailable, Aborted,
// DeadlineExceeded) are retried and printed every 30 s, any other ends
// the bench, and so does a call not done in 15 minutes.
func poll(what string, f func() (bool, error)) {
	start, said := time.Now(), time.Now()
	for {
		done, err := f()
		if done {
			return
		}
		if c := status.Code(err); err != nil && c != codes.Unavailable && c != codes.Aborted && c != codes.DeadlineExceeded {
			die(fmt.Errorf("%s: %v", what, err))
		}
		if time.Since(start) > 15*time.Minute {
			die(fmt.Errorf("%s: not done after %s (last: %v)", what, time.Since(start).Round(time.Second), err))
		}
		if time.Since(said) > 30*time.Second {
			fmt.Printf("  %s: still waiting after %s (last: %v)\n", what, time.Since(start).Round(time.Second), err)
			said = time.Now()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var reflinkMiB = flag.Int("reflink-mib", 256, "MiB of data the reflink rows snapshot (and a quarter of it, also against tar.gz; 0: skip them)")

// growTmpfs makes the tmpfs export at least mib MiB large (the lab makes
// it 1 GiB; the memory is the guest's, NFSDIR_LAB_MEM).
func growTmpfs(export string, mib int) {
	if mib <= 1024 {
		return
	}
	if out, err := exec.Command("mount", "-o", fmt.Sprintf("remount,size=%dm", mib), export).CombinedOutput(); err != nil {
		die(fmt.Errorf("grow %s to %d MiB: %v %s", export, mib, err, out))
	}
}

// reflinkExport is an XFS export with reflink=1 that holds mib MiB: the
// lab's (a 1 GiB image) when that is enough, else one made for the bench
// the same way (a sparse image on the guest's tmpfs, on a loop device).
func reflinkExport(mib int) string {
	if mib <= 900 {
		return lab.XFSExport()
	}
	const dir, image, dev = "/export-xfs-bench", "/run/xfs/bench-image", "/dev/loop3"
	steps := [][]string{
		{"sh", "-c", "[ -b " + dev + " ] || mknod " + dev + " b 7 3"},
		{"truncate", "-s", fmt.Sprintf("%dM", mib+mib/8+256), image},
		{"losetup", dev, image},
		{"mkfs.xfs", "-q", "-m", "reflink=1", dev},
		{"mkdir", "-p", dir},
		{"mount", "-t", "xfs", "-o", "discard", dev, dir}, // freed blocks leave the guest's memory
		{"exportfs", "-o", "rw,sync,no_subtree_check,no_root_squash,insecure,fsid=9", "*:" + dir},
	}
	for _, st := range steps {
		if out, err := exec.Command(st[0], st[1:]...).CombinedOutput(); err != nil {
			die(fmt.Errorf("XFS export for %d MiB: %v: %v %s", mib, st, err, out))
		}
	}
	return dir
}

// reflinkRows measures a snapshot (one copy by the engine) on an XFS
// export with reflink=1, where each file is an NFSv4.2 CLONE: the time
// should not depend on the data's size, so the row compares reflinkMiB
// against a quarter of it in as many files, and that quarter against
// csi-driver-nfs's tar.gz of it.
func reflinkRows(server, work string) {
	if *reflinkMiB <= 0 {
		return
	}
	// The large tree, then the small one with its tar.gz (never together).
	export := reflinkExport(*reflinkMiB)
	mnt := filepath.Join(work, "reflink-mnt")
	os.MkdirAll(mnt, 0o755)
	if out, err := exec.Command("mount", "-t", "nfs", "-o", "nfsvers=4.2", server+":"+export, mnt).CombinedOutput(); err != nil {
		die(fmt.Errorf("mount the XFS export: %v %s", err, out))
	}
	defer exec.Command("umount", mnt).Run()
	var tgz traffic
	snapshot := func(mib int, withTar bool) traffic {
		src := makeCopyTree(export, 64, mib)
		defer os.RemoveAll(src)
		if withTar { // csi-driver-nfs's snapshot of the same tree, through the same mount
			exec.Command("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches").Run()
			ops0, wire0 := lab.NFSTraffic(mnt)
			t0 := time.Now()
			if out, err := exec.Command("/opt/gnu/tar", "--use-compress-program=/opt/gnu/gzip", "-cf", filepath.Join(mnt, "copy.tar.gz"),
				"-C", filepath.Join(mnt, "copy-src"), ".").CombinedOutput(); err != nil {
				die(fmt.Errorf("tar: %v %s", err, out))
			}
			tgz.took = time.Since(t0)
			ops, wire := lab.NFSTraffic(mnt)
			for op, n := range ops {
				tgz.calls += n - ops0[op]
			}
			tgz.wire = wire - wire0
			os.Remove(filepath.Join(export, "copy.tar.gz"))
		}
		defer os.RemoveAll(filepath.Join(export, "copy-snap"))
		exec.Command("sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches").Run()
		ops0, wire0 := lab.NFSTraffic(mnt)
		os.Mkdir(filepath.Join(mnt, "copy-snap"), 0o755)
		sfd, err := unix.Open(filepath.Join(mnt, "copy-src"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			die(err)
		}
		defer unix.Close(sfd)
		dfd, err := unix.Open(filepath.Join(mnt, "copy-snap"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			die(err)
		}
		defer unix.Close(dfd)
		t0 := time.Now()
		res, err := treecopy.Default.Copy(context.Background(), sfd, dfd, true)
		took := time.Since(t0)
		if err != nil {
			die(err)
		}
		ops, wire := lab.NFSTraffic(mnt)
		var calls int64
		for op, n := range ops {
			calls += n - ops0[op]
		}
		fmt.Printf("  reflink snapshot of %d MiB: %+v; CLONE %d\n", mib, res, ops["CLONE"]-ops0["CLONE"])
		sameFiles(filepath.Join(export, "copy-src"), filepath.Join(export, "copy-snap"))
		return traffic{took: took, calls: calls, wire: wire - wire0}
	}
	large := snapshot(*reflinkMiB, false)
	small := snapshot(*reflinkMiB/4, true)
	add(mReflink, fmt.Sprintf("snapshot of 64 files, %d MiB", *reflinkMiB/4), small.took,
		fmt.Sprintf("%d vs %d; %.2f vs %.0f MiB on the wire", small.calls, tgz.calls, float64(small.wire)/(1<<20), float64(tgz.wire)/(1<<20)),
		vsIncumbent("tar -czf onto the share", tgz.took))
	add(mReflink, fmt.Sprintf("snapshot of 64 files, %d MiB", *reflinkMiB), large.took,
		fmt.Sprintf("%d vs %d; %.2f vs %.2f MiB on the wire", large.calls, small.calls, float64(large.wire)/(1<<20), float64(small.wire)/(1<<20)),
		vsOther("the same with a quarter of the data", fmt.Sprintf("%d MiB", *reflinkMiB/4), small.took))
}

// sameFiles checks, on the server's side, that every regular file below
// src has a copy below dst of the same size and modification time, and
// the same first and last MiB: a timed copy that left something out would
// make its row meaningless.
func sameFiles(src, dst string) {
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		a, b := mustStat(p), mustStat(filepath.Join(dst, rel))
		if a.Size != b.Size || a.Mtim != b.Mtim {
			return fmt.Errorf("%s: copy has size %d, mtime %v; source %d, %v", rel, b.Size, b.Mtim, a.Size, a.Mtim)
		}
		for _, off := range []int64{0, max(a.Size-1<<20, 0)} {
			if x, y := chunk(p, off), chunk(filepath.Join(dst, rel), off); string(x) != string(y) {
				return fmt.Errorf("%s: the copy differs at %d", rel, off)
			}
		}
		return nil
	})
	if err != nil {
		die(fmt.Errorf("the copy is not the source: %w", err))
	}
}

func mustStat(p string) unix.Stat_t {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		die(err)
	}
	return st
}

func chunk(p string, off int64) []byte {
	f, err := os.Open(p)
	if err != nil {
		die(err)
	}
	defer f.Close()
	b := make([]byte, 1<<20)
	n, _ := f.ReadAt(b, off)
	return b[:n]
}
