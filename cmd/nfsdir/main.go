// Command nfsdir is a CSI driver that turns one NFS export into many
// volumes: every volume is a subdirectory of the export.
//
// `nfsdir [flags]` serves CSI; `nfsdir adopt [flags]` hands an existing
// directory over to nfsdir (docs/migration.md, "Adopting existing data");
// `nfsdir migrate [flags]` moves the PVs of csi-driver-nfs or
// nfs-subdir-external-provisioner over (docs/migration.md); `nfsdir agent
// [flags]` serves quotas, copies and volumes on the NFS server itself
// (docs/capacity-and-quotas.md).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr/funcr"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/csiserver"
	"github.com/nfsdir/nfsdir/pkg/metrics"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/secdaemons"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/version"
)

func main() {
	if len(os.Args) > 1 {
		sub, warning := subcommand(os.Args[1])
		if warning != "" {
			fmt.Fprintln(os.Stderr, warning)
		}
		if sub != nil {
			if err := sub(os.Args[2:], os.Stdout); err != nil {
				fmt.Fprintf(os.Stderr, "nfsdir %s: %v\n", os.Args[1], err)
				os.Exit(1)
			}
			return
		}
	}
	cfg, showVersion, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nfsdir:", err)
		os.Exit(2)
	}
	if showVersion {
		fmt.Println("nfsdir", version.String())
		return
	}
	if cfg.CheckOnly {
		fmt.Printf("nfsdir: configuration is valid (%s services on %s)\n", cfg.Mode, cfg.Endpoint)
		return
	}
	if err := run(cfg); err != nil {
		klog.Errorf("nfsdir: %v", err)
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// driverFlagValues are the driver's flags whose values parseFlags
// converts before they reach the configuration.
type driverFlagValues struct {
	mode, onDelete *string
	showVersion    *bool
}

// driverFlags defines the driver's own flags (klog's are added by
// parseFlags), filling cfg.
func driverFlags(cfg *config.Config) (*pflag.FlagSet, driverFlagValues) {
	fs := pflag.NewFlagSet("nfsdir", pflag.ContinueOnError)
	fs.StringVar(&cfg.Endpoint, "endpoint", cfg.Endpoint, "CSI endpoint: unix:///path/to/csi.sock or tcp://host:port")
	fs.StringVar(&cfg.NodeID, "node-id", "", "this node's ID (required for the node service)")
	fs.StringVar(&cfg.DriverName, "driver-name", cfg.DriverName, "CSI driver name")
	mode := fs.String("mode", string(cfg.Mode), "services to run: controller, node or all")
	fs.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "directory where the controller keeps its share mounts (the node plugin its read-only ones, below node/)")
	onDelete := fs.String("default-on-delete", string(cfg.DefaultOnDelete), "what DeleteVolume does when the StorageClass sets no onDelete: delete, retain or archive")
	fs.DurationVar(&cfg.MountTimeout, "mount-timeout", cfg.MountTimeout, "how long one NFS mount may take before it is killed")
	fs.DurationVar(&cfg.ClaimLapse, "claim-lapse", cfg.ClaimLapse, "node: how long a node's claim on a single-node (ReadWriteOnce) volume outlives the node's last renewal; another node's publish is refused until then")
	fs.StringVar(&cfg.ClaimsFile, "claims-file", "", "node: where the node plugin keeps the claims it holds, so that a restarted plugin renews them; keep it on the host (default: <state-dir>/node/claims.json)")
	fs.IntVar(&cfg.PurgeWorkers, "purge-workers", cfg.PurgeWorkers, "how many deleted volumes are purged at once")
	fs.DurationVar(&cfg.CountEvery, "usage-count-every", cfg.CountEvery, "how often the controller counts what each volume uses, at most (0: never; nodes then report the export's statfs figures)")
	fs.Float64Var(&cfg.CountRate, "usage-count-rate", cfg.CountRate, "files and directories the usage counts look at per second, all together (0: no bound)")
	fs.IntVar(&cfg.CountWorkers, "usage-count-workers", cfg.CountWorkers, "how many volumes are counted at once")
	fs.IntVar(&cfg.CopyWorkers, "copy-workers", cfg.CopyWorkers, "how many snapshots, restores and clones are copied at once (more wait their turn)")
	// Kept for one release: volumes are made through the share mount or the
	// server agent.
	fs.Bool("nfs-sessions", false, "ignored")
	fs.MarkDeprecated("nfs-sessions", "it has no effect: volumes are made through the share mount or the server agent; the flag goes in the next release")
	fs.DurationVar(&cfg.AbandonAfter, "abandon-after", cfg.AbandonAfter, "discard a volume made from a snapshot or volume that was never handed out when CreateVolume has not asked for it for this long (its claim was deleted while it was filled, and csi-provisioner restarted); keep it well above csi-provisioner's --retry-interval-max (5m); 0: never")
	fs.Float64Var(&cfg.CopyRate, "copy-rate", 0, "files and directories the snapshot, restore and clone copies make per second, all together (0: no bound)")
	fs.BoolVar(&cfg.ReadClaimMetadata, "read-claim-metadata", false, "let subDir templates use the claim's labels and annotations, read from the Kubernetes API with the pod's service account (needs get on persistentvolumeclaims)")
	fs.StringArrayVar(&cfg.Exports, "export", nil, "a named export, name=server:/share (repeatable): StorageClasses with export: <name> make volumes whose IDs carry the name, and every call finds the export where this flag says it is now")
	fs.StringVar(&cfg.ExportsFile, "exports-file", "", "a file of more named exports, one name=server:/share per line (# comments), read again every 10 s while the driver runs: adding an export or changing its address takes effect without a restart")
	fs.StringVar(&cfg.ClusterID, "cluster-id", "", "the cluster's identity, written into each new volume's record and compared by StorageClasses with reuseDirectory; default: the UID of the kube-system namespace (read from the Kubernetes API)")
	fs.StringVar(&cfg.QuotaCert, "quota-tls-cert", "", "client certificate (PEM) for the quota agents StorageClasses name with quotaAgent; read again when it changes")
	fs.StringVar(&cfg.QuotaKey, "quota-tls-key", "", "its private key (PEM)")
	fs.StringVar(&cfg.QuotaCA, "quota-ca", "", "the CA that signs the quota agents' certificates (PEM)")
	fs.StringVar(&cfg.QuotaAgentIdentity, "quota-agent-identity", serveragent.DefaultAgentIdentity, "the identity (URI or DNS subject alternative name) an agent's certificate must hold, besides being signed by --quota-ca for the agent's address and marked for server authentication")
	fs.StringVar(&cfg.MetricsAddress, "metrics-address", "", "host:port to serve Prometheus metrics on (/metrics); off when empty")
	fs.StringVar(&cfg.HealthAddress, "health-address", "", "host:port to serve /healthz on, reflecting the CSI Probe; off when empty")
	fs.StringVar(&cfg.KubeletDir, "kubelet-dir", cfg.KubeletDir, "kubelet's root directory; the node service mounts only on kubelet's CSI volume paths below it")
	fs.BoolVar(&cfg.NodeStage, "node-stage", false, "stage volumes: one NFS mount per export and option set on the node, bind-mounted for each volume and pod, instead of one NFS mount per pod")
	fs.StringVar(&cfg.PublishRoot, "publish-root", "", "outside Kubernetes: accept any publish target below this directory instead of kubelet's layout")
	fs.StringVar(&cfg.MountDefaults, "mount-options-default", cfg.MountDefaults, "mount options every publish gets unless the volume's options say otherwise (\"suid\" undoes \"nosuid\")")
	fs.StringVar(&cfg.MountForced, "mount-options-forced", "", "mount options every publish gets; a volume option that undoes or changes one is refused")
	fs.StringVar(&cfg.MountAllowed, "mount-options-allowed", "", "when set, the only mount option names a volume may use besides the forced ones (comma list, e.g. nfsvers,hard,timeo)")
	fs.StringVar(&cfg.SecurityDaemonsProc, "security-daemons-proc", cfg.SecurityDaemonsProc, "the /proc searched for rpc.gssd before a Kerberos mount (sec=krb5, krb5i, krb5p): the host's /proc mounted into the pod when the host runs it")
	fs.StringVar(&cfg.InlineAllow, "inline-volume-allow", "", "where CSI inline volumes may come from: a comma list of server:/path (read-only) and server:/path=rw; once given, even empty, nothing else is mounted inline")
	fs.StringVar(&cfg.LogFormat, "logging-format", "text", "log format: text (klog) or json (one JSON object per line)")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.BoolVar(&cfg.CheckOnly, "check-config", false, "validate the flags and exit without serving")
	return fs, driverFlagValues{mode: mode, onDelete: onDelete, showVersion: showVersion}
}

// subcommands are nfsdir's commands besides serving CSI, by name.
var subcommands = map[string]func([]string, io.Writer) error{"adopt": runAdopt, "migrate": runMigrate, "agent": runAgent, "daemon": runDaemon}

// formerNames are the former names of subcommands, accepted for one more
// release.
var formerNames = map[string]string{"quota-agent": "agent"}

// subcommand returns the subcommand called name, or nil, and a warning to
// print when name is a former one.
func subcommand(name string) (func([]string, io.Writer) error, string) {
	if now, ok := formerNames[name]; ok {
		return subcommands[now], fmt.Sprintf("nfsdir: %q is deprecated and goes in the next release: use \"nfsdir %s\"", name, now)
	}
	return subcommands[name], ""
}

func parseFlags(args []string) (config.Config, bool, error) {
	cfg := config.Default()
	cfg.Version = version.Version
	fs, v := driverFlags(&cfg)
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	fs.SortFlags = false
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if fs.NArg() > 0 {
		return cfg, false, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *v.showVersion {
		return cfg, true, nil
	}
	cfg.InlineAllowSet = fs.Changed("inline-volume-allow")
	cfg.Mode = config.Mode(*v.mode)
	cfg.DefaultOnDelete = params.OnDelete(strings.ToLower(*v.onDelete))
	return cfg, false, cfg.Validate()
}

func run(cfg config.Config) error {
	if cfg.LogFormat == "json" {
		klog.SetLogger(funcr.NewJSON(func(obj string) { fmt.Fprintln(os.Stderr, obj) },
			funcr.Options{LogTimestamp: true, Verbosity: 10})) // klog's -v still filters
	}
	// Modes of volume directories are exactly what the StorageClass asks
	// for; every file the driver creates itself names its mode.
	syscall.Umask(0)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	m := nfsmount.NewSystem()
	m.Daemons = secdaemons.NewSystem(cfg.SecurityDaemonsProc, secdaemons.DefaultWhere)
	d, err := csiserver.New(cfg, m)
	if err != nil {
		return err
	}
	l, err := csiserver.Listen(cfg.Endpoint)
	if err != nil {
		return err
	}
	for _, addr := range uniq(cfg.MetricsAddress, cfg.HealthAddress) {
		if _, err := metrics.Serve(ctx, addr, d.HTTPHandler()); err != nil {
			return err
		}
	}
	return d.Serve(ctx, l)
}

// uniq returns the non-empty addresses, each once.
func uniq(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		if a != "" && (len(out) == 0 || out[0] != a) {
			out = append(out, a)
		}
	}
	return out
}
