// Command bench measures nfsdir against bare NFS operations in the lab guest
// and prints a table (`make bench`). Mount- and RPC-bound work is measured
// here, in the guest; compare the ratios, not the absolute times, which
// reflect software emulation.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/csiserver"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/bench/report"
	"github.com/nfsdir/nfsdir/tests/lab"
)

var (
	creates   = flag.Int("creates", 200, "CreateVolume calls")
	files     = flag.Int("files", 100000, "files in the volume that is deleted")
	publishes = flag.Int("publishes", 20, "NodePublishVolume calls")
	vers      = flag.String("nfsvers", "4.1", "NFS version")
	perDir    = flag.Int("per-dir", 100, "files per directory in the volumes that are deleted")
	farFiles  = flag.Int("far-files", 5000, "files in the volume deleted through a server -far-delay away")
	farDelay  = flag.Duration("far-delay", time.Millisecond, "one-way delay to the distant server (a proxy in the guest)")
	agentOnly = flag.Bool("agent-only", false, "measure only the rows of volumes made by the copy agent over loopback, then stop (for profiling)")
	stall     = flag.Duration("stall", 15*time.Minute, "print every goroutine's stack when no row was measured for this long")
	v42N      = flag.Int("v42-only", 0, "measure only the rows on an NFSv4.2 share -far-delay away, this many times, then stop (for profiling: -cpuprofile covers the last)")
)

// perOp formats NFS calls per operation for nfsdir and the baseline.
func perOp(got, base int64, n int) string {
	if base < 0 {
		return fmt.Sprintf("%.1f", float64(got)/float64(n))
	}
	return fmt.Sprintf("%.1f vs %.1f", float64(got)/float64(n), float64(base)/float64(n))
}

// The measures: one table each on docs/benchmarks.md.
const (
	mCreate  = "CreateVolume"
	mDelete  = "DeleteVolume"
	mPublish = "NodePublishVolume"
	mAgent   = "Volumes made by the copy agent on the server"
	mScale   = "Many volumes on the share"
	mUsage   = "Usage"
	mCopy    = "Clones, snapshots and restores"
	mReflink = "Snapshots on an XFS export with reflink=1"
	mQuota   = "Hard quotas (quotaAgent)"
)

// mFar is the measure of calls to a server and an agent -far-delay away
// (proxies that hold every byte that long each way).
func mFar() string {
	return fmt.Sprintf("The server and the agent %g ms away", float64(*farDelay)/float64(time.Millisecond))
}

var (
	rows    []report.Row
	lastRow atomic.Int64 // when the last row was measured, in Unix nanoseconds
)

// watchStalls prints the stacks of every goroutine each time -stall
// passes without a row, so that a bench that waits on something shows
// what.
func watchStalls() {
	lastRow.Store(time.Now().UnixNano())
	for range time.Tick(*stall / 4) {
		if time.Since(time.Unix(0, lastRow.Load())) > *stall {
			buf := make([]byte, 1<<20)
			fmt.Printf("bench: no row for %s; the goroutines:\n%s\n", *stall, buf[:runtime.Stack(buf, true)])
			lastRow.Store(time.Now().UnixNano())
		}
	}
}

// add records nfsdir's time for a case of a measure, what it is compared
// with, and NFS calls per operation (calls, or empty).
func add(measure, cs string, got time.Duration, calls string, against ...report.Base) {
	addRow(report.Row{Measure: measure, Case: cs, Seconds: got.Seconds(), Calls: calls, Against: against})
}

// addRow records a row and prints its line for make bench's page.
func addRow(r report.Row) {
	lastRow.Store(time.Now().UnixNano())
	rows = append(rows, r)
	fmt.Printf("  measured: %s, %s: %s\n", r.Measure, r.Case, report.Duration(r.Seconds))
	fmt.Println(r.Line())
}

// vsBare, vsIncumbent, vsNoop and vsOther name what a time is compared with.
func vsBare(what string, d time.Duration) report.Base {
	return report.Base{Kind: report.Bare, What: what, Seconds: d.Seconds()}
}

func vsIncumbent(what string, d time.Duration) report.Base {
	return report.Base{Kind: report.Incumbent, What: what, Seconds: d.Seconds()}
}

func vsNoop(what string, d time.Duration) report.Base {
	return report.Base{Kind: report.NoOp, What: what, Seconds: d.Seconds()}
}

func vsOther(kind, what string, d time.Duration) report.Base {
	return report.Base{Kind: kind, What: what, Seconds: d.Seconds()}
}

func die(err error) {
	fmt.Println("bench: FAILED:", err)
	os.Exit(1)
}

func main() {
	klog.InitFlags(nil)
	flag.Parse()
	work, _ := os.MkdirTemp("", "bench")
	// The driver's log goes to a file: the guest's serial console is slow
	// enough to dominate a CreateVolume.
	flag.Set("logtostderr", "false")
	flag.Set("log_file", filepath.Join(work, "nfsdir.log"))
	if os.Getenv("NFSDIR_LAB") != "1" {
		die(fmt.Errorf("run in the NFS lab: make bench"))
	}
	server, export := os.Getenv("NFSDIR_LAB_SERVER"), os.Getenv("NFSDIR_LAB_EXPORT")
	ctx := context.Background()

	pki, err := startQuotaAgent(ctx, work)
	if err != nil {
		die(err)
	}
	cfg := config.Default()
	cfg.Mode, cfg.NodeID, cfg.Version = config.ModeAll, "bench", "bench"
	cfg.QuotaCert, cfg.QuotaKey, cfg.QuotaCA = pki.Client.Cert, pki.Client.Key, pki.CA
	cfg.StateDir = filepath.Join(work, "state")
	cfg.Endpoint = "unix://" + filepath.Join(work, "csi.sock")
	cfg.PublishRoot = work
	syscall.Umask(0) // as cmd/nfsdir does
	d, err := csiserver.New(cfg, nfsmount.NewSystem())
	if err != nil {
		die(err)
	}
	l, err := csiserver.Listen(cfg.Endpoint)
	if err != nil {
		die(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go d.Serve(sctx, l)
	conn, err := grpc.NewClient("unix:"+l.Addr().(*net.UnixAddr).Name, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		die(err)
	}
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	flags := []string{"nfsvers=" + *vers}
	vc := &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER},
	}
	params := map[string]string{"server": server, "share": export}
	create := func(name string) *csi.Volume {
		r, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params,
			VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		if err != nil {
			die(err)
		}
		return r.GetVolume()
	}
	create("warm-up") // mounts the share once

	bare := filepath.Join(work, "bare")
	os.MkdirAll(bare, 0o755)
	if out, err := exec.Command("mount", "-t", "nfs", "-o", strings.Join(flags, ","), server+":"+export, bare).CombinedOutput(); err != nil {
		die(fmt.Errorf("bare mount: %v %s", err, out))
	}
	os.MkdirAll(filepath.Join(bare, "bare-mkdir"), 0o755)

	fmt.Printf("nfsdir bench in the lab guest (NFS %s over loopback, TCG emulation)\n", *vers)
	fmt.Println(report.GuestPrefix + guest())
	go watchStalls()
	b := &bench{ctx: ctx, ctl: ctl, node: node, vc: vc, create: create, work: work, bare: bare, export: export, pki: pki,
		server: server, flags: flags}
	if *v42N > 0 {
		proxy, err := lab.NewProxy(*farDelay)
		if err != nil {
			die(err)
		}
		*profRows = "v42"
		for range *v42N {
			b.v42Rows(proxy.Port, map[string]string{"server": server, "share": export, "onDelete": "delete"})
		}
		proxy.Close()
		printRows()
		return
	}
	if *stageOnly {
		b.stageRows(cfg)
		printRows()
		return
	}
	var sc *scaleRows
	stopProfile := startProfile("scale")
	if *scale > 0 {
		sc = b.scaleBefore()
	}
	if *rounds > 0 {
		b.agentRows()
	}
	stopProfile()
	if *agentOnly {
		printRows()
		return
	}

	// 0. The cost of a gRPC round trip alone, for context.
	t0 := time.Now()
	for i := 0; i < *creates; i++ {
		if _, err := ctl.ControllerGetCapabilities(ctx, &csi.ControllerGetCapabilitiesRequest{}); err != nil {
			die(err)
		}
	}
	noops := vsNoop(fmt.Sprintf("ControllerGetCapabilities ×%d", *creates), time.Since(t0))

	// 1. CreateVolume vs mkdir.
	c0 := lab.NFSCalls()
	t0 = time.Now()
	for i := 0; i < *creates; i++ {
		if err := os.Mkdir(filepath.Join(bare, "bare-mkdir", fmt.Sprint("d", i)), 0o770); err != nil {
			die(err)
		}
	}
	mkdirs := time.Since(t0)
	mkdirCalls := lab.NFSCalls() - c0
	c0 = lab.NFSCalls()
	t0 = time.Now()
	for i := 0; i < *creates; i++ {
		create(fmt.Sprintf("pvc-seq-%d", i))
	}
	seq := time.Since(t0)
	add(mCreate, fmt.Sprintf("×%d, one at a time", *creates), seq, perOp(lab.NFSCalls()-c0, mkdirCalls, *creates),
		vsBare(fmt.Sprintf("mkdir ×%d", *creates), mkdirs), noops)
	t0 = time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < *creates; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			create(fmt.Sprintf("pvc-par-%d", i))
		}(i)
	}
	wg.Wait()
	add(mCreate, fmt.Sprintf("×%d, 16 in flight (as csi-provisioner sends them)", *creates), time.Since(t0), "",
		vsBare(fmt.Sprintf("mkdir ×%d, one at a time", *creates), mkdirs))

	// 2. DeleteVolume of a volume holding many files vs rm -rf.
	waitPurged := func() {
		for {
			ents, _ := os.ReadDir(filepath.Join(export, ".nfsdir/trash"))
			if len(ents) == 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	big := create("pvc-big")
	fill := func(dir string, n, per int) {
		for i := 0; i < n; i++ {
			sub := filepath.Join(dir, fmt.Sprint("d", i/per))
			if i%per == 0 {
				os.MkdirAll(sub, 0o755)
			}
			if err := os.WriteFile(filepath.Join(sub, fmt.Sprint("f", i)), nil, 0o644); err != nil {
				die(err)
			}
		}
	}
	fill(filepath.Join(export, "pvc-big"), *files, *perDir) // server side: fast local tmpfs
	fill(filepath.Join(export, "bare-rm"), *files, *perDir)
	// purgeVsRm deletes the volume id and waits for its purge, then
	// removes dir with rm -rf; it returns how long the call took, the purge
	// took and rm -rf took, and NFS calls per file of each.
	purgeVsRm := func(id, dir string, n int) (ret, purge, rm time.Duration, calls string) {
		c0 := lab.NFSCalls()
		t0 := time.Now()
		if _, err := ctl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			die(err)
		}
		ret = time.Since(t0)
		waitPurged()
		purge = time.Since(t0)
		purgeCalls := lab.NFSCalls() - c0
		c0 = lab.NFSCalls()
		t0 = time.Now()
		if out, err := exec.Command("rm", "-rf", dir).CombinedOutput(); err != nil {
			die(fmt.Errorf("rm -rf: %v %s", err, out))
		}
		return ret, purge, time.Since(t0), perOp(purgeCalls, lab.NFSCalls()-c0, n)
	}
	ret, purge, rmrf, calls := purgeVsRm(big.GetVolumeId(), filepath.Join(bare, "bare-rm"), *files)
	add(mDelete, fmt.Sprintf("%s files: the call returns", num(*files)), ret, "", vsIncumbent("rm -rf over NFS, in the call", rmrf))
	add(mDelete, fmt.Sprintf("%s files: removed (in the background)", num(*files)), purge, calls, vsBare("rm -rf over NFS", rmrf))

	// 2b. The same through a proxy that holds every byte -far-delay each
	// way: a server on the network, where each call waits on the wire.
	if *farFiles > 0 {
		proxy, err := lab.NewProxy(*farDelay)
		if err != nil {
			die(err)
		}
		// NFSv3: a 4.1 client would find it is the same server as the
		// direct mounts (trunking) and send its calls past the proxy.
		farFlags := []string{"nfsvers=3", "proto=tcp", "mountproto=tcp", "nolock", fmt.Sprintf("port=%d", proxy.Port)}
		farBare := filepath.Join(work, "far-bare")
		os.MkdirAll(farBare, 0o755)
		if out, err := exec.Command("mount", "-t", "nfs", "-o", strings.Join(farFlags, ","), server+":"+export, farBare).CombinedOutput(); err != nil {
			die(fmt.Errorf("bare mount through the proxy: %v %s", err, out))
		}
		far, err := ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-far", Parameters: params,
			VolumeCapabilities: []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: farFlags}},
				AccessMode: vc.AccessMode}}})
		if err != nil {
			die(err)
		}
		fill(filepath.Join(export, "pvc-far"), *farFiles, *perDir)
		fill(filepath.Join(export, "far-rm"), *farFiles, *perDir)
		_, farPurge, farRm, farCalls := purgeVsRm(far.GetVolume().GetVolumeId(), filepath.Join(farBare, "far-rm"), *farFiles)
		add(mFar(), fmt.Sprintf("DeleteVolume of %s files: removed (in the background)", num(*farFiles)), farPurge, farCalls,
			vsBare("rm -rf over NFS", farRm))
		if *rounds > 0 {
			b.farRows(farFlags, farBare, *farDelay)
		}
		exec.Command("umount", farBare).Run()
		// The proxy stays until the bench ends: the controller keeps its
		// mount of the share through it, and a dead mount would hold the
		// accountant's pass over the export, and the rows after it.
		_ = proxy
	}

	// 3. NodePublishVolume vs bare mount (medians).
	v := create("pvc-publish")
	src := server + ":" + filepath.Join(export, "pvc-publish")
	var pub, mnt []time.Duration
	for i := 0; i < *publishes; i++ {
		target := filepath.Join(work, fmt.Sprint("t", i))
		os.MkdirAll(target, 0o755)
		t0 := time.Now()
		if out, err := exec.Command("mount", "-t", "nfs", "-o", strings.Join(flags, ","), src, target).CombinedOutput(); err != nil {
			die(fmt.Errorf("bare mount: %v %s", err, out))
		}
		mnt = append(mnt, time.Since(t0))
		exec.Command("umount", target).Run()
		t0 = time.Now()
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target,
			VolumeCapability: vc, VolumeContext: v.GetVolumeContext()}); err != nil {
			die(err)
		}
		pub = append(pub, time.Since(t0))
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target}); err != nil {
			die(err)
		}
	}
	add(mPublish, fmt.Sprintf("median of %d", *publishes), median(pub), "", vsBare("mount -t nfs, as csi-driver-nfs publishes", median(mnt)))

	b.stageRows(cfg)
	b.copyRows(server, export, work)
	reflinkRows(server, work)
	b.quotaRows(server, 20)
	b.usageRows(fill)
	if *farFiles > 0 && *rounds > 0 {
		b.farV42Rows()
	}
	if sc != nil {
		sc.after()
	}

	exec.Command("umount", bare).Run()
	if log, err := os.ReadFile(filepath.Join(work, "nfsdir.log")); err == nil {
		for _, l := range strings.Split(string(log), "\n") {
			if strings.Contains(l, "purged") {
				fmt.Println("  log:", l)
			}
		}
	}
	printRows()
}

// printRows prints the tables of the rows measured, as the page shows them.
func printRows() {
	fmt.Println()
	fmt.Println(report.Section(report.Run{Command: "bench", Date: "now", Commit: "this one", Machine: "this one", Rows: rows}))
}

// guest describes the lab guest: its kernel, vCPUs and memory.
func guest() string {
	var u unix.Utsname
	unix.Uname(&u)
	var si unix.Sysinfo_t
	unix.Sysinfo(&si)
	return fmt.Sprintf("Linux %s, %d vCPUs, %d MiB of memory, NFS %s over the guest's loopback", unix.ByteSliceToString(u.Release[:]),
		runtime.NumCPU(), uint64(si.Totalram)*uint64(si.Unit)>>20, *vers)
}

// num writes n with its thousands apart: 100,000.
func num(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
