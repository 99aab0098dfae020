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
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/csiserver"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
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
	v42N      = flag.Int("v42-only", 0, "measure only the rows on an NFSv4.2 share -far-delay away, this many times, then stop (for profiling: -cpuprofile covers the last)")
)

type row struct {
	op, nfsdir, baseline, ratio, target, rpcs string
}

// perOp formats NFS calls per operation for nfsdir and the baseline.
func perOp(got, base int64, n int) string {
	if base < 0 {
		return fmt.Sprintf("%.1f", float64(got)/float64(n))
	}
	return fmt.Sprintf("%.1f vs %.1f", float64(got)/float64(n), float64(base)/float64(n))
}

var rows []row

func add(op string, got, base time.Duration, target string, ratio bool, rpcs string) {
	r := row{op: op, nfsdir: got.Round(time.Microsecond).String(), baseline: "-", ratio: "-", target: target, rpcs: rpcs}
	if ratio {
		r.baseline = base.Round(time.Microsecond).String()
		r.ratio = fmt.Sprintf("%.2f×", float64(got)/float64(base))
	}
	rows = append(rows, r)
	fmt.Printf("  measured: %-48s %s\n", op, r.nfsdir)
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
	b := &bench{ctx: ctx, ctl: ctl, node: node, vc: vc, create: create, work: work, bare: bare, export: export, pki: pki}
	if *v42N > 0 {
		proxy, err := lab.NewProxy(*farDelay)
		if err != nil {
			die(err)
		}
		*profRows = "v42"
		for range *v42N {
			b.v42Rows(proxy.Port, fmt.Sprintf(", %s away", *farDelay), map[string]string{"server": server, "share": export, "onDelete": "delete"})
		}
		proxy.Close()
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
	add(fmt.Sprintf("gRPC round trip alone (ControllerGetCapabilities ×%d)", *creates), time.Since(t0), 0, "", false, "0")

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
	add(fmt.Sprintf("CreateVolume ×%d, one at a time", *creates), seq, mkdirs, "≤ 1.5× bare mkdir loop", true,
		perOp(lab.NFSCalls()-c0, mkdirCalls, *creates))
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
	add(fmt.Sprintf("CreateVolume ×%d, 16 in flight (as csi-provisioner)", *creates), time.Since(t0), mkdirs, "", true, "")

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
	add(fmt.Sprintf("DeleteVolume of %d files: call returns", *files), ret, 0, "≤ 1s", false, "")
	add(fmt.Sprintf("DeleteVolume of %d files: purged", *files), purge, rmrf, "vs rm -rf over NFS", true, calls)

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
		add(fmt.Sprintf("DeleteVolume of %d files, server %s away: purged", *farFiles, *farDelay), farPurge, farRm,
			"vs rm -rf over NFS", true, farCalls)
		if *rounds > 0 {
			b.farRows(farFlags, farBare, *farDelay, proxy.Port)
		}
		exec.Command("umount", farBare).Run()
		proxy.Close()
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
	add(fmt.Sprintf("NodePublishVolume, median of %d", *publishes), median(pub), median(mnt), "≤ 1.2× bare mount", true, "")

	b.copyRows(server, export, work)
	reflinkRows(server, work)
	b.quotaRows(server, 20)
	b.usageRows(fill)
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

// printRows prints the table of the rows measured.
func printRows() {
	fmt.Println()
	fmt.Printf("| %-56s | %-12s | %-12s | %-7s | %-24s | %-18s |\n", "operation", "nfsdir", "baseline", "ratio", "target", "NFS calls/op")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|\n", strings.Repeat("-", 58), strings.Repeat("-", 14), strings.Repeat("-", 14), strings.Repeat("-", 9), strings.Repeat("-", 26), strings.Repeat("-", 20))
	for _, r := range rows {
		fmt.Printf("| %-56s | %-12s | %-12s | %-7s | %-24s | %-18s |\n", r.op, r.nfsdir, r.baseline, r.ratio, r.target, r.rpcs)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
