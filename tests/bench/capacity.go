package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"

	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/usage"
	"github.com/nfsdir/nfsdir/tests/bench/report"
	"github.com/nfsdir/nfsdir/tests/lab"
)

var (
	scale     = flag.Int("scale", 10000, "volumes on the share for the scale rows (0: skip them)")
	rounds    = flag.Int("rounds", 20, "calls timed per scale row")
	statFiles = flag.Int("stat-files", 100000, "files in the volume whose stats and count are measured (0: skip)")
	statCalls = flag.Int("stat-calls", 200, "NodeGetVolumeStats calls timed")
	writerN   = flag.Int("writer-files", 1000, "4 KiB files the concurrent writer creates")
	cpuProf   = flag.String("cpuprofile", "", "write a CPU profile of the rows -cpuprofile-rows names to this file")
	profRows  = flag.String("cpuprofile-rows", "scale", "the rows -cpuprofile covers: scale (the scale round with few volumes: its CreateVolume, NodeGetVolumeStats and DeleteVolume calls; and the calls made by the copy agent) or v42 (the rows on an NFSv4.2 share through the latency proxy)")
)

// startProfile starts the CPU profile -cpuprofile asks for, when it
// covers rows, and returns what stops it.
func startProfile(rows string) func() {
	if *cpuProf == "" || rows != *profRows {
		return func() {}
	}
	f, err := os.Create(*cpuProf)
	if err != nil {
		die(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		die(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// pct returns the p-th percentile (0..100) of ds.
func pct(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

// cpuTime returns the CPU time this process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bench holds what the capacity and scale rows need of main's set-up.
type bench struct {
	ctx    context.Context
	ctl    csi.ControllerClient
	node   csi.NodeClient
	vc     *csi.VolumeCapability
	create func(name string) *csi.Volume
	work   string
	bare   string // the export mounted without nfsdir
	export string // the export on the server's side
	pki    lab.PKI
	server string
	flags  []string // the class's mount options
}

// publish mounts v on a new target under work and returns the target.
func (b *bench) publish(v *csi.Volume, name string) string {
	target := filepath.Join(b.work, name)
	os.MkdirAll(target, 0o755)
	if _, err := b.node.NodePublishVolume(b.ctx, &csi.NodePublishVolumeRequest{VolumeId: v.GetVolumeId(), TargetPath: target,
		VolumeCapability: b.vc, VolumeContext: v.GetVolumeContext()}); err != nil {
		die(err)
	}
	return target
}

func (b *bench) stats(v *csi.Volume, target string) *csi.NodeGetVolumeStatsResponse {
	r, err := b.node.NodeGetVolumeStats(b.ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: v.GetVolumeId(), VolumePath: target})
	if err != nil {
		die(err)
	}
	return r
}

// scaleRound times rounds CreateVolume calls, NodeGetVolumeStats calls on
// the published volume v, and DeleteVolume calls of the empty volumes just
// made, one at a time; it returns each series and NFS calls per create and
// per delete.
func (b *bench) scaleRound(label string, v *csi.Volume, target string) (creates, stats, deletes []time.Duration, createCalls, deleteCalls int64) {
	var vols []*csi.Volume
	quiet()
	c0, ops, ms := lab.NFSCallsWith("lookupcache=none"), lab.NFSOps(""), lab.NFSExecute("")
	for i := range *rounds {
		t0 := time.Now()
		vols = append(vols, b.create(fmt.Sprintf("pvc-scale-%s-%d", label, i)))
		creates = append(creates, time.Since(t0))
	}
	createCalls = lab.NFSCallsWith("lookupcache=none") - c0
	fmt.Printf("  CreateVolume (%s): %s\n", label, opsSince(ops, *rounds))
	fmt.Printf("  CreateVolume (%s): %s\n", label, timeSince(ms, creates))
	for range *rounds {
		t0 := time.Now()
		b.stats(v, target)
		stats = append(stats, time.Since(t0))
	}
	c0, ops, ms = lab.NFSCallsWith("lookupcache=none"), lab.NFSOps(""), lab.NFSExecute("")
	for _, d := range vols {
		t0 := time.Now()
		if _, err := b.ctl.DeleteVolume(b.ctx, &csi.DeleteVolumeRequest{VolumeId: d.GetVolumeId()}); err != nil {
			die(err)
		}
		deletes = append(deletes, time.Since(t0))
	}
	fmt.Printf("  DeleteVolume (%s): %s\n", label, opsSince(ops, *rounds))
	fmt.Printf("  DeleteVolume (%s): %s\n", label, timeSince(ms, deletes))
	return creates, stats, deletes, createCalls, lab.NFSCallsWith("lookupcache=none") - c0
}

// quiet waits, up to six minutes, for three seconds in which the guest
// sends fewer than ten NFS calls: the accountant's pass over new volumes
// and the purge share the emulated CPUs and the server with the calls
// measured next.
func quiet() {
	for deadline := time.Now().Add(6 * time.Minute); time.Now().Before(deadline); {
		c0 := lab.NFSCalls()
		time.Sleep(3 * time.Second)
		if lab.NFSCalls()-c0 < 10 {
			return
		}
	}
	fmt.Println("  the guest did not go quiet; measuring anyway")
}

// bareRound times rounds mkdir and rmdir calls on the bare mount.
func (b *bench) bareRound() (mkdirs, rmdirs []time.Duration, mkdirCalls, rmdirCalls int64) {
	return b.bareRoundIn(b.bare)
}

// bareRoundIn times rounds mkdir and rmdir calls below mnt.
func (b *bench) bareRoundIn(mnt string) (mkdirs, rmdirs []time.Duration, mkdirCalls, rmdirCalls int64) {
	dir := filepath.Join(mnt, "bare-scale")
	os.MkdirAll(dir, 0o755)
	c0 := lab.NFSCalls()
	for i := range *rounds {
		t0 := time.Now()
		if err := os.Mkdir(filepath.Join(dir, fmt.Sprint("d", i)), 0o770); err != nil {
			die(err)
		}
		mkdirs = append(mkdirs, time.Since(t0))
	}
	mkdirCalls = lab.NFSCalls() - c0
	c0 = lab.NFSCalls()
	for i := range *rounds {
		t0 := time.Now()
		if err := os.Remove(filepath.Join(dir, fmt.Sprint("d", i))); err != nil {
			die(err)
		}
		rmdirs = append(rmdirs, time.Since(t0))
	}
	return mkdirs, rmdirs, mkdirCalls, lab.NFSCalls() - c0
}

// scaleRows measures CreateVolume, NodeGetVolumeStats and an empty
// DeleteVolume with few volumes on the share (before) and again once the
// share holds *scale volumes, then pages through them with ListVolumes.
type scaleRows struct {
	b                  *bench
	v                  *csi.Volume
	target             string
	creates, stats     []time.Duration
	deletes            []time.Duration
	createsN, deletesN int64
	volumes            int
}

func (b *bench) scaleBefore() *scaleRows {
	s := &scaleRows{b: b, v: b.create("pvc-scale-stats")}
	s.target = b.publish(s.v, "scale-stats")
	b.scaleRound("warm-up", s.v, s.target) // the emulator translates code on first use
	s.volumes = b.countVolumes()
	s.creates, s.stats, s.deletes, s.createsN, s.deletesN = b.scaleRound("few", s.v, s.target)
	mk, rm, mkN, rmN := b.bareRound()
	imk, irm, imkN, irmN := b.incumbentRound()
	var caps []time.Duration
	for range *rounds {
		t0 := time.Now()
		if _, err := b.ctl.ControllerGetCapabilities(b.ctx, &csi.ControllerGetCapabilitiesRequest{}); err != nil {
			die(err)
		}
		caps = append(caps, time.Since(t0))
	}
	cs := fmt.Sprintf("p50 of %d", *rounds)
	calls := func(n, incumbent, bare int64) string {
		return fmt.Sprintf("%.1f vs %.1f vs %.1f", float64(n)/float64(*rounds), float64(incumbent)/float64(*rounds), float64(bare)/float64(*rounds))
	}
	add(mCreate, cs, pct(s.creates, 50), calls(s.createsN, imkN, mkN),
		vsIncumbent("mount, mkdir, umount", pct(imk, 50)), vsBare("mkdir", pct(mk, 50)), vsNoop("ControllerGetCapabilities", pct(caps, 50)))
	add(mDelete, cs+", an empty volume", pct(s.deletes, 50), calls(s.deletesN, irmN, rmN),
		vsIncumbent("mount, rm -rf, umount", pct(irm, 50)), vsBare("rmdir", pct(rm, 50)), vsNoop("ControllerGetCapabilities", pct(caps, 50)))
	return s
}

// incumbentRound times rounds CreateVolume and empty DeleteVolume calls
// as csi-driver-nfs makes them: the share mounted for the call, the
// directory made (or removed with everything in it), the share unmounted.
func (b *bench) incumbentRound() (creates, deletes []time.Duration, createCalls, deleteCalls int64) {
	call := func(do func(mnt string) error) time.Duration {
		mnt, err := os.MkdirTemp(b.work, "incumbent-")
		if err != nil {
			die(err)
		}
		t0 := time.Now()
		if out, err := exec.Command("mount", "-t", "nfs", "-o", strings.Join(b.flags, ","), b.server+":"+b.export, mnt).CombinedOutput(); err != nil {
			die(fmt.Errorf("mount: %v %s", err, out))
		}
		if err := do(mnt); err != nil {
			die(err)
		}
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			die(fmt.Errorf("umount: %v %s", err, out))
		}
		os.Remove(mnt)
		return time.Since(t0)
	}
	name := func(i int) string { return fmt.Sprintf("incumbent-pvc-%d", i) }
	c0 := lab.NFSCalls()
	for i := range *rounds {
		creates = append(creates, call(func(mnt string) error { return os.Mkdir(filepath.Join(mnt, name(i)), 0o777) }))
	}
	createCalls = lab.NFSCalls() - c0
	c0 = lab.NFSCalls()
	for i := range *rounds {
		deletes = append(deletes, call(func(mnt string) error { return os.RemoveAll(filepath.Join(mnt, name(i))) }))
	}
	return creates, deletes, createCalls, lab.NFSCalls() - c0
}

// cdRound times rounds CreateVolume calls with parameters p and
// capability vc, then the DeleteVolume calls of the (empty) volumes made,
// one at a time; it counts the NFS calls of each series: the
// controller's own (its share mounts, lookupcache=none) and all of the
// guest's (the purge after each delete, and the agent's, included).
type cdRound struct {
	creates, deletes []time.Duration
	createsOwn       int64
	createsAll       int64
	deletesOwn       int64
	deletesAll       int64
	// The calls the lab's server ran (NFSv4 COMPOUNDs, every client's:
	// the controller's mount and its own session both count).
	createsServer, deletesServer int64
}

func (b *bench) cdRound(label string, p map[string]string, vc *csi.VolumeCapability) cdRound {
	var r cdRound
	var vols []*csi.Volume
	quiet()
	own, all, server := lab.NFSCallsWith("lookupcache=none"), lab.NFSCalls(), lab.ServerCompounds()
	for i := range *rounds {
		t0 := time.Now()
		v, err := b.ctl.CreateVolume(b.ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-%s-%d", label, i), Parameters: p,
			VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
		if err != nil {
			die(err)
		}
		r.creates = append(r.creates, time.Since(t0))
		vols = append(vols, v.GetVolume())
	}
	r.createsOwn, r.createsAll, r.createsServer = lab.NFSCallsWith("lookupcache=none")-own, lab.NFSCalls()-all, lab.ServerCompounds()-server
	own, all, server = lab.NFSCallsWith("lookupcache=none"), lab.NFSCalls(), lab.ServerCompounds()
	for _, v := range vols {
		t0 := time.Now()
		if _, err := b.ctl.DeleteVolume(b.ctx, &csi.DeleteVolumeRequest{VolumeId: v.GetVolumeId()}); err != nil {
			die(err)
		}
		r.deletes = append(r.deletes, time.Since(t0))
	}
	r.deletesOwn, r.deletesAll, r.deletesServer = lab.NFSCallsWith("lookupcache=none")-own, lab.NFSCalls()-all, lab.ServerCompounds()-server
	return r
}

// calls formats the controller's NFS calls per call against bare's, and
// all of the guest's.
func calls(own, all, bare int64) string {
	return fmt.Sprintf("%s (all: %.1f)", perOp(own, bare, *rounds), float64(all)/float64(*rounds))
}

// agentRound times CreateVolume and empty DeleteVolume calls of a class
// whose copy agent (at agent) makes and deletes its volumes on the server
// against the bare mkdir and rmdir given, and a call to the agent that
// does nothing (the floor under them).
func (b *bench) agentRound(measure, agent string, p map[string]string, vc *csi.VolumeCapability, mk, rm []time.Duration, mkN, rmN int64) {
	p = maps.Clone(p)
	p["copyAgent"], p["onDelete"] = agent, "delete"
	label := strings.ReplaceAll(strings.ToLower(measure), " ", "-")
	b.cdRound("made-warm-up-"+label, p, vc)
	r := b.cdRound("made-"+label, p, vc)
	tlsCfg, err := serveragent.ClientTLS(serveragent.Files{Cert: b.pki.Client.Cert, Key: b.pki.Client.Key, CA: b.pki.CA}, serveragent.DefaultAgentIdentity)
	if err != nil {
		die(err)
	}
	cl, closeAgent, err := serveragent.Dial(agent, tlsCfg)
	if err != nil {
		die(err)
	}
	defer closeAgent()
	var probes []time.Duration
	for range *rounds + 1 {
		t0 := time.Now()
		if err := cl.Probe(b.ctx); err != nil {
			die(err)
		}
		probes = append(probes, time.Since(t0))
	}
	agentOp := vsNoop("the agent's Probe", pct(probes[1:], 50))
	add(measure, fmt.Sprintf("CreateVolume made by the copy agent, p50 of %d", *rounds), pct(r.creates, 50), calls(r.createsOwn, r.createsAll, mkN),
		vsBare("mkdir", pct(mk, 50)), agentOp)
	add(measure, fmt.Sprintf("empty DeleteVolume by the copy agent, p50 of %d", *rounds), pct(r.deletes, 50), calls(r.deletesOwn, r.deletesAll, rmN),
		vsBare("rmdir", pct(rm, 50)), agentOp)
}

// agentRows measures CreateVolume and an empty DeleteVolume made by the
// copy agent on the lab's export against bare mkdir and rmdir.
func (b *bench) agentRows() {
	mk, rm, mkN, rmN := b.bareRound()
	b.agentRound(mAgent, quotaAgentAddr, map[string]string{"server": os.Getenv("NFSDIR_LAB_SERVER"), "share": b.export}, b.vc, mk, rm, mkN, rmN)
}

// farRows measures, with the server and the agent 1 ms away (proxies
// holding every byte that long each way, NFSv3 through farFlags), bare
// mkdir and rmdir on farBare, CreateVolume and an empty DeleteVolume
// through the controller's mount, and the same made by the copy agent.
func (b *bench) farRows(farFlags []string, farBare string, delay time.Duration) {
	agent, err := lab.NewProxyTo(quotaAgentAddr, delay)
	if err != nil {
		die(err)
	}
	_ = agent // it stays until the bench ends, as the server's proxy (see main)
	m := mFar()
	mk, rm, mkN, rmN := b.bareRoundIn(farBare)
	vc := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: farFlags}},
		AccessMode: b.vc.AccessMode}
	p := map[string]string{"server": os.Getenv("NFSDIR_LAB_SERVER"), "share": b.export, "onDelete": "delete"}
	b.cdRound("far-warm-up", p, vc)
	r := b.cdRound("far", p, vc)
	add(m, fmt.Sprintf("CreateVolume, p50 of %d", *rounds), pct(r.creates, 50), calls(r.createsOwn, r.createsAll, mkN), vsBare("mkdir", pct(mk, 50)))
	add(m, fmt.Sprintf("empty DeleteVolume, p50 of %d", *rounds), pct(r.deletes, 50), calls(r.deletesOwn, r.deletesAll, rmN), vsBare("rmdir", pct(rm, 50)))
	// One level down, as a subDir template by namespace makes them: the
	// checks that no volume, shared directory or share lies above.
	nested := maps.Clone(p)
	nested["subDir"] = "team/${pv.metadata.name}"
	r = b.cdRound("far-nested", nested, vc)
	add(m, fmt.Sprintf("CreateVolume, subDir team/${pv.metadata.name}, p50 of %d", *rounds), pct(r.creates, 50), calls(r.createsOwn, r.createsAll, mkN), vsBare("mkdir", pct(mk, 50)))
	add(m, fmt.Sprintf("empty DeleteVolume, subDir team/${pv.metadata.name}, p50 of %d", *rounds), pct(r.deletes, 50), calls(r.deletesOwn, r.deletesAll, rmN), vsBare("rmdir", pct(rm, 50)))
	b.agentRound(m, fmt.Sprintf("127.0.0.1:%d", agent.Port), p, vc, mk, rm, mkN, rmN)
}

// farV42Rows measures the NFSv4.2 rows through a proxy of their own,
// after every direct NFSv4.2 mount is gone: the client joins every NFSv4.2
// mount of a server to its first one (session trunking), so an NFSv4.2
// mount through the proxy made before the direct ones would carry them
// through the proxy, and hang them once the proxy is gone; made while one
// is mounted, it would not go through the proxy at all.
func (b *bench) farV42Rows() {
	proxy, err := lab.NewProxy(*farDelay)
	if err != nil {
		die(err)
	}
	// The proxy stays until the bench ends: the controller keeps its
	// mount of the share through it (see main).
	b.v42Rows(proxy.Port, map[string]string{"server": b.server, "share": b.export, "onDelete": "delete"})
}

// v42Rows measures CreateVolume and an empty DeleteVolume on the share
// mounted with NFSv4.2 through the proxy on port against bare mkdir and
// rmdir on an NFSv4.2 mount through it; the calls are those the server
// ran (COMPOUNDs).
func (b *bench) v42Rows(port int, p map[string]string) {
	flags := []string{"nfsvers=4.2", fmt.Sprintf("port=%d", port)}
	bareDir, err := os.MkdirTemp("", "bare-v4-")
	if err != nil {
		die(err)
	}
	if out, err := exec.Command("mount", "-t", "nfs", "-o", strings.Join(flags, ","), os.Getenv("NFSDIR_LAB_SERVER")+":"+b.export, bareDir).CombinedOutput(); err != nil {
		die(fmt.Errorf("mount NFSv4.2 through the proxy: %v: %s", err, out))
	}
	defer exec.Command("umount", bareDir).Run()
	stopProfile := startProfile("v42")
	defer stopProfile()
	mk, rm, mkN, rmN := b.bareRoundIn(bareDir)
	vc := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{MountFlags: flags}},
		AccessMode: b.vc.AccessMode}
	b.cdRound("far-v42-warm-up", p, vc)
	r := b.cdRound("far-v42", p, vc)
	server := func(n, base int64) string {
		return fmt.Sprintf("%s (server)", perOp(n, base, *rounds))
	}
	add(mFar(), fmt.Sprintf("CreateVolume, NFSv4.2, p50 of %d", *rounds), pct(r.creates, 50), server(r.createsServer, mkN), vsBare("mkdir", pct(mk, 50)))
	add(mFar(), fmt.Sprintf("empty DeleteVolume, NFSv4.2, p50 of %d", *rounds), pct(r.deletes, 50), server(r.deletesServer, rmN), vsBare("rmdir", pct(rm, 50)))
	// One level down: the first volume makes the parent, the last
	// removes it.
	nested := maps.Clone(p)
	nested["subDir"] = "team/${pv.metadata.name}"
	r = b.cdRound("far-v42-nested", nested, vc)
	add(mFar(), fmt.Sprintf("CreateVolume, NFSv4.2, subDir team/${pv.metadata.name}, p50 of %d", *rounds), pct(r.creates, 50), server(r.createsServer, mkN), vsBare("mkdir", pct(mk, 50)))
	add(mFar(), fmt.Sprintf("empty DeleteVolume, NFSv4.2, subDir team/${pv.metadata.name}, p50 of %d", *rounds), pct(r.deletes, 50), server(r.deletesServer, rmN), vsBare("rmdir", pct(rm, 50)))
}

func (s *scaleRows) after() {
	b := s.b
	have := b.countVolumes()
	bulk := max(0, *scale-have)
	t0 := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range bulk {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b.create(fmt.Sprintf("pvc-bulk-%d", i))
		}()
	}
	wg.Wait()
	fmt.Printf("  %d volumes created in %s to reach %d\n", bulk, time.Since(t0).Round(time.Millisecond), *scale)
	n := b.countVolumes()
	creates, stats, deletes, createsN, deletesN := b.scaleRound("many", s.v, s.target)
	few := fmt.Sprintf("with %s volumes", num(s.volumes))
	add(mScale, fmt.Sprintf("CreateVolume with %s volumes, p50 of %d", num(n), *rounds), pct(creates, 50), perOp(createsN, s.createsN, *rounds),
		vsOther("the same with few volumes", few, pct(s.creates, 50)))
	add(mScale, fmt.Sprintf("empty DeleteVolume with %s volumes, p50 of %d", num(n), *rounds), pct(deletes, 50), perOp(deletesN, s.deletesN, *rounds),
		vsOther("the same with few volumes", few, pct(s.deletes, 50)))
	add(mScale, fmt.Sprintf("NodeGetVolumeStats with %s volumes, p50 of %d", num(n), *rounds), pct(stats, 50), "",
		vsOther("the same with few volumes", few, pct(s.stats, 50)))
	// Paging through them all, 500 a page.
	var pages []time.Duration
	token, listed := "", 0
	c0 := lab.NFSCalls()
	t0 = time.Now()
	for {
		p0 := time.Now()
		r, err := b.ctl.ListVolumes(b.ctx, &csi.ListVolumesRequest{MaxEntries: 500, StartingToken: token})
		if err != nil {
			die(err)
		}
		pages = append(pages, time.Since(p0))
		listed += len(r.Entries)
		if token = r.NextToken; token == "" {
			break
		}
	}
	addRow(report.Row{Measure: mScale, Case: fmt.Sprintf("ListVolumes of all %s, 500 a page (%d pages)", num(listed), len(pages)),
		Seconds: time.Since(t0).Seconds(), Note: "a page: " + report.Duration(pct(pages, 50).Seconds()),
		Calls: fmt.Sprintf("%.2f per volume", float64(lab.NFSCalls()-c0)/float64(max(1, listed)))})
}

// countVolumes lists the volumes on the share.
func (b *bench) countVolumes() int {
	n, token := 0, ""
	for {
		r, err := b.ctl.ListVolumes(b.ctx, &csi.ListVolumesRequest{MaxEntries: 1000, StartingToken: token})
		if err != nil {
			die(err)
		}
		n += len(r.Entries)
		if token = r.NextToken; token == "" {
			return n
		}
	}
}

// usageRows measures NodeGetVolumeStats on a volume of *statFiles files
// against statfs (what other NFS drivers report), the count of that
// volume (its walk, as the accountant does it, against `du -s`), and what
// a count does to a writer on the same server.
func (b *bench) usageRows(fill func(dir string, n, per int)) {
	if *statFiles <= 0 {
		return
	}
	v := b.create("pvc-usage")
	fill(filepath.Join(b.export, "pvc-usage"), *statFiles, *perDir) // server side
	target := b.publish(v, "usage")
	// The figure: the accountant counts new volumes at its next pass.
	t0 := time.Now()
	var used int64
	for time.Since(t0) < 20*time.Minute {
		r := b.stats(v, target)
		if used = r.Usage[1].Used; used > int64(*statFiles) {
			break
		}
		time.Sleep(time.Second)
	}
	fmt.Printf("  the accountant's figure showed %d inodes used after %s\n", used, time.Since(t0).Round(time.Second))
	var st, sf []time.Duration
	for range *statCalls {
		t0 := time.Now()
		b.stats(v, target)
		st = append(st, time.Since(t0))
		t0 = time.Now()
		var fs unix.Statfs_t
		if err := unix.Statfs(target, &fs); err != nil {
			die(err)
		}
		sf = append(sf, time.Since(t0))
	}
	add(mUsage, fmt.Sprintf("NodeGetVolumeStats of a volume of %s files, p50 of %d", num(*statFiles), *statCalls), pct(st, 50), "",
		vsBare("statfs, what other NFS drivers report", pct(sf, 50)))
	add(mUsage, fmt.Sprintf("NodeGetVolumeStats of a volume of %s files, p99 of %d", num(*statFiles), *statCalls), pct(st, 99), "",
		vsBare("statfs", pct(sf, 99)))

	// The walk, unbounded, over the bare mount (cache on, as the
	// accountant's share mount), against du -s.
	dir := filepath.Join(b.bare, "pvc-usage")
	walk := func(w usage.Walker) (usage.Result, time.Duration, time.Duration, int64) {
		exec.Command("sh", "-c", "echo 2 > /proc/sys/vm/drop_caches").Run()
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			die(err)
		}
		defer unix.Close(fd)
		c0, cpu0, t0 := lab.NFSCalls(), cpuTime(), time.Now()
		res, err := w.Count(b.ctx, fd)
		if err != nil {
			die(err)
		}
		return res, time.Since(t0), cpuTime() - cpu0, lab.NFSCalls() - c0
	}
	res, took, cpu, calls := walk(usage.DefaultWalker)
	exec.Command("sh", "-c", "echo 2 > /proc/sys/vm/drop_caches").Run()
	c0, t0 := lab.NFSCalls(), time.Now()
	if out, err := exec.Command("du", "-s", dir).CombinedOutput(); err != nil {
		die(fmt.Errorf("du: %v %s", err, out))
	}
	du, duCalls := time.Since(t0), lab.NFSCalls()-c0
	per := float64(res.Inodes) / 100000
	addRow(report.Row{Measure: mUsage, Case: fmt.Sprintf("count of %s entries, unpaced", num(int(res.Inodes))), Seconds: took.Seconds(),
		Note:    "CPU " + report.Duration((time.Duration(float64(cpu) / per)).Seconds()) + " per 100,000",
		Against: []report.Base{vsBare("du -s over NFS", du)},
		Calls:   fmt.Sprintf("%.0f vs %.0f per 100,000", float64(calls)/per, float64(duCalls)/per)})

	// A writer creating small files in another directory, alone and
	// during a count at the default rate and unbounded.
	writer := func(name string) time.Duration {
		d := filepath.Join(b.bare, "writer-"+name)
		os.MkdirAll(d, 0o755)
		data := make([]byte, 4096)
		t0 := time.Now()
		for i := range *writerN {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprint("f", i)), data, 0o644); err != nil {
				die(err)
			}
		}
		return time.Since(t0)
	}
	during := func(name string, w usage.Walker) (time.Duration, time.Duration) {
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		done := make(chan time.Duration, 1)
		go func() {
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				die(err)
			}
			defer unix.Close(fd)
			t0 := time.Now()
			w.Count(ctx, fd)
			done <- time.Since(t0)
		}()
		took := writer(name)
		cancel()
		return took, <-done
	}
	alone := writer("alone")
	paced := usage.DefaultWalker
	paced.Limit = &usage.Rate{PerSecond: 2000, Burst: 200}
	withPaced, _ := during("paced", paced)
	withFree, _ := during("free", usage.DefaultWalker)
	add(mUsage, fmt.Sprintf("a writer of %s 4 KiB files during a count at 2,000 entries/s (the default)", num(*writerN)), withPaced, "",
		vsOther("the writer alone", "", alone))
	add(mUsage, fmt.Sprintf("a writer of %s 4 KiB files during an unpaced count", num(*writerN)), withFree, "",
		vsOther("the writer alone", "", alone))
}

// timeSince formats the milliseconds the NFS client spent on each
// operation since before, per call of calls, against the calls' own mean
// time: where a call's time goes. Background work (the purge, the usage
// count) counts too.
func timeSince(before map[string]int64, calls []time.Duration) string {
	var parts []string
	var total int64
	for op, v := range lab.NFSExecute("") {
		if d := v - before[op]; d > 0 {
			total += d
			parts = append(parts, fmt.Sprintf("%s %.2f", op, float64(d)/float64(len(calls))))
		}
	}
	sort.Strings(parts)
	var sum time.Duration
	for _, c := range calls {
		sum += c
	}
	mean := sum / time.Duration(max(1, len(calls)))
	return fmt.Sprintf("mean %.2f ms, of it in NFS calls %.2f ms (%s)", float64(mean.Microseconds())/1000,
		float64(total)/float64(max(1, len(calls))), strings.Join(parts, ", "))
}

// opsSince formats the operations sent since before, per op of n.
func opsSince(before map[string]int64, n int) string {
	var parts []string
	for op, v := range lab.NFSOps("") {
		if d := v - before[op]; d > 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", op, float64(d)/float64(n)))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
