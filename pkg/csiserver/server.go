// Package csiserver is nfsdir's thin gRPC layer: it validates requests,
// serialises them per volume or target, calls the domain packages and maps
// their errors to CSI status codes.
package csiserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/exportfile"
	"github.com/nfsdir/nfsdir/pkg/metrics"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/nodestage"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
	"github.com/nfsdir/nfsdir/pkg/treecopy"
	"github.com/nfsdir/nfsdir/pkg/usage"
)

// shutdownGrace bounds everything Serve does once asked to stop: finishing
// in-flight calls, waiting for background purges and releasing the share
// mounts, even when a share's server no longer answers. It stays well
// below the 30 s kubelet grants a pod (terminationGracePeriodSeconds)
// before it kills it; unmountReserve of it is kept for the unmounts.
const (
	shutdownGrace  = 20 * time.Second
	unmountReserve = 5 * time.Second
)

// Driver is a configured nfsdir process: the services it runs and their
// dependencies.
type Driver struct {
	cfg        config.Config
	server     *grpc.Server
	shares     *shares.Set // nil without the controller service
	claims     *nodeClaims // the node's claims on single-node volumes; nil without
	views      *shares.Set // the node's read-only share mounts; nil without
	controller *Controller
	node       *Node // nil without the node service
	metrics    *metrics.Metrics
	serving    atomic.Bool
	exports    *exportfile.Watcher // nil without an exports file
}

// exportNames is the one table of export names the controller, its
// shares and the node share: the flags', and the exports file's, kept in
// step with it while the driver serves.
func (d *Driver) exportNames() (export.Names, error) {
	fixed := d.cfg.Names()
	names := export.NewNames(fixed)
	if d.cfg.ExportsFile == "" {
		return names, nil
	}
	w, err := exportfile.New(d.cfg.ExportsFile, fixed, names)
	d.exports = w
	return names, err
}

// mountMetrics exports how many mount(8) processes m runs, when it says.
func (d *Driver) mountMetrics(m nfsmount.Mounter) {
	if mp, ok := m.(interface{ MountsInProgress() int64 }); ok {
		d.metrics.Gauge("nfsdir_mounts_in_progress", "mount(8) processes running.", func() float64 { return float64(mp.MountsInProgress()) })
	}
}

// New builds the driver for cfg, using m for all mounts. cfg must be valid.
func New(cfg config.Config, m nfsmount.Mounter) (*Driver, error) {
	d := &Driver{cfg: cfg, metrics: metrics.New()}
	d.server = grpc.NewServer(grpc.UnaryInterceptor(d.observe))
	d.mountMetrics(m)
	names, err := d.exportNames()
	if err != nil {
		return nil, err
	}
	id := &Identity{name: cfg.DriverName, version: cfg.Version, controller: cfg.Controller(), ready: d.ready}
	csi.RegisterIdentityServer(d.server, id)
	if cfg.Controller() {
		var pool *serveragent.Pool
		acct := usage.Accounting{Every: cfg.CountEvery, Rate: cfg.CountRate, Workers: cfg.CountWorkers}
		copying := shares.Copying{Workers: cfg.CopyWorkers, Rate: cfg.CopyRate}
		if cfg.QuotaCert != "" || cfg.QuotaKey != "" || cfg.QuotaCA != "" {
			var err error
			if pool, err = serveragent.NewPool(serveragent.Files{Cert: cfg.QuotaCert, Key: cfg.QuotaKey, CA: cfg.QuotaCA}, cmp.Or(cfg.QuotaAgentIdentity, serveragent.DefaultAgentIdentity)); err != nil {
				return nil, fmt.Errorf("quota agents' client certificate: %w", err)
			}
			pool.Observe(func(agent, method string, err error, took time.Duration) {
				d.metrics.ObserveAgentCall(agent, method, status.Code(toStatus(err)).String(), took)
			})
			acct.Server = agentUsage{pool}
			copying.Remote = pool
		}
		set, err := shares.New(shares.Config{StateDir: cfg.StateDir, MountTimeout: cfg.MountTimeout, PurgeWorkers: cfg.PurgeWorkers,
			Accounting: acct,
			Copying:    copying, AbandonAfter: cfg.AbandonAfter, Names: names}, m)
		if err != nil {
			return nil, err
		}
		d.shares = set
		d.shareMetrics(set)
		d.controller = &Controller{shares: set,
			defaultOnDelete: cfg.DefaultOnDelete, defaultMode: config.DefaultVolumeMode, names: names,
			placer: &placer{shares: set, names: names}}
		if pool != nil {
			d.controller.quotas = pool
		}
		if err := d.controller.useAPI(cfg); err != nil {
			return nil, err
		}
		csi.RegisterControllerServer(d.server, d.controller)
	}
	if cfg.Node() {
		if err := d.newNode(cfg, m, names); err != nil {
			return nil, err
		}
	}
	d.nfsOpsMetrics(d.shares, d.views)
	return d, nil
}

// newNode sets up the node service: its target rule, its read-only share
// mounts, the claims of single-node volumes and, with --node-stage, its
// stager.
func (d *Driver) newNode(cfg config.Config, m nfsmount.Mounter, names export.Names) error {
	rule := targetpath.Rule{KubeletDir: cfg.KubeletDir}
	if cfg.PublishRoot != "" {
		rule = targetpath.Rule{Root: cfg.PublishRoot}
	}
	// The node reads volume records and usage figures through
	// read-only mounts of the shares; without a usable state
	// directory it reports what statfs says, as before.
	views, err := shares.New(shares.Config{StateDir: filepath.Join(cfg.StateDir, "node"), MountTimeout: cfg.MountTimeout}, m)
	if err != nil {
		klog.Warningf("volume stats: no read-only share mounts (%v); reporting the export's statfs figures", err)
		views = nil
	}
	d.views = views
	node := &Node{nodeID: cfg.NodeID, driverName: cfg.DriverName, mounter: m, mountTimeout: cfg.MountTimeout, targets: rule,
		policy: cfg.MountPolicy(), inline: cfg.InlinePolicy(), views: views, names: names}
	if cfg.NodeStage {
		if node.stager, err = nodestage.New(filepath.Join(cfg.StateDir, "node", "stage"), m, cfg.MountTimeout, rule, cfg.StateDir); err != nil {
			return err
		}
		// What a plugin that stopped left behind and nothing uses.
		go node.stager.Sweep(context.Background(), nil)
	}
	d.metrics.Gauge("nfsdir_node_export_mounts", "NodeStage mode: the mounts of exports this node plugin holds, one per export and set of mount options, from which staged volumes are bound (0 without --node-stage).", func() float64 {
		if node.stager == nil {
			return 0
		}
		m, _ := node.stager.Shares()
		return float64(len(m))
	})
	d.node = node
	d.metrics.Gauge("nfsdir_node_mount_option_differences", "Volume mounts this node plugin made that did not get the mount options they asked for (the kernel's shared client or cache gave them another mount's).", node.optionDifferences)
	d.metrics.GaugeByLabel("nfsdir_node_volume_mounts", "This node's NFS mounts of volumes, by the security the mount table shows them with (sec=, xprtsec=).", "security", node.mountSecurity)
	if views != nil {
		file := cfg.ClaimsFile
		if file == "" {
			file = filepath.Join(cfg.StateDir, "node", "claims.json")
		}
		c := &nodeClaims{views: views, node: cfg.NodeID, lapse: cfg.ClaimLapse, file: file, names: node.names,
			mounted: func(t string) (bool, error) { cur, err := m.Mounted(t); return cur != nil, err }}
		c.restore()
		node.claims, d.claims = c, c
		d.metrics.Gauge("nfsdir_node_claims_held", "Single-node volumes this node holds the claim of (published here).", func() float64 { return float64(c.count()) })
		d.metrics.Counter("nfsdir_node_claims_lost_total", "Claims of single-node volumes another node took over while they were still mounted here (this node's claim had lapsed; see the log).", func() float64 { return float64(c.lost.Load()) })
	}
	csi.RegisterNodeServer(d.server, node)
	return nil
}

// shareMetrics registers the controller's metrics of its shares: mounts,
// purges, usage counts and copies.
func (d *Driver) shareMetrics(set *shares.Set) {
	d.metrics.Gauge("nfsdir_share_mounts_kept", "Share mounts the controller keeps.", func() float64 { return float64(set.Stats().Mounts) })
	d.metrics.Gauge("nfsdir_purge_queue_length", "Deleted volumes being purged or waiting to be.", func() float64 { return float64(set.Stats().PurgesPending) })
	d.metrics.Gauge("nfsdir_purge_stuck", "Deleted volumes whose last purge attempt left entries it cannot remove (see the log for their paths); retried with back-off.", func() float64 { return float64(set.Stats().PurgesStuck) })
	d.metrics.Counter("nfsdir_purged_entries_total", "Files and directories removed by background purges.", func() float64 { return float64(set.Stats().PurgedEntries) })
	d.metrics.Counter("nfsdir_usage_counts_total", "Volumes whose usage was counted.", func() float64 { return float64(set.Accounting().Counts) })
	d.metrics.Counter("nfsdir_usage_counts_from_quota_agent_total", "Volumes whose usage their quota agent reported (the server's own accounting), instead of a walk.", func() float64 { return float64(set.Accounting().FromServer) })
	d.metrics.Counter("nfsdir_usage_count_failures_total", "Usage counts that failed (see the log).", func() float64 { return float64(set.Accounting().Failures) })
	d.metrics.Counter("nfsdir_usage_counted_inodes_total", "Files and directories found by usage counts.", func() float64 { return float64(set.Accounting().Entries) })
	d.metrics.GaugeByLabel("nfsdir_volumes_over_capacity", "Volumes whose last count found them using more than their capacity, by share.", "share", func() map[string]float64 { return set.Accounting().OverVolumes })
	d.metrics.GaugeByLabel("nfsdir_bytes_over_capacity", "Bytes used beyond their capacity by the volumes over it, by share.", "share", func() map[string]float64 { return set.Accounting().OverBytes })
	d.metrics.Gauge("nfsdir_copies_running", "Snapshot, restore and clone copies running.", func() float64 { return float64(set.Copies().Running) })
	d.metrics.Counter("nfsdir_copies_completed_total", "Snapshot, restore and clone copies completed.", func() float64 { return float64(set.Copies().Completed) })
	d.metrics.Counter("nfsdir_copies_failed_total", "Copy attempts that failed (retried; see the log).", func() float64 { return float64(set.Copies().Failed) })
	d.metrics.Counter("nfsdir_abandoned_volumes_discarded_total", "Volumes made from a snapshot or volume, never handed out, that CreateVolume stopped asking for (--abandon-after) and that were discarded.", func() float64 { return float64(set.AbandonedVolumes()) })
	d.metrics.Gauge("nfsdir_copies_running_entries", "Entries the running copies have looked at so far (archive entries, for restores of csi-driver-nfs snapshots).", func() float64 { return float64(set.Copies().RunningEntries) })
	d.metrics.Gauge("nfsdir_copies_running_bytes", "Bytes of file data the running copies have written so far.", func() float64 { return float64(set.Copies().RunningBytes) })
	d.metrics.Counter("nfsdir_copied_bytes_total", "File data copied by snapshots, restores and clones (holes not counted).", func() float64 { return float64(set.Copies().Bytes) })
	d.metrics.CounterByLabel("nfsdir_copied_files_total", "Regular files copied by snapshots, restores and clones, by how their data was copied: clone (FICLONE, NFSv4.2 CLONE), copy_file_range (NFSv4.2 COPY: on the server) or read_write (through this controller).", "method", func() map[string]float64 {
		st := set.Copies()
		out := map[string]float64{}
		for m, n := range st.ByMethod {
			out[treecopy.Method(m).String()] = float64(n)
		}
		return out
	})
}

// nfsOpsMetrics registers the counts of the NFS operations sent through
// the mounts of sets (the controller's and a node's, either nil), by
// share, mount and operation, as the kernel keeps them.
func (d *Driver) nfsOpsMetrics(sets ...*shares.Set) {
	const what = " through nfsdir's own mounts of each share (mount: main for the controller's calls, counts and copies, purge, view for a node's reads, claims), by share, mount and operation, as /proc/self/mountstats counts them since the mount was made"
	families := []metrics.Family{
		{Name: "nfsdir_nfs_operations_total", Help: "NFS operations sent" + what + "."},
		{Name: "nfsdir_nfs_operation_errors_total", Help: "NFS operations answered with an error" + what + "."},
		{Name: "nfsdir_nfs_operation_timeouts_total", Help: "NFS operations that timed out (major timeouts: the server did not answer)" + what + "."},
		{Name: "nfsdir_nfs_operation_rtt_seconds_total", Help: "Round-trip time (network and server) of the NFS operations sent" + what + "."},
		{Name: "nfsdir_nfs_operation_execute_seconds_total", Help: "Time from queueing to the reply processed of the NFS operations sent" + what + "."},
	}
	d.metrics.CounterTable(families, []string{"share", "mount", "op"}, func() []metrics.Row {
		var rows []metrics.Row
		for _, set := range sets {
			if set == nil {
				continue
			}
			for _, o := range set.NFSOps() {
				rows = append(rows, metrics.Row{Labels: []string{o.Share, o.Use, o.Op}, Values: []float64{float64(o.Ops),
					float64(o.Errors), float64(o.MajorTimeouts), float64(o.RTTMillis) / 1000, float64(o.ExecuteMillis) / 1000}})
			}
		}
		return rows
	})
}

func (d *Driver) ready() error {
	if !d.serving.Load() {
		return errors.New("gRPC server is not serving yet")
	}
	if d.shares != nil {
		if err := d.shares.Usable(); err != nil {
			return fmt.Errorf("state directory %s is not usable: %w", d.cfg.StateDir, err)
		}
	}
	return nil
}

// Listen opens the configured endpoint, removing a stale unix socket file.
func Listen(endpoint string) (net.Listener, error) {
	network, addr, err := config.ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(addr), 0o750); err != nil {
			return nil, err
		}
		if st, err := os.Lstat(addr); err == nil {
			if st.Mode().Type() != os.ModeSocket {
				return nil, fmt.Errorf("%s exists and is not a socket; refusing to remove it", addr)
			}
			if err := os.Remove(addr); err != nil {
				return nil, fmt.Errorf("remove stale socket %s: %w", addr, err)
			}
		}
	}
	if network != "unix" {
		return net.Listen(network, addr)
	}
	// Only root (kubelet, the sidecars) and the socket's group may connect:
	// the socket is created 0660 whatever the process umask.
	old := syscall.Umask(0o117)
	l, err := net.Listen(network, addr)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(addr, 0o660); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Serve serves on l until ctx ends, then stops accepting calls, waits for
// in-flight ones and releases the kept share mounts, all within
// shutdownGrace.
func (d *Driver) Serve(ctx context.Context, l net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- d.server.Serve(l) }()
	d.serving.Store(true)
	if d.shares != nil {
		go d.shares.Resume()
	}
	cctx, stopClaims := context.WithCancel(context.Background()) // the claims loop and the exports file
	defer stopClaims()
	if d.claims != nil {
		go d.claims.loop(cctx)
	}
	if d.exports != nil {
		go d.exports.Watch(cctx)
	}
	klog.Infof("%s %s serving %s services on %s", d.cfg.DriverName, d.cfg.Version, d.cfg.Mode, l.Addr())
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		klog.Info("shutting down: finishing in-flight calls")
	}
	stopBy := time.Now().Add(shutdownGrace)
	if err == nil && !waitUntil(stopBy.Add(-unmountReserve), d.server.GracefulStop) {
		klog.Warningf("in-flight calls still running after %s; stopping", shutdownGrace-unmountReserve)
		d.server.Stop()
	}
	d.serving.Store(false)
	stopClaims() // the claims stay on the share: the mounts stay too
	d.release(stopBy)
	return err
}

// release stops the background purges and releases the share mounts by
// the deadline stopBy. Work blocked in the kernel on a dead server cannot
// be stopped; it is left behind (the process exits) and resumes at the
// next start.
func (d *Driver) release(stopBy time.Time) {
	if d.views != nil {
		vctx, cancel := context.WithDeadline(context.Background(), stopBy)
		d.views.Close(vctx)
		cancel()
	}
	if d.shares == nil {
		return
	}
	if p, ok := d.controller.quotas.(*serveragent.Pool); ok {
		p.Close()
	}
	// Purges stop between removals; one blocked in the kernel is left.
	if !waitUntil(stopBy.Add(-unmountReserve), d.shares.StopPurges) {
		klog.Warning("background purges still blocked; leaving them")
	}
	uctx, cancel := context.WithDeadline(context.Background(), stopBy)
	d.shares.Close(uctx)
	cancel()
}

// waitUntil runs fn and waits for it until deadline; it reports whether fn
// returned in time (if not, fn goes on in the background).
func waitUntil(deadline time.Time, fn func()) bool {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// HTTPHandler serves /metrics (Prometheus) and /healthz (200 when Probe
// would answer ready, 503 with the reason otherwise).
func (d *Driver) HTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", d.metrics.Handler())
	mux.Handle("/healthz", metrics.HealthHandler(d.ready))
	return mux
}

// observe logs every call with secrets stripped (Probe only at high
// verbosity, since the liveness probe calls it constantly) and records it in
// the metrics.
func (d *Driver) observe(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	level := klog.Level(2)
	if info.FullMethod == csi.Identity_Probe_FullMethodName {
		level = 6
	}
	start := time.Now()
	klog.V(level).Infof("%s: %s", info.FullMethod, protosanitizer.StripSecrets(req))
	resp, err := handler(ctx, req)
	d.metrics.ObserveCall(path.Base(info.FullMethod), status.Code(err).String(), time.Since(start))
	if err != nil {
		klog.Errorf("%s failed after %s: %v", info.FullMethod, time.Since(start).Round(time.Millisecond), err)
	} else {
		klog.V(level).Infof("%s done in %s: %s", info.FullMethod, time.Since(start).Round(time.Millisecond), protosanitizer.StripSecrets(resp))
	}
	return resp, err
}
