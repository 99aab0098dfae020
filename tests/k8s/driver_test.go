package k8s

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const (
	driverName = "nfsdir.csi.io"
	release    = "nfsdir"
	driverNS   = "kube-system"
	// serverDir is the node directory the NFS server pod exports as
	// /exports, the root of its NFSv4 namespace (share "/"): what the
	// driver did on the server shows here.
	serverDir = "/srv/nfs"
)

// TestDriverOnKubernetes runs in the lab guest (make e2e): a single-node
// cluster, an NFS server pod, nfsdir installed with the Helm chart, the
// workloads operators run on it, and last Kubernetes' storage suite.
func TestDriverOnKubernetes(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_K8S") != "1" {
		t.Skip("runs in the lab guest: make e2e")
	}
	c := startCluster(t)
	c.startNFSServer(true)
	sh(t, "ip addr add "+movedFrom+"/32 dev dummy0")
	c.installDriver("--set", "quota.clientSecret="+quotaClientSecret, "--set", "exports.main.server="+movedFrom, "--set", "exports.main.share=/")
	c.runSteps([]step{
		{"ReadWriteManyDeployment", (*cluster).readWriteMany},
		{"OnlineExpansion", (*cluster).onlineExpansion},
		{"VolumeStatsPerClaim", (*cluster).volumeStatsPerClaim},
		{"NonRootPodWithFSGroup", (*cluster).nonRootWithFSGroup},
		{"ReadOnlyPod", (*cluster).readOnlyPod},
		{"OnDeletePolicies", (*cluster).onDeletePolicies},
		{"VolumeAttributesClassOnDelete", (*cluster).volumeAttributesClassOnDelete},
		{"SnapshotRestoreAndClone", (*cluster).snapshotRestoreAndClone},
		{"RetainedSnapshotContentDeleted", (*cluster).retainedContentDeleted},
		{"StaticVolume", (*cluster).staticVolume},
		{"ClaimMetadataTemplates", (*cluster).claimMetadataTemplates},
		{"ReuseDirectoryAfterRebuild", (*cluster).reuseDirectoryAfterRebuild},
		{"MigrateFromNFSSubdir", (*cluster).migrateFromNFSSubdir},
		{"DropInForCSIDriverNFS", (*cluster).dropInForCSIDriverNFS},
		{"HardQuota", (*cluster).hardQuota},
		{"DriverMetrics", (*cluster).driverMetrics},
		{"NodePluginRestart", (*cluster).nodePluginRestart},
		{"NamedExportBeforeMove", (*cluster).namedExportBeforeMove},
		{"HelmUpgrade", (*cluster).helmUpgrade},
		// The upgrade moved the named export main to nodeIP.
		{"NamedExportAfterMove", (*cluster).namedExportAfterMove},
		{"PoolGrowsWithoutRestart", (*cluster).poolGrowsWithoutRestart},
		// From here on the node plugin stages (node.stage).
		{"NodeStageMode", (*cluster).nodeStageMode},
		{"ControllerRestartsUnderLoad", (*cluster).controllerRestartsUnderLoad},
		{"NodeHTTPOnThePodIP", (*cluster).nodeHTTPOnThePodIP},
		{"NoContainerRestarted", (*cluster).noContainerRestarted},
		// Kubernetes' storage suite, one spec of each kind (quickSpecs),
		// on the same cluster.
		{"KubernetesStorageSuite", (*cluster).quickStorageSuite},
	})
}

// in returns the cluster seen from a subtest: failures end the subtest.
func (c *cluster) in(t *testing.T) *cluster {
	cc := *c
	cc.t = t
	return &cc
}

func (c *cluster) testdata(name string) string { return c.manifest(filepath.Join("testdata", name)) }
func (c *cluster) example(name string) string {
	return c.manifest(filepath.Join(c.bin, "example", name))
}

// startNFSServer serves serverDir from the NFS server pod and proves it
// with a mount from the node. With quota, an XFS file system with project
// quotas is mounted at serverDir/quota (exported as share /quota) and the
// pod runs the quota agent beside the server (setupQuota).
func (c *cluster) startNFSServer(quota bool) {
	sh(c.t, "mkdir -p "+serverDir+" && mount -t tmpfs -o size=1g,mode=0755 exports "+serverDir)
	var pod corev1.Pod
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(c.testdata("nfs-server.yaml")), 4096).Decode(&pod); err != nil {
		c.t.Fatal(err)
	}
	if quota {
		c.setupQuota(&pod)
	}
	pod.Spec.NodeName = nodeName // its exports are this guest's directories
	if _, err := c.kube.CoreV1().Pods("default").Create(context.Background(), &pod, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.podsReady("NFS server pod Ready", "default", "app=nfs-server", 1, 3*time.Minute)
	sh(c.t, "mkdir -p /mnt/check && mount -t nfs -o vers=4.2 "+nodeIP+":/ /mnt/check && "+
		"echo ok > /mnt/check/.served && umount /mnt/check && rm "+serverDir+"/.served")
	c.stage("NFS server pod serves " + serverDir + " as " + nodeIP + ":/")
	if quota {
		sh(c.t, "mount -t nfs -o vers=4.2 "+nodeIP+":/quota /mnt/check && echo ok > /mnt/check/.served && umount /mnt/check && rm "+serverDir+"/quota/.served")
		c.stage("and its XFS with project quotas as " + nodeIP + ":/quota, with the quota agent")
	}
}

// The lab's quota setup: the agent's serving certificate and the
// controller's client certificate, from the cluster's CA.
const (
	quotaClientSecret = "nfsdir-quota-client"
	quotaAgentSecret  = "quota-agent-tls"
	quotaAgentPort    = "29700"
)

// setupQuota mounts a 512 MiB XFS image (mkfs.xfs wants 300 MB at least) with prjquota at serverDir/quota,
// stores the certificates in Secrets and adds the quota agent to the NFS
// server pod: the same binary, serving share /quota on the node's
// address, as an NFS server host's systemd unit would.
func (c *cluster) setupQuota(pod *corev1.Pod) {
	sh(c.t, "modprobe loop; modprobe xfs; truncate -s 512M /run/quota.img && dev=$(losetup -f) && "+
		"{ [ -b $dev ] || mknod $dev b 7 ${dev#/dev/loop}; } && losetup $dev /run/quota.img && "+
		"mkfs.xfs -q $dev && mkdir -p "+serverDir+"/quota && mount -t xfs -o prjquota $dev "+serverDir+"/quota")
	ca, _ := os.ReadFile(filepath.Join(c.dir, "ca.crt"))
	// The chart's and the agent's default identities pin the certificates
	// to their roles.
	secret := func(ns, name, cn, identity string, usage x509.ExtKeyUsage, ips ...net.IP) {
		id, err := url.Parse(identity)
		if err != nil {
			c.t.Fatal(err)
		}
		cert, key := c.pki.issue(c.t, name, &x509.Certificate{Subject: pkix.Name{CommonName: cn}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips, URIs: []*url.URL{id}})
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{
			"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert}),
			"tls.key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}),
			"ca.crt":  ca,
		}}
		if _, err := c.kube.CoreV1().Secrets(ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	secret("default", quotaAgentSecret, "quota-agent", "urn:nfsdir:agent", x509.ExtKeyUsageServerAuth, net.ParseIP(nodeIP))
	secret(driverNS, quotaClientSecret, "nfsdir-controller", "urn:nfsdir:controller", x509.ExtKeyUsageClientAuth)
	const image = "lab.local/nfsdir:lab" // the chart's nfsdir image in the lab
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{
		Name: "quota-agent", Image: image, ImagePullPolicy: corev1.PullNever,
		Command: []string{"/nfsdir", "agent", "--listen=" + nodeIP + ":" + quotaAgentPort, "--export=/quota=/exports/quota",
			"--tls-cert=/certs/tls.crt", "--tls-key=/certs/tls.key", "--client-ca=/certs/ca.crt", "--audit-log=/exports/quota-audit.log"},
		SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
		VolumeMounts:    []corev1.VolumeMount{{Name: "exports", MountPath: "/exports"}, {Name: "certs", MountPath: "/certs", ReadOnly: true}},
	})
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: quotaAgentSecret}}})
}

func ptr[T any](v T) *T { return &v }

// installDriver installs the chart with only the images overridden (and
// any further helm arguments), and waits until the controller and the node
// plugin run and the kubelet lists the driver on its CSINode.
func (c *cluster) installDriver(helmArgs ...string) {
	began := time.Now()
	args := append([]string{"install", release, filepath.Join(c.bin, "chart", "nfsdir"), "--namespace", driverNS}, labImageValues()...)
	out := c.helm(append(args, helmArgs...)...)
	c.stage(fmt.Sprintf("helm install returned after %.1fs", time.Since(began).Seconds()))
	if !strings.Contains(out, "STATUS: deployed") {
		c.t.Fatalf("helm install:\n%s", out)
	}
	c.driverRunning("driver running")
}

// labImageValues are the helm values that point the chart at the images
// imported into the lab's containerd, and pace the usage counts for a
// test that waits for them.
func labImageValues() []string {
	return []string{
		"--set", "image.nfsdir.repository=lab.local/nfsdir", "--set", "image.nfsdir.tag=lab",
		"--set", "image.csiProvisioner.repository=lab.local/csi-provisioner",
		"--set", "image.csiResizer.repository=lab.local/csi-resizer",
		"--set", "feature.enableSnapshotter=true", "--set", "image.csiSnapshotter.repository=lab.local/csi-snapshotter",
		"--set", "volumeSnapshotClasses[0].name=nfsdir", "--set", "volumeSnapshotClasses[0].deletionPolicy=Delete",
		"--set", "image.livenessProbe.repository=lab.local/livenessprobe",
		"--set", "image.nodeDriverRegistrar.repository=lab.local/csi-node-driver-registrar",
		// Counted every 15 s rather than 5 min: the lab checks kubelet's
		// volume stats within minutes.
		"--set", "controller.usage.countEvery=15s",
		"--set", "controller.claimMetadata.enabled=true",
		// Short leader leases: a new controller pod (an upgrade, a
		// replacement) takes over within about 40 s rather than the
		// chart's 137 s, which allow for slow API servers.
		"--set", "controller.leaderElection.leaseDuration=40s",
		"--set", "controller.leaderElection.renewDeadline=30s",
		"--set", "controller.leaderElection.retryPeriod=5s",
	}
}

// driverRunning waits for one Ready controller pod, a Ready node pod on
// every node and the driver on every node's CSINode, and returns the node
// pod of this guest's node.
func (c *cluster) driverRunning(what string) corev1.Pod {
	c.podsReady(what+": controller", driverNS, "app.kubernetes.io/component=controller", 1, 5*time.Minute)
	nodes := c.podsReady(what+": node plugin", driverNS, "app.kubernetes.io/component=node", max(1, len(c.nodes)), 8*time.Minute)
	for _, name := range append([]string{nodeName}, c.otherNodes()...) {
		c.waitFor(what+": CSINode of "+name+" lists "+driverName, 3*time.Minute, func() (bool, error) {
			n, err := c.kube.StorageV1().CSINodes().Get(context.Background(), name, metav1GetOptions)
			if err != nil {
				return false, err
			}
			for _, d := range n.Spec.Drivers {
				if d.Name == driverName {
					return d.NodeID == name, fmt.Errorf("node ID %q", d.NodeID)
				}
			}
			return false, fmt.Errorf("drivers: %v", n.Spec.Drivers)
		}, "kubelet")
	}
	for _, p := range nodes {
		if p.Spec.NodeName == nodeName {
			return p
		}
	}
	c.t.Fatalf("no node plugin pod on %s", nodeName)
	return corev1.Pod{}
}

// otherNodes returns the names of the cluster's nodes but this guest's.
func (c *cluster) otherNodes() []string {
	var out []string
	for _, n := range c.nodes {
		if n.name != nodeName {
			out = append(out, n.name)
		}
	}
	return out
}

// boundPV waits until a claim is bound and returns its volume.
func (c *cluster) boundPV(ns, claim string) *corev1.PersistentVolume {
	c.t.Helper()
	var pvName string
	c.waitFor("claim "+claim+" Bound", 3*time.Minute, func() (bool, error) {
		pvc, err := c.kube.CoreV1().PersistentVolumeClaims(ns).Get(context.Background(), claim, metav1GetOptions)
		if err != nil {
			return false, err
		}
		pvName = pvc.Spec.VolumeName
		if pvc.Status.Phase == corev1.ClaimBound {
			return true, nil
		}
		// The provisioner's last word on it, if any (ProvisioningFailed).
		last := ""
		if ev, err := c.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim}); err == nil {
			for _, e := range ev.Items {
				last = e.Reason + ": " + e.Message
			}
		}
		return false, fmt.Errorf("phase %s; last event %q", pvc.Status.Phase, last)
	})
	pv, err := c.kube.CoreV1().PersistentVolumes().Get(context.Background(), pvName, metav1GetOptions)
	if err != nil {
		c.t.Fatal(err)
	}
	if pv.Spec.CSI == nil || pv.Spec.CSI.Driver != driverName {
		c.t.Fatalf("volume %s is not an %s volume: %+v", pvName, driverName, pv.Spec.PersistentVolumeSource)
	}
	return pv
}

// readWriteMany: the example StorageClass (subDir template
// ${pvc.metadata.namespace}/${pvc.metadata.name}, mountOptions nfsvers=4.1)
// and claim; two pods of a Deployment each see the other's write; scaled to
// zero and back, the new pods find the old data.
func (c *cluster) readWriteMany() {
	c.create(c.example("storageclass.yaml"))
	c.create(c.example("pvc.yaml"))
	pv := c.boundPV("default", "shared-data")
	dir := filepath.Join(serverDir, "default", "shared-data")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		c.t.Fatalf("the templated directory %s is not on the server: %v", dir, err)
	}
	c.create(c.testdata("rwx.yaml"))
	first := c.podsReady("2 pods of the RWX Deployment Ready", "default", "app=rwx", 2, 5*time.Minute)
	c.seenBy(dir, first, 2)
	for _, p := range first {
		m := mounts(string(p.UID), pv.Name)
		if len(m) != 1 || !strings.Contains(m[0], " nfs4 ") || !strings.Contains(m[0], "vers=4.1") ||
			!strings.Contains(m[0], nodeIP+":/default/shared-data") {
			c.t.Errorf("pod %s: want one nfs4 vers=4.1 mount of the volume (StorageClass mountOptions), the node has %q", p.Name, m)
		}
	}
	c.scale("rwx", 0)
	c.waitFor("RWX Deployment scaled to 0", 3*time.Minute, func() (bool, error) {
		n := len(c.pods("default", "app=rwx"))
		return n == 0, fmt.Errorf("%d pods", n)
	})
	for _, p := range first {
		if m := mounts(string(p.UID)); len(m) != 0 {
			c.t.Errorf("pod %s is gone but its mounts stay: %q", p.Name, m)
		}
	}
	c.scale("rwx", 2)
	second := c.podsReady("RWX Deployment back at 2", "default", "app=rwx", 2, 5*time.Minute)
	// Each new pod finds both old names (and its own) as soon as it starts.
	for pod, seen := range c.seenBy(dir, second, 3) {
		for _, p := range first {
			if !slices.Contains(seen, p.Name) {
				c.t.Errorf("after scaling back, the data of %s is gone: %s saw %v", p.Name, pod, seen)
			}
		}
	}
}

// onlineExpansion: the claim the RWX Deployment uses grows from 5Gi to
// 8Gi while its pods run: the chart's csi-resizer calls
// ControllerExpandVolume, the PV and the claim's status show the new size
// without a node step, the record on the share holds it, and no pod
// restarted.
func (c *cluster) onlineExpansion() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	before := c.pods("default", "app=rwx")
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"8Gi"}}}}`)
	if _, err := c.kube.CoreV1().PersistentVolumeClaims("default").Patch(ctx, "shared-data", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	want := int64(8 << 30)
	var handle string
	c.waitFor("claim shared-data grown to 8Gi", 3*time.Minute, func() (bool, error) {
		pvc, err := c.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "shared-data", metav1GetOptions)
		if err != nil {
			return false, err
		}
		pv, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1GetOptions)
		if err != nil {
			return false, err
		}
		handle = pv.Spec.CSI.VolumeHandle
		pvSize, claimSize := pv.Spec.Capacity[corev1.ResourceStorage], pvc.Status.Capacity[corev1.ResourceStorage]
		return pvSize.Value() == want && claimSize.Value() == want, fmt.Errorf("PV %s, claim status %s, conditions %v", pvSize.String(), claimSize.String(), pvc.Status.Conditions)
	})
	record, err := recordOnServer(handle)
	if err != nil || !strings.Contains(record, fmt.Sprintf(`"capacityBytes":%d`, want)) {
		c.t.Errorf("the record on the share: %q %v", record, err)
	}
	for _, p := range c.pods("default", "app=rwx") {
		if !slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.UID == p.UID }) {
			c.t.Errorf("pod %s was replaced during the expansion", p.Name)
		}
	}
	c.stage("claim shared-data expanded online to 8Gi; record on the share updated")
}

// dumpDriverOnFailure logs the driver's pods (their containers' arguments,
// events and logs: the sidecars' side of a failed step) when the step
// failed.
func (c *cluster) dumpDriverOnFailure() {
	if !c.t.Failed() {
		return
	}
	for _, p := range c.pods(driverNS, "app.kubernetes.io/name=nfsdir") {
		for _, ctr := range containersOf(&p) {
			c.t.Logf("pod %s container %s args %q", p.Name, ctr.Name, ctr.Args)
		}
		c.t.Log(c.describePod(&p))
	}
}

// recordOnServer returns the text of the record on the server of the
// volume with handle (its key is the ID's fourth field, up to the token).
func recordOnServer(handle string) (string, error) {
	f := strings.Split(handle, "|")
	if len(f) < 4 || !strings.Contains(f[3], ".") {
		return "", fmt.Errorf("volume handle %q is not an nfsdir ID", handle)
	}
	key := f[3][:strings.IndexByte(f[3], '.')]
	return os.Readlink(filepath.Join(serverDir, ".nfsdir", "volumes", key))
}

// volumeAttributesClassOnDelete: a claim of the example StorageClass
// (onDelete delete) is given a VolumeAttributesClass with onDelete retain
// once bound and written; the real csi-resizer calls
// ControllerModifyVolume, the claim's status names the class, the record on
// the share says retain, and deleting the claim keeps the directory.
func (c *cluster) volumeAttributesClassOnDelete() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	c.create(c.testdata("vac.yaml"))
	c.freshClaim("vac-claim")
	pv := c.boundPV("default", "vac-claim")
	patch := []byte(`{"spec":{"volumeAttributesClassName":"nfsdir-keep"}}`)
	if _, err := c.kube.CoreV1().PersistentVolumeClaims("default").Patch(ctx, "vac-claim", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("claim vac-claim has class nfsdir-keep", 3*time.Minute, func() (bool, error) {
		pvc, err := c.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "vac-claim", metav1GetOptions)
		if err != nil {
			return false, err
		}
		cur := pvc.Status.CurrentVolumeAttributesClassName
		return cur != nil && *cur == "nfsdir-keep", fmt.Errorf("current class %v, status %+v", cur, pvc.Status.ModifyVolumeStatus)
	})
	if record, err := recordOnServer(pv.Spec.CSI.VolumeHandle); err != nil || !strings.Contains(record, `"onDelete":"retain"`) {
		c.t.Errorf("the record on the share: %q %v", record, err)
	}
	c.kube.CoreV1().Pods("default").Delete(ctx, "vac-claim", metav1.DeleteOptions{})
	if err := c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "vac-claim", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("volume of vac-claim deleted", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1GetOptions)
		return apierrors.IsNotFound(err), err
	}, "kubelet")
	proof := filepath.Join(serverDir, "default", "vac-claim", "proof")
	if b, err := os.ReadFile(proof); err != nil || string(b) != "written-by-vac-claim\n" {
		c.t.Errorf("a volume whose class says onDelete retain lost its data: %q %v", b, err)
	}
	os.RemoveAll(filepath.Dir(proof))
	c.stage("VolumeAttributesClass nfsdir-keep applied to a bound claim; its directory outlived it")
}

// volumeStatsPerClaim: a pod writes 6 MiB into a 64Mi claim; kubelet's
// own metrics, read through the API server's node proxy as an operator
// would, show the claim's capacity as 64Mi and its used bytes as what the
// pod wrote (plus the directory's own blocks), not the export's figures.
func (c *cluster) volumeStatsPerClaim() {
	c.create(c.testdata("usage-writer.yaml"))
	c.podReaches("default", "usage-writer", corev1.PodRunning, 5*time.Minute)
	c.waitFor("usage-writer wrote 6 MiB", 2*time.Minute, func() (bool, error) {
		l := c.logsOf("default", "usage-writer", "w")
		return strings.Contains(l, "written"), fmt.Errorf("log %q", l)
	})
	const wrote = 6 << 20
	var used, total float64
	c.waitFor("kubelet_volume_stats_used_bytes of usage-data shows the 6 MiB written", 4*time.Minute, func() (bool, error) {
		raw, err := c.kube.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + nodeName + "/proxy/metrics").DoRaw(context.Background())
		if err != nil {
			return false, err
		}
		used = claimMetric(string(raw), "kubelet_volume_stats_used_bytes", "usage-data")
		total = claimMetric(string(raw), "kubelet_volume_stats_capacity_bytes", "usage-data")
		return used >= wrote && used <= wrote+64<<10 && total == 64<<20, fmt.Errorf("used %v, capacity %v", used, total)
	}, "kubelet")
	c.kube.CoreV1().Pods("default").Delete(context.Background(), "usage-writer", metav1.DeleteOptions{})
	c.stage(fmt.Sprintf("kubelet reports usage-data: %.0f bytes used of %.0f", used, total))
}

// claimMetric returns the value of a kubelet volume metric for a claim in
// the default namespace from Prometheus text, or -1.
func claimMetric(text, name, claim string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") || !strings.Contains(line, `persistentvolumeclaim="`+claim+`"`) || !strings.Contains(line, `namespace="default"`) {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			return v
		}
	}
	return -1
}

// seenBy waits until every pod has recorded (in dir/seen/<pod>) at least n
// names in dir/hosts, its own among them, and returns what each pod saw.
func (c *cluster) seenBy(dir string, pods []corev1.Pod, n int) map[string][]string {
	c.t.Helper()
	seen := map[string][]string{}
	for _, p := range pods {
		c.waitFor(p.Name+" saw its peers' writes", 2*time.Minute, func() (bool, error) {
			b, err := os.ReadFile(filepath.Join(dir, "seen", p.Name))
			if err != nil {
				return false, err
			}
			names := strings.Fields(string(b))
			seen[p.Name] = names
			return len(names) >= n && slices.Contains(names, p.Name), fmt.Errorf("saw %v", names)
		}, "kubelet")
	}
	return seen
}

func (c *cluster) scale(deployment string, replicas int32) {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := c.kube.AppsV1().Deployments("default").Patch(context.Background(), deployment, types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// nonRootWithFSGroup: the example Deployment (uid 1000, fsGroup 1000) on the
// same claim: both replicas append to one file as a non-root user, which
// the kubelet allows by giving the volume the pod's fsGroup (the CSIDriver's
// fsGroupPolicy File).
func (c *cluster) nonRootWithFSGroup() {
	c.create(c.example("deployment.yaml"))
	pods := c.podsReady("2 non-root writers Ready", "default", "app=shared-writer", 2, 5*time.Minute)
	log := filepath.Join(serverDir, "default", "shared-data", "log.txt")
	c.waitFor("both non-root writers wrote", 2*time.Minute, func() (bool, error) {
		b, err := os.ReadFile(log)
		for _, p := range pods {
			if !strings.Contains(string(b), p.Name+" ") {
				return false, fmt.Errorf("no line from %s: %v", p.Name, err)
			}
		}
		return true, nil
	})
	var st syscall.Stat_t
	if err := syscall.Stat(log, &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
		c.t.Errorf("log.txt on the server: uid %d gid %d (%v), want 1000/1000", st.Uid, st.Gid, err)
	}
	var dirSt syscall.Stat_t
	syscall.Stat(filepath.Dir(log), &dirSt)
	if dirSt.Gid != 1000 || dirSt.Mode&syscall.S_ISGID == 0 {
		c.t.Errorf("volume directory: gid %d mode %o, want the fsGroup 1000 and setgid", dirSt.Gid, dirSt.Mode)
	}
	c.scale("shared-writer", 0)
}

// readOnlyPod: a pod mounting the claim read-only reads, cannot write, and
// the node's mount for it is read-only.
func (c *cluster) readOnlyPod() {
	made := c.create(c.testdata("readonly-pod.yaml"))
	c.podReaches("default", "read-only", corev1.PodRunning, 5*time.Minute)
	c.waitFor("read-only pod's checks passed", 2*time.Minute, func() (bool, error) {
		l := c.logsOf("default", "read-only", "reader")
		return strings.Contains(l, "read-only-checks-passed"), fmt.Errorf("log %q", l)
	})
	if m := mounts(string(made[0].GetUID()), "kubernetes.io~csi"); len(m) != 1 || !strings.Contains(m[0], " ro,") {
		c.t.Errorf("the read-only pod's volume mount on the node: %q, want one read-only mount", m)
	}
	c.kube.CoreV1().Pods("default").Delete(context.Background(), "read-only", metav1.DeleteOptions{})
	if _, err := os.Stat(filepath.Join(serverDir, "default", "shared-data", "written-through-ro")); err == nil {
		c.t.Error("a write through the read-only volume reached the server")
	}
}

// onDeletePolicies: reclaimPolicy Delete with onDelete delete, retain and
// archive: the volumes go away, and the directories are removed, kept, or
// renamed to archived-<subDir>.
func (c *cluster) onDeletePolicies() {
	c.create(c.testdata("ondelete.yaml"))
	claims := []string{"by-delete", "by-retain", "by-archive"}
	pvs := map[string]string{}
	for _, claim := range claims {
		pvs[claim] = c.boundPV("default", claim).Name
		dir := filepath.Join(serverDir, "policy", claim)
		if err := os.WriteFile(filepath.Join(dir, "data"), []byte(claim), 0o644); err != nil {
			c.t.Fatalf("the directory of %s is not on the server: %v", claim, err)
		}
		if err := c.kube.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), claim, metav1.DeleteOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	for _, claim := range claims {
		c.waitFor("volume of "+claim+" deleted", 3*time.Minute, func() (bool, error) {
			_, err := c.kube.CoreV1().PersistentVolumes().Get(context.Background(), pvs[claim], metav1GetOptions)
			return apierrors.IsNotFound(err), err
		}, "kubelet")
	}
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if d := filepath.Join(serverDir, "policy", "by-delete"); exists(d) {
		c.t.Errorf("onDelete delete: %s still exists", d)
	}
	if b, err := os.ReadFile(filepath.Join(serverDir, "policy", "by-retain", "data")); err != nil || string(b) != "by-retain" {
		c.t.Errorf("onDelete retain: the data is not kept: %q %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(serverDir, "archived-policy-by-archive", "data")); err != nil || string(b) != "by-archive" {
		entries, _ := os.ReadDir(serverDir)
		c.t.Errorf("onDelete archive: archived-policy-by-archive/data: %q %v (share holds %v)", b, err, entries)
	}
	if d := filepath.Join(serverDir, "policy", "by-archive"); exists(d) {
		c.t.Errorf("onDelete archive: %s is still in place", d)
	}
}

// staticVolume: the example static PV/PVC naming a directory the server
// already had; a pod reads it; deleting the pod, claim and volume leaves the
// directory alone (nfsdir did not create it).
func (c *cluster) staticVolume() {
	dir := filepath.Join(serverDir, "existing-data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "hello"), []byte("hello-from-the-server\n"), 0o644)
	c.create(c.example("static-pv.yaml"))
	c.boundPV("default", "existing-data")
	c.create(c.testdata("static-reader.yaml"))
	c.podReaches("default", "static-reader", corev1.PodSucceeded, 5*time.Minute)
	ctx := context.Background()
	c.kube.CoreV1().Pods("default").Delete(ctx, "static-reader", metav1.DeleteOptions{})
	c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "existing-data", metav1.DeleteOptions{})
	c.kube.CoreV1().PersistentVolumes().Delete(ctx, "existing-data", metav1.DeleteOptions{})
	c.waitFor("static volume deleted", 2*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, "existing-data", metav1GetOptions)
		return apierrors.IsNotFound(err), err
	})
	if _, err := os.Stat(filepath.Join(dir, "hello")); err != nil {
		c.t.Errorf("the static volume's directory lost its data: %v", err)
	}
}

// nodePluginRestart: the node plugin pod is deleted while a pod writes to
// a volume five times a second; the writer sees no error, and once the
// DaemonSet's new pod registers, a new claim is provisioned and mounted.
func (c *cluster) nodePluginRestart() {
	c.create(c.testdata("writer.yaml"))
	c.podsReady("writer Running", "default", "app=writer", 1, 3*time.Minute)
	c.writerProgresses("writer writes")
	old := c.pods(driverNS, "app.kubernetes.io/component=node")
	for _, p := range old {
		if err := c.kube.CoreV1().Pods(driverNS).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	c.waitFor("old node plugin pod gone", 3*time.Minute, func() (bool, error) {
		for _, p := range c.pods(driverNS, "app.kubernetes.io/component=node") {
			if p.UID == old[0].UID {
				return false, nil
			}
		}
		return true, nil
	})
	c.driverRunning("node plugin replaced")
	c.writerProgresses("writer still writes after the node plugin restart")
	c.freshClaim("after-restart")
}

// writerProgresses checks that the writer pod runs without restarts and its
// log on the server grows by at least 10 lines.
func (c *cluster) writerProgresses(what string) {
	c.t.Helper()
	log := filepath.Join(serverDir, "default", "shared-data", "writer.log")
	lines := func() int { b, _ := os.ReadFile(log); return strings.Count(string(b), "\n") }
	from := lines()
	c.waitFor(what, 2*time.Minute, func() (bool, error) {
		p, err := c.kube.CoreV1().Pods("default").Get(context.Background(), "writer", metav1GetOptions)
		if err != nil {
			return false, err
		}
		if p.Status.Phase != corev1.PodRunning {
			c.t.Fatalf("writer stopped:\n%s", c.describePod(p))
		}
		n := lines()
		return n >= from+10, fmt.Errorf("%d lines, from %d", n, from)
	})
}

// freshClaim provisions a new claim with the example StorageClass and has
// a pod write to it.
func (c *cluster) freshClaim(name string) {
	c.t.Helper()
	c.create(strings.ReplaceAll(c.testdata("fresh-claim.yaml"), "NAME", name))
	c.podReaches("default", name, corev1.PodSucceeded, 5*time.Minute)
	b, err := os.ReadFile(filepath.Join(serverDir, "default", name, "proof"))
	if err != nil || string(b) != "written-by-"+name+"\n" {
		c.t.Errorf("%s: the pod's write is not on the server: %q %v", name, b, err)
	}
}

// helmUpgrade: `helm upgrade` turning on inline volumes and changing the
// mount timeout. volumeLifecycleModes is immutable in a CSIDriver, so the
// documented procedure deletes the CSIDriver object first. The writer keeps
// writing through the upgrade; afterwards the example inline pod mounts the
// existing directory and a new claim is provisioned.
func (c *cluster) helmUpgrade() {
	ctx := context.Background()
	if err := c.kube.StorageV1().CSIDrivers().Delete(ctx, driverName, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	began := time.Now()
	out := c.helm("upgrade", release, filepath.Join(c.bin, "chart", "nfsdir"), "--namespace", driverNS, "--reuse-values",
		"--set", "feature.enableInlineVolume=true", "--set", "driver.mountTimeout=90s", "--set", "exports.main.server="+nodeIP)
	c.stage(fmt.Sprintf("helm upgrade returned after %.1fs", time.Since(began).Seconds()))
	if !strings.Contains(out, "REVISION: 2") {
		c.t.Fatalf("helm upgrade:\n%s", out)
	}
	c.waitFor("upgraded pods carry the new mount timeout", 5*time.Minute, func() (bool, error) {
		ps := c.pods(driverNS, "app.kubernetes.io/name=nfsdir")
		for _, p := range ps {
			if ctr := containerNamed(&p, "nfsdir"); p.DeletionTimestamp != nil || ctr == nil || !strings.Contains(strings.Join(ctr.Args, " "), "90s") {
				return false, fmt.Errorf("%s", c.podSummary(ps))
			}
		}
		return len(ps) == 2, fmt.Errorf("%s", c.podSummary(ps))
	})
	c.driverRunning("upgraded driver running")
	d, err := c.kube.StorageV1().CSIDrivers().Get(ctx, driverName, metav1GetOptions)
	if err != nil || !slices.Contains(d.Spec.VolumeLifecycleModes, "Ephemeral") {
		c.t.Fatalf("CSIDriver after the upgrade: %v %v", d, err)
	}
	c.writerProgresses("writer still writes after the upgrade")
	c.freshClaim("after-upgrade")

	// The example inline pod reads the static directory.
	os.MkdirAll(filepath.Join(serverDir, "existing-data"), 0o755)
	c.create(c.example("inline-pod.yaml"))
	c.podReaches("default", "inline-reader", corev1.PodRunning, 5*time.Minute)
	c.waitFor("inline pod listed the directory", time.Minute, func() (bool, error) {
		l := c.logsOf("default", "inline-reader", "reader")
		return strings.Contains(l, "hello"), fmt.Errorf("log %q", l)
	})
	zero := int64(0)
	c.kube.CoreV1().Pods("default").Delete(ctx, "inline-reader", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	c.waitFor("inline pod gone, its mount released", 2*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods("default").Get(ctx, "inline-reader", metav1GetOptions)
		return apierrors.IsNotFound(err) && len(mounts("existing-data")) == 0, err
	})
	if _, err := os.Stat(filepath.Join(serverDir, "existing-data", "hello")); err != nil {
		c.t.Errorf("the inline volume's directory lost its data: %v", err)
	}
}

// httpGet GETs path from host:port, within 10 s, and returns at most
// 1 MiB of the body.
func httpGet(host string, port int, path string) (string, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s%s", net.JoinHostPort(host, fmt.Sprint(port)), path))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s", resp.Status)
	}
	return string(b), err
}

// driverMetrics: what the calls so far cost the server, as an operator's
// Prometheus scrapes it: the controller (on its pod's IP) counts the NFS
// operations of its own mounts of the share by mount and operation, and
// times its calls to the quota agent; the node plugin (on the node's IP)
// counts those of its read-only views of the share, through which it
// answered kubelet's NodeGetVolumeStats. The counts come from each pod's
// own /proc/self/mountstats, in its own mount namespace.
func (c *cluster) driverMetrics() {
	defer c.dumpDriverOnFailure()
	const controllerPort, nodePort = 29654, 29655 // the chart's defaults
	var body string
	for _, p := range c.pods(driverNS, "app.kubernetes.io/name=nfsdir,app.kubernetes.io/component=controller") {
		b, err := httpGet(p.Status.PodIP, controllerPort, "/metrics")
		if err != nil {
			c.t.Errorf("metrics of %s: %v", p.Name, err)
		}
		body += b
	}
	// Records are written through the main mount (SYMLINK), or through
	// the controller's own NFSv4.1 session (a COMPOUND each: volumes at
	// the top of a share mounted with NFS 4.1 or 4.2).
	if !strings.Contains(body, `nfsdir_nfs_operations_total{mount="main",op="SYMLINK",share="`) &&
		!strings.Contains(body, `nfsdir_nfs_operations_total{mount="session",op="COMPOUND",share="`) {
		c.t.Errorf("the controller's /metrics count no record written, through its mount (SYMLINK) or its session (COMPOUND)")
	}
	for _, want := range []string{
		`nfsdir_nfs_operation_rtt_seconds_total{mount="main",op="LOOKUP",share="`,
		`nfsdir_nfs_operations_total{mount="purge",op="`,
		`nfsdir_agent_calls_total{agent="`,
		`nfsdir_agent_call_duration_seconds_bucket{agent="`,
	} {
		if !strings.Contains(body, want) {
			c.t.Errorf("the controller's /metrics lack %s", want)
		}
	}
	c.waitFor("the node's NFS operations through its views of the share", 3*time.Minute, func() (bool, error) {
		b, err := httpGet(nodeIP, nodePort, "/metrics")
		return strings.Contains(b, `nfsdir_nfs_operations_total{mount="view",op="`), err
	})
	c.stage("NFS operations of the controller's and the node's own mounts, and the controller's calls to the quota agent, on /metrics")
}

// nodeHTTPOnThePodIP: the node pods (host network) serve /metrics and
// /healthz on the node's IP, where kubelet's liveness probe and a scraper
// reach them, and not on any other address of the node;
// no liveness probe of the driver's running pods failed.
func (c *cluster) nodeHTTPOnThePodIP() {
	get := httpGet
	const metricsPort, healthPort = 29655, 29653 // the chart's defaults
	if body, err := get(nodeIP, metricsPort, "/metrics"); err != nil || !strings.Contains(body, "nfsdir_csi_operations_total") {
		c.t.Errorf("metrics on the node's IP: %v\n%.300s", err, body)
	}
	if _, err := get(nodeIP, healthPort, "/healthz"); err != nil {
		c.t.Errorf("liveness endpoint on the node's IP: %v", err)
	}
	for _, port := range []int{metricsPort, healthPort} {
		if _, err := get("127.0.0.1", port, "/"); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			c.t.Errorf("port %d on the node's loopback: %v, want connection refused", port, err)
		}
	}
	// The driver's pods now (earlier ones were deleted on purpose by the
	// steps above, which cancels their probes in flight), and whether each
	// has started all its containers.
	current := map[string]bool{}
	for _, p := range c.pods(driverNS, "app.kubernetes.io/name=nfsdir") {
		current[p.Name] = allStarted(p)
	}
	events, err := c.kube.CoreV1().Events(driverNS).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Unhealthy"})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, e := range events.Items {
		started, isCurrent := current[e.InvolvedObject.Name]
		if isCurrent && !(started && expectedWhileStarting(e.Message)) {
			c.t.Errorf("%s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	c.stage("node metrics and health served on " + nodeIP + " only")
}

// claimWith is a 1Gi claim of the example StorageClass, from dataSource
// when set (a YAML flow mapping), and a pod that runs script on it once.
func claimWith(name, dataSource, script string) string {
	ds := ""
	if dataSource != "" {
		ds = ", dataSource: " + dataSource
	}
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s, namespace: default}
spec: {accessModes: [ReadWriteMany], storageClassName: nfsdir, resources: {requests: {storage: 1Gi}}%[2]s}
---
`, name, ds) + podOn(name+"-pod", name, script)
}

// podOn is a pod that runs script once with claim at /data.
func podOn(pod, claim, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default}
spec:
  restartPolicy: Never
  containers:
    - name: w
      image: lab.local/busybox:lab
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", %q]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, persistentVolumeClaim: {claimName: %s}}]
`, pod, script, claim)
}

// snapshotRestoreAndClone: a pod writes a claim; a VolumeSnapshot of it
// (the chart's csi-snapshotter and VolumeSnapshotClass, the cluster's
// snapshot-controller) becomes ready with its copy on the share; the data
// changes; a claim restored from the snapshot has the old data, a claim
// cloned from the claim the new, each read by a pod through its own mount;
// deleting the VolumeSnapshot (deletionPolicy Delete) removes its content
// and its copy from the share.
func (c *cluster) snapshotRestoreAndClone() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	c.create(claimWith("snap-src", "", "mkdir -p /data/dir && echo v1 > /data/dir/file && ln -s dir/file /data/link && sync"))
	c.podReaches("default", "snap-src-pod", corev1.PodSucceeded, 5*time.Minute)
	snaps := c.dyn.Resource(resources["VolumeSnapshot"]).Namespace("default")
	vsc := c.readySnapshot("snap-src-1", "snap-src")
	content := vsc.GetName()
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	f := strings.Split(handle, "|")
	if len(f) != 5 || f[0] != "s1" {
		c.t.Fatalf("snapshot handle %q is not an nfsdir snapshot ID", handle)
	}
	copyDir := filepath.Join(serverDir, ".nfsdir", "snapshots", f[3])
	if b, err := os.ReadFile(filepath.Join(copyDir, "dir", "file")); err != nil || string(b) != "v1\n" {
		c.t.Fatalf("the snapshot's copy on the share holds %q, %v", b, err)
	}
	c.stage("VolumeSnapshot snap-src-1 ready, its copy on the share")

	c.create(podOn("snap-src-change", "snap-src", "echo v2 > /data/dir/file && sync"))
	c.podReaches("default", "snap-src-change", corev1.PodSucceeded, 5*time.Minute)
	c.create(claimWith("snap-restored", "{apiGroup: snapshot.storage.k8s.io, kind: VolumeSnapshot, name: snap-src-1}",
		"test \"$(cat /data/dir/file)\" = v1 && test \"$(readlink /data/link)\" = dir/file"))
	c.create(claimWith("snap-clone", "{kind: PersistentVolumeClaim, name: snap-src}", "test \"$(cat /data/dir/file)\" = v2"))
	c.podReaches("default", "snap-restored-pod", corev1.PodSucceeded, 5*time.Minute)
	c.podReaches("default", "snap-clone-pod", corev1.PodSucceeded, 5*time.Minute)
	for claim, want := range map[string]string{"snap-restored": "v1\n", "snap-clone": "v2\n"} {
		if b, err := os.ReadFile(filepath.Join(serverDir, "default", claim, "dir", "file")); err != nil || string(b) != want {
			c.t.Errorf("%s on the server holds %q, %v; want %q", claim, b, err, want)
		}
	}
	c.stage("claims restored from the snapshot (old data) and cloned from the claim (new data)")

	if err := snaps.Delete(ctx, "snap-src-1", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("VolumeSnapshotContent and the copy gone", 3*time.Minute, func() (bool, error) {
		_, err := c.dyn.Resource(resources["VolumeSnapshotContent"]).Get(ctx, content, metav1GetOptions)
		_, serr := os.Lstat(copyDir)
		return apierrors.IsNotFound(err) && os.IsNotExist(serr), fmt.Errorf("content: %v, copy: %v", err, serr)
	}, "snapshot-controller")
	for _, claim := range []string{"snap-src", "snap-restored", "snap-clone"} {
		c.kube.CoreV1().Pods("default").Delete(ctx, claim+"-pod", metav1.DeleteOptions{})
	}
	c.kube.CoreV1().Pods("default").Delete(ctx, "snap-src-change", metav1.DeleteOptions{})
	c.stage("VolumeSnapshot deleted: its content and its copy on the share are gone")
}

// migrateFromNFSSubdir: two claims of nfs-subdir-external-provisioner
// (objects and directories as it makes them) are moved to nfsdir by
// `nfsdir migrate` while a pod appends to one of them through kubelet's
// in-tree NFS mount: no write fails, no line is lost, the claims keep
// their names and UIDs, a new pod mounts the nfsdir PV and sees the data;
// --rollback brings the second PV back; deleting the migrated claim
// follows nfs-subdir's archiveOnDelete (archived by nfsdir).
func (c *cluster) migrateFromNFSSubdir() {
	ctx := context.Background()
	for _, d := range []string{"default-legacy-a-pvc-subdir-a", "default-legacy-b-pvc-subdir-b"} {
		dir := filepath.Join(serverDir, d)
		if err := os.MkdirAll(dir, 0o777); err != nil {
			c.t.Fatal(err)
		}
		os.Chmod(dir, 0o777) // as nfs-subdir-external-provisioner leaves it
		os.WriteFile(filepath.Join(dir, "old"), []byte("before-migration\n"), 0o644)
	}
	c.create(c.testdata("nfs-subdir.yaml"))
	uids := map[string]types.UID{}
	for _, claim := range []string{"legacy-a", "legacy-b"} {
		c.waitFor("claim "+claim+" Bound", 2*time.Minute, func() (bool, error) {
			pvc, err := c.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1GetOptions)
			if err != nil {
				return false, err
			}
			uids[claim] = pvc.UID
			return pvc.Status.Phase == corev1.ClaimBound, fmt.Errorf("phase %s", pvc.Status.Phase)
		})
	}
	c.create(c.testdata("legacy-pods.yaml"))
	c.podRunning("default", "legacy-writer", 3*time.Minute)
	log := filepath.Join(serverDir, "default-legacy-a-pvc-subdir-a", "writer.log")
	c.linesGrow("legacy writer writes", "legacy-writer", log, 10)

	plan := c.migrate("--from=nfs-subdir-external-provisioner")
	for _, want := range []string{"pvc-subdir-a", "pvc-subdir-b", "adopt, replace the PV", "pvc-subdir-released",
		"refused: it is not bound", "2 to adopt and replace", "Nothing changed"} {
		if !strings.Contains(plan, want) {
			c.t.Errorf("plan lacks %q:\n%s", want, plan)
		}
	}
	if pv, _ := c.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-subdir-a", metav1GetOptions); pv == nil || pv.Spec.NFS == nil {
		c.t.Fatalf("printing the plan changed the PV: %+v", pv)
	}
	began := time.Now()
	out := c.migrate("--from=nfs-subdir-external-provisioner", "--apply")
	c.stage(fmt.Sprintf("nfsdir migrate --apply took %.1fs", time.Since(began).Seconds()))
	if !strings.Contains(out, "2 PVs migrated, 0 failed") {
		c.t.Fatalf("migrate --apply:\n%s", out)
	}
	for _, claim := range []string{"legacy-a", "legacy-b"} {
		pv := c.boundPV("default", claim)
		pvc, _ := c.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, claim, metav1GetOptions)
		if pvc.UID != uids[claim] || pv.Spec.NFS != nil || pv.Spec.ClaimRef.UID != uids[claim] || pv.Spec.StorageClassName != "nfs-client" {
			c.t.Errorf("%s after the migration: claim UID %s (was %s), PV %+v", claim, pvc.UID, uids[claim], pv.Spec)
		}
		// The adopted directory's record names its claim and the
		// cluster, as reuseDirectory needs after a rebuild.
		ks, _ := c.kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1GetOptions)
		if rec, err := recordOnServer(pv.Spec.CSI.VolumeHandle); err != nil || ks == nil || !strings.Contains(rec, `"claim":"default/`+claim+`"`) || !strings.Contains(rec, `"cluster":"`+string(ks.UID)+`"`) {
			c.t.Errorf("record of migrated %s: %s, %v; want claim default/%s and the cluster", claim, rec, err, claim)
		}
	}
	c.linesGrow("legacy writer still writes after the migration", "legacy-writer", log, 10)
	if again := c.migrate("--from=nfs-subdir-external-provisioner", "--apply"); !strings.Contains(again, "2 migrated already") || !strings.Contains(again, "0 PVs migrated, 0 failed") {
		c.t.Errorf("second --apply:\n%s", again)
	}
	// The writer stops; every line it wrote is there, in order.
	if err := c.kube.CoreV1().Pods("default").Delete(ctx, "legacy-writer", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("legacy writer gone", 2*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods("default").Get(ctx, "legacy-writer", metav1GetOptions)
		return apierrors.IsNotFound(err), err
	})
	b, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			c.t.Fatalf("writer.log line %d is %q: a write was lost or failed (%d lines)", i+1, l, len(lines))
		}
	}
	c.stage(fmt.Sprintf("the writer wrote %d lines through the migration, none lost", len(lines)))
	// A new pod mounts the nfsdir PV and sees the same data.
	c.create(strings.NewReplacer("NAME", "migrated-reader", "CLAIM", "legacy-a").Replace(c.testdata("legacy-reader.yaml")))
	c.podReaches("default", "migrated-reader", corev1.PodSucceeded, 5*time.Minute)
	dir := filepath.Join(serverDir, "default-legacy-a-pvc-subdir-a")
	if seen, err := os.ReadFile(filepath.Join(dir, "seen-by-migrated-reader")); err != nil || strings.TrimSpace(string(seen)) != lines[len(lines)-1] {
		c.t.Errorf("the new pod saw last line %q, the writer wrote %q (%v)", seen, lines[len(lines)-1], err)
	}
	// --rollback alone says what it would restore and changes nothing.
	out = c.migrate("--from=nfs-subdir-external-provisioner", "--rollback", "--pv=pvc-subdir-b")
	if !strings.Contains(out, "would restore the saved PV (NFS ") || !strings.Contains(out, "1 PVs can be rolled back, 0 failed") {
		c.t.Fatalf("migrate --rollback without --apply:\n%s", out)
	}
	if pvb, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-subdir-b", metav1GetOptions); err != nil || pvb.Spec.CSI == nil {
		c.t.Fatalf("the dry run changed the PV: %+v, %v", pvb, err)
	}
	// --rollback --apply of the second PV: the saved nfs-subdir PV is back.
	out = c.migrate("--from=nfs-subdir-external-provisioner", "--rollback", "--apply", "--pv=pvc-subdir-b")
	if !strings.Contains(out, "1 PVs rolled back, 0 failed") {
		c.t.Fatalf("migrate --rollback:\n%s", out)
	}
	pvb, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-subdir-b", metav1GetOptions)
	if err != nil || pvb.Spec.NFS == nil || pvb.Spec.NFS.Path != "/default-legacy-b-pvc-subdir-b" || pvb.Spec.ClaimRef.UID != uids["legacy-b"] {
		c.t.Fatalf("rolled back PV: %+v, %v", pvb, err)
	}
	c.create(strings.NewReplacer("NAME", "rolled-back-reader", "CLAIM", "legacy-b").Replace(c.testdata("legacy-reader.yaml")))
	c.podReaches("default", "rolled-back-reader", corev1.PodSucceeded, 5*time.Minute)
	if a, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-subdir-a", metav1GetOptions); err != nil || a.Spec.CSI == nil {
		c.t.Errorf("the rollback of pvc-subdir-b touched pvc-subdir-a: %+v, %v", a, err)
	}
	// Deleting the migrated claim follows archiveOnDelete: archived.
	for _, p := range []string{"migrated-reader", "rolled-back-reader"} {
		c.kube.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{})
	}
	if err := c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "legacy-a", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("migrated PV deleted", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-subdir-a", metav1GetOptions)
		return apierrors.IsNotFound(err), err
	}, "kubelet")
	archived := filepath.Join(serverDir, "archived-default-legacy-a-pvc-subdir-a")
	if b, err := os.ReadFile(filepath.Join(archived, "old")); err != nil || string(b) != "before-migration\n" {
		entries, _ := os.ReadDir(serverDir)
		c.t.Errorf("migrated claim deleted: %s/old = %q, %v (share holds %v)", archived, b, err, entries)
	}
	if _, err := os.Stat(dir); err == nil {
		c.t.Errorf("%s still in place after its archive", dir)
	}
}

// migrate runs `nfsdir migrate` on the node with the admin's kubeconfig
// and returns its output.
func (c *cluster) migrate(args ...string) string {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, "nfsdir"), append([]string{"migrate", "--kubeconfig=" + c.admin,
		"--state-dir=/var/lib/nfsdir-migrate"}, args...)...)
	out, err := cmd.CombinedOutput()
	c.t.Logf("nfsdir migrate %s:\n%s", strings.Join(args, " "), out)
	if err != nil {
		c.t.Fatalf("nfsdir migrate %v: %v", args, err)
	}
	return string(out)
}

// linesGrow checks that pod runs without restarts and file grows by n lines.
func (c *cluster) linesGrow(what, pod, file string, n int) {
	c.t.Helper()
	lines := func() int { b, _ := os.ReadFile(file); return strings.Count(string(b), "\n") }
	from := lines()
	c.waitFor(what, 2*time.Minute, func() (bool, error) {
		p, err := c.kube.CoreV1().Pods("default").Get(context.Background(), pod, metav1GetOptions)
		if err != nil {
			return false, err
		}
		if p.Status.Phase != corev1.PodRunning {
			c.t.Fatalf("%s stopped:\n%s", pod, c.describePod(p))
		}
		got := lines()
		return got >= from+n, fmt.Errorf("%d lines, from %d", got, from)
	})
}

// claimMetadataTemplates: a StorageClass whose subDir uses a claim label
// (csi-driver-nfs's syntax) and an annotation (nfs-subdir's): the claim's
// directory is where they say; a claim without the label stays Pending
// with an event that names it.
func (c *cluster) claimMetadataTemplates() {
	ctx := context.Background()
	c.create(c.testdata("claim-metadata.yaml"))
	c.boundPV("default", "labelled")
	if st, err := os.Stat(filepath.Join(serverDir, "blue", "data-1")); err != nil || !st.IsDir() {
		c.t.Errorf("the labelled claim's directory blue/data-1: %v", err)
	}
	c.eventSays("default", "unlabelled", `has no label "team"`)
	if pvc, _ := c.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "unlabelled", metav1GetOptions); pvc == nil || pvc.Status.Phase != corev1.ClaimPending {
		c.t.Errorf("the unlabelled claim: %+v", pvc)
	}
	for _, claim := range []string{"labelled", "unlabelled"} {
		c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim, metav1.DeleteOptions{})
	}
}

// dropInForCSIDriverNFS: nfsdir installed under csi-driver-nfs's driver
// name (a second release, csi-driver-nfs itself gone): a csi-driver-nfs PV
// keeps working unchanged and a pod reads its data; a new claim of the
// same class gets an nfsdir volume; `nfsdir migrate --from csi-driver-nfs
// --apply` keeps the PV and adopts its directory; deleting the old claim
// then follows the handle's onDelete (delete) instead of being refused.
func (c *cluster) dropInForCSIDriverNFS() {
	ctx := context.Background()
	const legacyDriver = "nfs.csi.k8s.io"
	args := append([]string{"install", "dropin", filepath.Join(c.bin, "chart", "nfsdir"), "--namespace", driverNS}, labImageValues()...)
	// Only what the scenario uses: no snapshotter, no resizer.
	args = append(args, "--set", "driver.name="+legacyDriver, "--set", "node.healthPort=29663", "--set", "node.metricsPort=29665",
		"--set", "feature.enableSnapshotter=false", "--set", "feature.enableResizer=false", "--set", "volumeSnapshotClasses=null")
	if out := c.helm(args...); !strings.Contains(out, "STATUS: deployed") {
		c.t.Fatalf("helm install of the drop-in release:\n%s", out)
	}
	defer func() {
		c.helm("uninstall", "dropin", "--namespace", driverNS, "--wait", "--timeout", "3m")
	}()
	c.podsReady("drop-in controller", driverNS, "app.kubernetes.io/instance=dropin,app.kubernetes.io/component=controller", 1, 5*time.Minute)
	c.podsReady("drop-in node plugin", driverNS, "app.kubernetes.io/instance=dropin,app.kubernetes.io/component=node", 1, 5*time.Minute)
	c.waitFor("CSINode lists "+legacyDriver, 3*time.Minute, func() (bool, error) {
		n, err := c.kube.StorageV1().CSINodes().Get(ctx, nodeName, metav1GetOptions)
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(n.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == legacyDriver }), nil
	}, "kubelet")

	dir := filepath.Join(serverDir, "pvc-csi-old")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		c.t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "old"), []byte("before-migration\n"), 0o644)
	c.create(c.testdata("csi-driver-nfs.yaml"))
	c.create(strings.NewReplacer("NAME", "csi-old-reader", "CLAIM", "csi-old").Replace(c.testdata("legacy-reader.yaml")))
	c.podReaches("default", "csi-old-reader", corev1.PodSucceeded, 5*time.Minute)
	var fresh *corev1.PersistentVolume
	c.waitFor("claim csi-new Bound", 3*time.Minute, func() (bool, error) {
		pvc, err := c.kube.CoreV1().PersistentVolumeClaims("default").Get(ctx, "csi-new", metav1GetOptions)
		if err != nil || pvc.Status.Phase != corev1.ClaimBound {
			return false, err
		}
		fresh, err = c.kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1GetOptions)
		return err == nil, err
	}, "kubelet")
	if fresh.Spec.CSI == nil || fresh.Spec.CSI.Driver != legacyDriver || !strings.HasPrefix(fresh.Spec.CSI.VolumeHandle, "n1|") {
		c.t.Errorf("the new claim's volume is not nfsdir's: %+v", fresh.Spec.PersistentVolumeSource)
	}
	plan := c.migrate("--from=csi-driver-nfs", "--driver-name="+legacyDriver)
	if !strings.Contains(plan, "pvc-csi-old") || !strings.Contains(plan, "adopt, keep the PV") || strings.Contains(plan, fresh.Name) {
		c.t.Errorf("drop-in plan:\n%s", plan)
	}
	if out := c.migrate("--from=csi-driver-nfs", "--driver-name="+legacyDriver, "--apply"); !strings.Contains(out, "1 PVs migrated, 0 failed") {
		c.t.Fatalf("drop-in migrate --apply:\n%s", out)
	}
	pv, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, "pvc-csi-old", metav1GetOptions)
	if err != nil || pv.Spec.CSI.VolumeHandle != "192.0.2.10##pvc-csi-old#pvc-csi-old#delete" ||
		pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || pv.Annotations["nfsdir.csi.io/migrated-from"] != "csi-driver-nfs" {
		c.t.Fatalf("kept PV: %+v, %v", pv, err)
	}
	c.kube.CoreV1().Pods("default").Delete(ctx, "csi-old-reader", metav1.DeleteOptions{})
	for _, claim := range []string{"csi-old", "csi-new"} {
		if err := c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, claim, metav1.DeleteOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	for _, name := range []string{"pvc-csi-old", fresh.Name} {
		c.waitFor("PV "+name+" deleted", 3*time.Minute, func() (bool, error) {
			_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, name, metav1GetOptions)
			return apierrors.IsNotFound(err), err
		}, "kubelet")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		c.t.Errorf("the adopted csi-driver-nfs directory after its claim's deletion (onDelete delete): %v", err)
	}
}

// hardQuota: a class naming the quota agent in the NFS server pod; a
// 64Mi claim: the pod's df shows 64 MiB and writing 65 MiB fails with "No
// space left on device"; the agent's audit log shows the project it gave
// the directory and its 64 MiB limit; after the claim is resized to 128Mi
// the limit follows and the 65 MiB fit; deleting the claim clears the
// project.
func (c *cluster) hardQuota() {
	ctx := context.Background()
	c.create(c.testdata("quota.yaml"))
	pv := c.boundPV("default", "limited")
	sub := pv.Spec.CSI.VolumeAttributes["subDir"]
	c.create(strings.NewReplacer("NAME", "quota-writer-1").Replace(c.testdata("quota-writer.yaml")))
	c.podReaches("default", "quota-writer-1", corev1.PodFailed, 5*time.Minute)
	c.logSays("quota-writer-1", "df 65536", "No space left on device")
	audit := func(want string) {
		c.t.Helper()
		c.waitFor("the agent's audit log: "+want, 3*time.Minute, func() (bool, error) {
			b, err := os.ReadFile(filepath.Join(serverDir, "quota-audit.log"))
			for _, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, `"subDir":"`+sub+`"`) && strings.Contains(line, want) && !strings.Contains(line, `"error"`) {
					c.stage("audit: " + line)
					return true, nil
				}
			}
			return false, err
		}, "kubelet")
	}
	audit(`"bytes":67108864`)
	// Resize; the limit follows.
	patch := []byte(`{"spec":{"resources":{"requests":{"storage":"128Mi"}}}}`)
	if _, err := c.kube.CoreV1().PersistentVolumeClaims("default").Patch(ctx, "limited", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	audit(`"bytes":134217728`)
	c.create(strings.NewReplacer("NAME", "quota-writer-2").Replace(c.testdata("quota-writer.yaml")))
	c.podReaches("default", "quota-writer-2", corev1.PodSucceeded, 5*time.Minute)
	c.logSays("quota-writer-2", "df 131072", "65+0 records out")
	for _, p := range []string{"quota-writer-1", "quota-writer-2"} {
		c.kube.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{})
	}
	if err := c.kube.CoreV1().PersistentVolumeClaims("default").Delete(ctx, "limited", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("the quota's PV deleted", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1GetOptions)
		return apierrors.IsNotFound(err), err
	}, "kubelet")
	audit(`"op":"clear"`)
}

// logSays waits until the log of pod's container "writer" holds every
// one of want (a finished pod's log reaches the API a moment later).
func (c *cluster) logSays(pod string, want ...string) {
	c.t.Helper()
	c.waitFor(pod+" says "+strings.Join(want, ", "), time.Minute, func() (bool, error) {
		l := c.logsOf("default", pod, "writer")
		for _, w := range want {
			if !strings.Contains(l, w) {
				return false, fmt.Errorf("log %q", l)
			}
		}
		return true, nil
	})
}
