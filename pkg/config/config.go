// Package config holds the driver's configuration, its defaults and its
// validation. It does no I/O: main fills a Config from flags, calls Validate,
// and hands it to the server.
package config

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/params"
)

// Mode selects which CSI services the process serves.
type Mode string

// The modes.
const (
	ModeController Mode = "controller"
	ModeNode       Mode = "node"
	ModeAll        Mode = "all"
)

// Defaults.
const (
	DefaultEndpoint     = "unix:///csi/csi.sock"
	DefaultDriverName   = "nfsdir.csi.io"
	DefaultStateDir     = "/var/lib/nfsdir"
	DefaultMountTimeout = 2 * time.Minute
	DefaultKubeletDir   = "/var/lib/kubelet"
	// DefaultVolumeMode is the mode of a new volume directory when the
	// StorageClass sets no mountPermissions: rwx for owner and group,
	// nothing for others. With fsGroupPolicy File, kubelet gives the
	// directory the pod's fsGroup (and the setgid bit), so non-root pods can
	// write; other tenants of the export cannot read it. It needs no chmod,
	// so creating a volume costs two NFS calls.
	DefaultVolumeMode = 0o770
	// DefaultCountEvery and DefaultCountRate pace the usage counts: each
	// volume at most every 5 minutes, all counts together at most 2000
	// entries per second (a few READDIRPLUS calls a second on NFS).
	DefaultCountEvery = 5 * time.Minute
	DefaultCountRate  = 2000
	// DefaultAbandonAfter is how long a volume being made from a snapshot
	// or volume may go unasked for: twelve times csi-provisioner's longest
	// wait between retries (5 minutes by default).
	DefaultAbandonAfter = time.Hour
	// DefaultClaimLapse matches an NFSv4 server's default lease: a dead
	// node's single-node volumes are free again about when its locks are.
	DefaultClaimLapse = 90 * time.Second
)

// Config is the driver configuration.
type Config struct {
	Endpoint        string
	NodeID          string
	DriverName      string
	Version         string
	Mode            Mode
	StateDir        string
	DefaultOnDelete params.OnDelete
	MountTimeout    time.Duration
	// ClaimLapse is how long a node's claim on a single-node volume stays
	// live without being renewed (pkg/publock); ClaimsFile is where the
	// node plugin keeps the claims it holds, to renew them after a
	// restart ("": StateDir/node/claims.json).
	ClaimLapse time.Duration
	ClaimsFile string
	// PurgeWorkers bounds concurrent background purges of deleted volumes.
	PurgeWorkers int
	// CountEvery is how often each volume's usage is counted at most (0:
	// never); CountRate bounds the entries the counts look at per second,
	// all together (0: no bound); CountWorkers is how many volumes are
	// counted at once.
	CountEvery   time.Duration
	CountRate    float64
	CountWorkers int
	// CopyWorkers is how many snapshot, restore and clone copies run at
	// once; CopyRate bounds the entries they copy per second, all
	// together (0: no bound).
	CopyWorkers int
	CopyRate    float64
	// AbandonAfter is how long a volume made from a snapshot or volume,
	// never handed out, may go without CreateVolume asking for it before
	// it is discarded (its claim deleted while it was filled, and
	// csi-provisioner restarted); 0: never.
	AbandonAfter time.Duration
	// ReadClaimMetadata lets the controller read claims' labels and
	// annotations from the Kubernetes API for subDir templates.
	ReadClaimMetadata bool
	// ClusterID names the cluster in the records of the volumes it makes,
	// which a StorageClass's reuseDirectory compares; empty: the UID of
	// the kube-system namespace, read from the Kubernetes API.
	ClusterID string
	// Exports are the named exports, "name=server:/share" each: where
	// the volumes of StorageClasses that name an export are now.
	Exports []string
	// ExportsFile, when set, is a file of more named exports, one
	// "name=server:/share" per line, read again while the driver runs:
	// the chart's value exports, in a ConfigMap.
	ExportsFile string
	// QuotaCert, QuotaKey and QuotaCA are the controller's client
	// certificate, its key and the agents' CA, for the quota agents
	// StorageClasses name (quotaAgent); empty: none.
	QuotaCert, QuotaKey, QuotaCA string
	// QuotaAgentIdentity is the identity (a URI or DNS subject alternative
	// name) every agent's certificate must hold; empty: the agents' default
	// identity.
	QuotaAgentIdentity string
	// CheckOnly asks main to validate the configuration and exit.
	CheckOnly bool
	// MetricsAddress is host:port for Prometheus /metrics; "" is off.
	MetricsAddress string
	// HealthAddress is host:port for /healthz; "" is off.
	HealthAddress string
	// LogFormat is "text" (klog) or "json".
	LogFormat string
	// KubeletDir is kubelet's root directory: the node service acts only on
	// targets in kubelet's CSI volume layout below it.
	KubeletDir string
	// PublishRoot, when set, replaces kubelet's layout: any target below it
	// is accepted (container orchestrators other than Kubernetes, csi-sanity).
	PublishRoot string
	// NodeStage makes the node plugin stage volumes (STAGE_UNSTAGE_VOLUME):
	// one NFS mount per export and option set on the node, below
	// StateDir/node/stage, and bind mounts for each volume and pod.
	NodeStage bool
	// InlineAllow lists where CSI inline volumes may come from
	// (export.ParseAllowList); it is enforced only when InlineAllowSet.
	InlineAllow    string
	InlineAllowSet bool
	// MountDefaults, MountForced and MountAllowed are the node's mount
	// option policy as comma lists (see mountopts.Policy).
	MountDefaults, MountForced, MountAllowed string
	// SecurityDaemonsProc is the /proc searched for rpc.gssd before a
	// Kerberos mount: the host's, mounted into the pod, when the host runs
	// it; /proc when it runs beside nfsdir in the pod's processes.
	SecurityDaemonsProc string
}

// InlinePolicy returns the allow-list of CSI inline volumes, or nil when
// they are not restricted.
func (c Config) InlinePolicy() *export.AllowList {
	if !c.InlineAllowSet {
		return nil
	}
	l, _ := export.ParseAllowList(c.InlineAllow)
	return &l
}

// MountPolicy returns the node's mount option policy; Validate has checked
// it.
func (c Config) MountPolicy() mountopts.Policy {
	p, _ := mountopts.ParsePolicy(c.MountDefaults, c.MountForced, c.MountAllowed)
	return p
}

// Default returns a Config with every default applied.
func Default() Config {
	return Config{Endpoint: DefaultEndpoint, DriverName: DefaultDriverName, Mode: ModeAll,
		StateDir: DefaultStateDir, DefaultOnDelete: params.Delete, MountTimeout: DefaultMountTimeout, PurgeWorkers: 4, ClaimLapse: DefaultClaimLapse,
		CountEvery: DefaultCountEvery, CountRate: DefaultCountRate, CountWorkers: 2, CopyWorkers: 2, AbandonAfter: DefaultAbandonAfter,
		KubeletDir: DefaultKubeletDir, MountDefaults: mountopts.DefaultPolicy.Defaults.String(), SecurityDaemonsProc: "/proc"}
}

// Controller reports whether the controller service runs.
func (c Config) Controller() bool { return c.Mode == ModeController || c.Mode == ModeAll }

// Node reports whether the node service runs.
func (c Config) Node() bool { return c.Mode == ModeNode || c.Mode == ModeAll }

// Validate checks the configuration and returns one error line naming the
// flag to fix.
func (c Config) Validate() error {
	if _, _, err := ParseEndpoint(c.Endpoint); err != nil {
		return err
	}
	if err := CheckClusterID(c.ClusterID); err != nil {
		return err
	}
	if _, err := export.ParseNames(c.Exports); err != nil {
		return fmt.Errorf("--export: %v", err)
	}
	switch c.Mode {
	case ModeController, ModeNode, ModeAll:
	default:
		return fmt.Errorf("--mode %q must be controller, node or all", c.Mode)
	}
	if c.Node() && c.NodeID == "" {
		return fmt.Errorf("--node-id is required when the node service runs (--mode=%s)", c.Mode)
	}
	if err := checkDriverName(c.DriverName); err != nil {
		return err
	}
	if c.CountEvery < 0 || c.CountRate < 0 || c.CountWorkers < 1 {
		return fmt.Errorf("--usage-count-every and --usage-count-rate must not be negative, --usage-count-workers at least 1")
	}
	if c.AbandonAfter < 0 {
		return fmt.Errorf("--abandon-after %s: 0 (never) or a duration well above csi-provisioner's longest wait between retries (--retry-interval-max, 5m by default)", c.AbandonAfter)
	}
	if c.CopyWorkers < 1 || c.CopyRate < 0 {
		return fmt.Errorf("--copy-workers must be at least 1 and --copy-rate not negative")
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		return fmt.Errorf("--state-dir %q must be an absolute path", c.StateDir)
	}
	for flag, dir := range map[string]string{"--kubelet-dir": c.KubeletDir, "--publish-root": c.PublishRoot} {
		if c.Node() && dir != "" && (!path.IsAbs(dir) || path.Clean(dir) != dir || dir == "/") {
			return fmt.Errorf("%s %q must be a clean absolute path other than /", flag, dir)
		}
	}
	if c.Node() && c.KubeletDir == "" && c.PublishRoot == "" {
		return fmt.Errorf("--kubelet-dir is required when the node service runs (or --publish-root outside Kubernetes)")
	}
	if _, err := export.ParseAllowList(c.InlineAllow); err != nil {
		return fmt.Errorf("--inline-volume-allow: %v", err)
	}
	if _, err := mountopts.ParsePolicy(c.MountDefaults, c.MountForced, c.MountAllowed); err != nil {
		return fmt.Errorf("--mount-options-default/--mount-options-forced/--mount-options-allowed: %v", err)
	}
	if _, err := params.ParseOnDelete(string(c.DefaultOnDelete)); err != nil {
		return fmt.Errorf("--default-on-delete: %v", err)
	}
	if c.ClaimLapse < 3*time.Second {
		return fmt.Errorf("--claim-lapse %s must be at least 3s", c.ClaimLapse)
	}
	if c.ClaimsFile != "" && !strings.HasPrefix(c.ClaimsFile, "/") {
		return fmt.Errorf("--claims-file %q must be an absolute path", c.ClaimsFile)
	}
	if c.MountTimeout < time.Second {
		return fmt.Errorf("--mount-timeout %s must be at least 1s", c.MountTimeout)
	}
	for flag, addr := range map[string]string{"--metrics-address": c.MetricsAddress, "--health-address": c.HealthAddress} {
		if addr == "" {
			continue
		}
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return fmt.Errorf("%s %q must be host:port or :port", flag, addr)
		}
	}
	if c.LogFormat != "" && c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("--logging-format %q must be text or json", c.LogFormat)
	}
	if c.PurgeWorkers < 1 {
		return fmt.Errorf("purge workers must be at least 1")
	}
	return nil
}

// checkDriverName applies the CSI rule: at most 63 characters, starting and
// ending with an alphanumeric, with '-', '_' and '.' in between.
func checkDriverName(n string) error {
	if n == "" || len(n) > 63 {
		return fmt.Errorf("--driver-name %q must have 1 to 63 characters", n)
	}
	for i, r := range n {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(n)-1 || !strings.ContainsRune("-_.", r)) {
			return fmt.Errorf("--driver-name %q may hold only letters, digits, '-', '_' and '.', and must start and end with a letter or digit", n)
		}
	}
	return nil
}

// ParseEndpoint splits a CSI endpoint into a network ("unix" or "tcp") and
// an address.
func ParseEndpoint(ep string) (network, address string, err error) {
	u, err := url.Parse(ep)
	if err != nil {
		return "", "", fmt.Errorf("--endpoint %q: %v", ep, err)
	}
	switch u.Scheme {
	case "unix":
		p := u.Path
		if u.Host != "" { // unix://relative/path
			p = u.Host + u.Path
		}
		if p == "" {
			return "", "", fmt.Errorf("--endpoint %q has no socket path", ep)
		}
		return "unix", p, nil
	case "tcp":
		if u.Host == "" {
			return "", "", fmt.Errorf("--endpoint %q has no host:port", ep)
		}
		return "tcp", u.Host, nil
	}
	return "", "", fmt.Errorf("--endpoint %q must start with unix:// or tcp://", ep)
}

// Names returns the named exports of the flags (Exports); Validate has
// checked them.
func (c Config) Names() map[string]export.Export {
	n, err := export.ParseNames(c.Exports)
	if err != nil {
		return nil
	}
	return n
}

// CheckClusterID accepts an empty id or one of at most 128 letters,
// digits and . _ - :, as a namespace UID is.
func CheckClusterID(id string) error {
	bad := len(id) > 128
	for _, r := range id {
		bad = bad || !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-:", r))
	}
	if bad {
		return fmt.Errorf("--cluster-id %q: use at most 128 letters, digits and . _ - :", id)
	}
	return nil
}
