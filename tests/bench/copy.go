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

	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/tests/lab"
)

var (
	copyFiles = flag.Int("copy-files", 10000, "files in the tree the copy rows copy (0: skip them)")
	copyMiB   = flag.Int("copy-mib", 200, "MiB of data in that tree (the lab's export holds 1 GiB)")
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
func copyRows(server, export, work string) {
	if *copyFiles <= 0 {
		return
	}
	src := makeCopyTree(export, *copyFiles, *copyMiB)
	defer os.RemoveAll(src)
	copyRowsThrough(export, filepath.Join(work, "copy-mnt"), server+":"+export, []string{"nfsvers=" + *copyVers},
		fmt.Sprintf("%d files, %d MiB, NFSv%s", *copyFiles, *copyMiB, *copyVers), true)
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
			fmt.Sprintf("%d files, %d MiB, server %s away", *copyFiles, *copyMiB, *farDelay), false)
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
func copyRowsThrough(export, mnt, source string, opts []string, what string, tar bool) {
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
	clean("copy-clone")
	cp := measure(func() { run("/opt/gnu/cp", "-a", filepath.Join(mnt, "copy-src"), filepath.Join(mnt, "copy-cp")) })
	clean("copy-cp")
	fmt.Printf("  copy engine: %+v\n  clone %s; cp -a %s\n", res, clone, cp)
	add("clone by the copy engine, "+what, clone.took, cp.took, "vs GNU cp -a", true,
		fmt.Sprintf("%d vs %d; %.0f vs %.0f MiB wire", clone.calls, cp.calls, float64(clone.wire)/(1<<20), float64(cp.wire)/(1<<20)))

	if !tar {
		return
	}
	// A snapshot and its restore: two copies, against tar.gz and back.
	snap := measure(func() {
		engine("copy-src", "copy-snap")
		engine("copy-snap", "copy-restored")
	})
	clean("copy-snap", "copy-restored")
	tgz := filepath.Join(mnt, "copy.tar.gz")
	tgzTook := measure(func() {
		run("/opt/gnu/tar", "--use-compress-program=/opt/gnu/gzip", "-cf", tgz, "-C", filepath.Join(mnt, "copy-src"), ".")
		os.Mkdir(filepath.Join(mnt, "copy-untar"), 0o755)
		run("/opt/gnu/tar", "--use-compress-program=/opt/gnu/gzip", "-xpf", tgz, "-C", filepath.Join(mnt, "copy-untar"))
	})
	clean("copy.tar.gz", "copy-untar")
	fmt.Printf("  snapshot+restore %s; tar.gz and back %s\n", snap, tgzTook)
	add("snapshot + restore by the copy engine, "+what, snap.took, tgzTook.took, "vs tar -czf, tar -xzf", true,
		fmt.Sprintf("%d vs %d; %.0f vs %.0f MiB wire", snap.calls, tgzTook.calls, float64(snap.wire)/(1<<20), float64(tgzTook.wire)/(1<<20)))
}

var reflinkMiB = flag.Int("reflink-mib", 256, "MiB of data the reflink rows snapshot (and an eighth of it for comparison; 0: skip them)")

// reflinkRows measures a snapshot (one copy by the engine) on the lab's XFS
// export with reflink=1, where each file is an NFSv4.2 CLONE: the time
// should not depend on the data's size, so the row compares reflinkMiB
// against an eighth of it in as many files.
func reflinkRows(server, work string) {
	if *reflinkMiB <= 0 {
		return
	}
	export := lab.XFSExport()
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
		return traffic{took: took, calls: calls, wire: wire - wire0}
	}
	small := snapshot(*reflinkMiB/8, false)
	large := snapshot(*reflinkMiB, true)
	add(fmt.Sprintf("snapshot by the copy engine on XFS reflink=1, 64 files, %d MiB", *reflinkMiB), large.took, small.took,
		fmt.Sprintf("vs %d MiB in as many files: independent of size", *reflinkMiB/8), true,
		fmt.Sprintf("%d vs %d; %.2f vs %.2f MiB wire", large.calls, small.calls, float64(large.wire)/(1<<20), float64(small.wire)/(1<<20)))
	add(fmt.Sprintf("snapshot by the copy engine on XFS reflink=1, 64 files, %d MiB", *reflinkMiB), large.took, tgz.took,
		"vs tar -czf onto the share (csi-driver-nfs)", true,
		fmt.Sprintf("%d vs %d; %.2f vs %.0f MiB wire", large.calls, tgz.calls, float64(large.wire)/(1<<20), float64(tgz.wire)/(1<<20)))
}
