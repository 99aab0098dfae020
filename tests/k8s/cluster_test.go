package k8s

import (
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Addresses of the lab cluster. The guest has no network device, so the
// node's address lives on a dummy interface, from documentation ranges:
// nothing can leave the guest.
const (
	nodeName = "lab-node"
	nodeIP   = "192.0.2.10"
	// apiServiceIP is the ClusterIP of the "kubernetes" Service (the first
	// address of the service range). There is no kube-proxy; the node owns
	// this address and the API server (or, with the control plane on the
	// host, a relay to it) listens on 443, so pods on the pod network
	// reach the API server through the Service address their in-cluster
	// config names.
	apiServiceIP = "198.51.100.1"
	serviceRange = "198.51.100.0/25"
	podRange     = "203.0.113.0/24"
	// kubeletDir is the kubelet's default root directory, the chart's
	// default kubeletDir.
	kubeletDir = "/var/lib/kubelet"
)

// cluster is a single-node Kubernetes cluster running in the lab guest:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd
// with its CRI plugin and the CNI bridge, and the kubelet.
type cluster struct {
	t     *testing.T
	bin   string // binaries, images and chart from the payload
	dir   string // state and logs
	start time.Time
	logs  map[string]string // process name → log file
	pids  map[string]int    // process name → its process ID
	admin string            // admin kubeconfig
	kube  *kubernetes.Clientset
	dyn   *dynamic.DynamicClient // for objects from manifests
	pki   *labPKI
	nodes []labNode // every node of the cluster; this guest's first
}

func sh(t *testing.T, script string) {
	t.Helper()
	if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// labNode is one machine of the lab cluster: its node name, its address
// and the pod addresses its CNI bridge hands out.
type labNode struct{ name, ip, podRange string }

var (
	// soloNode is the one node of a single-node run.
	soloNode = labNode{nodeName, nodeIP, podRange}
	// In a two-node run (make e2e-multinode) the first guest keeps the
	// control plane and its node; the second is a worker. They share
	// 192.0.2.0/24 on their eth0 and split the pod range.
	firstNode  = labNode{nodeName, nodeIP, "203.0.113.0/25"}
	secondNode = labNode{"lab-node-2", "192.0.2.11", "203.0.113.128/25"}
)

// newCluster returns the cluster's local state in the guest.
func newCluster(t *testing.T) *cluster {
	// Not a t.TempDir: the kubelet leaves mounts below its directories, and
	// the guest is thrown away after the run anyway.
	c := &cluster{t: t, bin: "/work/bin", dir: "/var/lib/nfsdir-e2e", start: time.Now(), logs: map[string]string{}}
	if err := os.MkdirAll(c.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// prepareNode readies this guest to be node n: modules, its address (on
// a dummy interface alone; on eth0 with a route to the other node's pods
// when there is one), cgroups, forwarding and the kubelet's directory.
func (c *cluster) prepareNode(n labNode, other *labNode) {
	t := c.t
	// runc re-executes itself for the container init without our
	// environment: its libseccomp must be where the loader looks.
	if b, err := os.ReadFile(filepath.Join(c.bin, "lib", "libseccomp.so.2")); err == nil {
		os.WriteFile("/lib/x86_64-linux-gnu/libseccomp.so.2", b, 0o644)
	}
	sh(t, "for m in overlay bridge veth br_netfilter dummy; do modprobe $m; done")
	switch {
	case other == nil:
		sh(t, "ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy; ip addr add "+n.ip+"/24 dev dummy0 && "+
			"ip addr add "+apiServiceIP+"/32 dev dummy0 && ip link set dummy0 up && ip route add default dev dummy0")
	case n.ip == nodeIP: // the control plane's node owns the API's Service address
		sh(t, "ip link set eth0 up && ip addr add "+n.ip+"/24 dev eth0 && ip route add "+other.podRange+" via "+other.ip+" && "+
			"{ ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy; } && ip addr add "+apiServiceIP+"/32 dev dummy0 && ip link set dummy0 up && ip route add default dev dummy0")
	default:
		sh(t, "ip link set eth0 up && ip addr add "+n.ip+"/24 dev eth0 && ip route add "+other.podRange+" via "+other.ip+" && "+
			"ip route add default via "+other.ip)
	}
	sh(t, "mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup && echo '+cpuset +cpu +io +memory +pids' > /sys/fs/cgroup/cgroup.subtree_control")
	sh(t, "echo 1 > /proc/sys/net/ipv4/ip_forward; echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables || true")
	// NFSv3 locks go through the kernel's lockd, which needs rpcbind and
	// rpc.statd on the node, as nfs-common's rpc-statd gives a real node
	// (mount.nfs refuses an NFSv3 mount with locks without them). On the
	// node of the NFS server pod, the pod's own (in the host network)
	// serve the node too.
	if n.ip != nodeIP {
		sh(t, "mkdir -p /run/rpcbind /var/lib/nfs/sm /var/lib/nfs/sm.bak && chown statd /var/lib/nfs/sm /var/lib/nfs/sm.bak /var/lib/nfs && "+
			"rpcbind -w && rpc.statd --no-notify")
	}
	// The kubelet's directory: a tmpfs, but on a worker that has a disk of
	// its own (run.sh's peer disk, kept across a power cut) an ext4 file
	// system there, so that a worker turned off and on again finds what its
	// kubelet and node plugin left (pod directories, the plugin's claims
	// file), as a real machine does. Its dirty data goes to the disk within
	// about 3 s (the kernel's default is 30 s): what it wrote before the
	// power-off is on the disk.
	fs := "mount -t tmpfs kubelet " + kubeletDir
	if os.Getenv("NFSDIR_LAB_ROLE") == "peer" && exists(workerDisk) {
		mnt := "mount -t ext4 " + workerDisk + " " + kubeletDir
		fs = "modprobe ext4 2>/dev/null; { " + mnt + " 2>/dev/null || { /sbin/mke2fs -q -t ext4 " + workerDisk + " && " + mnt + "; }; }" +
			" && echo 200 > /proc/sys/vm/dirty_expire_centisecs && echo 100 > /proc/sys/vm/dirty_writeback_centisecs"
	}
	// The node plugin's mounts reach the kubelet and the workload pods
	// through Bidirectional propagation, which needs a shared mount.
	sh(t, "mkdir -p "+kubeletDir+" && "+fs+" && mount --make-rshared "+kubeletDir)
}

// workerDisk is the worker guest's own disk (run.sh's peer disk).
const workerDisk = "/dev/vdc"

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// startCluster brings the single-node cluster up in the lab guest and
// returns once the node is Ready and the default namespace has its
// service account.
func startCluster(t *testing.T) *cluster { return startClusterOn(t, soloNode, nil) }

// startClusterOn brings node n up in this guest, joined to the control
// plane on the host (NFSDIR_E2E_PLANE names its credentials, see
// hostplane_test.go). With a worker, the worker's
// credentials are served to it (serveWorker) while the control plane starts.
func startClusterOn(t *testing.T, n labNode, worker *labNode) *cluster {
	c := newCluster(t)
	c.prepareNode(n, worker)
	c.nodes = []labNode{n}
	if worker != nil {
		c.nodes = append(c.nodes, *worker)
	}

	dir := os.Getenv("NFSDIR_E2E_PLANE")
	if dir == "" {
		t.Fatal("the control plane runs on the host: make e2e (TestHostPlane)")
	}
	kubelet := c.joinHostPlane(dir)
	c.startContainerd(n.podRange)
	c.startKubelet(kubelet, n)
	c.waitFor("default service account", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().ServiceAccounts("default").Get(context.Background(), "default", metav1GetOptions)
		return err == nil, err
	}, "kube-controller-manager")
	return c
}

// planePorts are where a control plane listens, on 127.0.0.1 only:
// etcd's client and peer ports, the API server's, the controller-manager's
// and the scheduler's secure ports, with the API server's flags that
// differ between the guest and the host. Every port is the run's own, so
// that two clusters run side by side.
type planePorts struct {
	etcd, etcdPeer, api, controllers, scheduler int
	apiFlags                                    []string
}

// startControlPlane runs etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler with the PKI's credentials (their kubeconfigs name the API
// server at server when it is not empty) and waits for the API server.
func (c *cluster) startControlPlane(ports planePorts, server string) {
	t := c.t
	pki := c.pki
	// The API server's client certificate for the kubelet (logs, exec).
	pki.issue(t, "kubelet-client", &x509.Certificate{Subject: pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	cm := pki.kubeconfig(t, "controller-manager", "system:kube-controller-manager", "")
	sched := pki.kubeconfig(t, "scheduler", "system:kube-scheduler", "")
	if server != "" {
		retarget(t, cm, server)
		retarget(t, sched, server)
	}
	p := func(n string) string { return filepath.Join(pki.dir, n) }
	etcd := fmt.Sprintf("http://127.0.0.1:%d", ports.etcd)
	c.run("etcd", nil, "--data-dir="+filepath.Join(c.dir, "etcd"), "--listen-client-urls="+etcd,
		"--advertise-client-urls="+etcd, fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", ports.etcdPeer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", ports.etcdPeer),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", ports.etcdPeer), "--unsafe-no-fsync")
	c.run("kube-apiserver", nil, append([]string{"--etcd-servers=" + etcd, "--advertise-address=" + nodeIP,
		fmt.Sprintf("--secure-port=%d", ports.api), "--service-cluster-ip-range=" + serviceRange, "--allow-privileged=true",
		"--tls-cert-file=" + p("apiserver.crt"), "--tls-private-key-file=" + p("apiserver.key"), "--client-ca-file=" + p("ca.crt"),
		"--kubelet-client-certificate=" + p("kubelet-client.crt"), "--kubelet-client-key=" + p("kubelet-client.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"), "--authorization-mode=Node,RBAC",
		"--kubelet-preferred-address-types=InternalIP",
		// The pinned csi-provisioner v5.3.0 and csi-resizer v1.14.0
		// read VolumeAttributesClasses through storage.k8s.io/v1beta1,
		// which Kubernetes 1.34+ serves only when asked to.
		"--runtime-config=storage.k8s.io/v1beta1=true"}, ports.apiFlags...)...)
	c.waitFor("kube-apiserver /readyz", 5*time.Minute, c.apiReady, "kube-apiserver")
	c.run("kube-controller-manager", nil, "--kubeconfig="+cm, "--root-ca-file="+p("ca.crt"),
		"--service-account-private-key-file="+p("sa.key"), "--use-service-account-credentials", "--leader-elect=false",
		"--cluster-cidr="+podRange, "--service-cluster-ip-range="+serviceRange,
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports.controllers))
	c.run("kube-scheduler", nil, "--kubeconfig="+sched, "--leader-elect=false",
		"--bind-address=127.0.0.1", fmt.Sprintf("--secure-port=%d", ports.scheduler))
}

// connect makes the cluster's clients from the admin's kubeconfig.
func (c *cluster) connect() {
	cfg, err := clientcmd.BuildConfigFromFlags("", c.admin)
	if err != nil {
		c.t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		c.t.Fatal(err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		c.t.Fatal(err)
	}
}

// apiReady reports whether the API server answers /readyz.
func (c *cluster) apiReady() (bool, error) {
	_, err := c.kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
	return err == nil, err
}

// startKubelet runs the kubelet of node n with kubeconfig, and waits until
// n is Ready when this guest can ask (it has the admin's client).
func (c *cluster) startKubelet(kubeconfig string, n labNode) {
	p := func(f string) string { return filepath.Join(c.dir, f) }
	os.WriteFile(p("kubelet.yaml"), []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
runtimeRequestTimeout: 10m
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {}
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: `+p("ca.crt")+`}
authorization: {mode: AlwaysAllow}
clusterDNS: []
resolvConf: ""
`), 0o644)
	c.run("kubelet", nil, "--kubeconfig="+kubeconfig, "--config="+p("kubelet.yaml"), "--node-ip="+n.ip,
		"--hostname-override="+n.name, "--root-dir="+kubeletDir)
	if c.kube != nil {
		c.nodeReady(n.name, 6*time.Minute)
	}
}

// nodeReady waits until the node's Ready condition is True.
func (c *cluster) nodeReady(name string, limit time.Duration) {
	c.waitFor("node "+name+" Ready", limit, func() (bool, error) {
		n, err := c.kube.CoreV1().Nodes().Get(context.Background(), name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == "Ready" {
				return cond.Status == "True", fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return false, nil
	}, "kubelet")
}

// startSnapshotController applies the VolumeSnapshot CRDs of the payload
// (external-snapshotter's config/crd) and runs its snapshot-controller, as
// a cluster that offers snapshots does; a payload without them has none.
// The controller runs as a process with the admin's credentials, standing
// in for the Deployment and RBAC a cluster installs it with.
func (c *cluster) startSnapshotController() {
	files, _ := filepath.Glob(filepath.Join(c.bin, "snapshot-crds", "*.yaml"))
	if len(files) == 0 {
		return
	}
	for _, f := range files {
		c.create(c.manifest(f))
	}
	c.waitFor("VolumeSnapshot CRDs served", 2*time.Minute, func() (bool, error) {
		_, err := c.dyn.Resource(resources["VolumeSnapshotClass"]).List(context.Background(), metav1.ListOptions{})
		return err == nil, err
	})
	c.run("snapshot-controller", nil, "--kubeconfig="+c.admin, "--leader-election=false")
	c.stage("VolumeSnapshot CRDs and snapshot-controller")
}

// startContainerd starts containerd with the CRI plugin and the CNI bridge
// (handing out pods addresses of pods) and imports every image tarball of
// the payload, or only those named (file names without .tar).
func (c *cluster) startContainerd(pods string, only ...string) {
	os.MkdirAll("/etc/cni/net.d", 0o755)
	os.WriteFile("/etc/cni/net.d/10-lab.conflist", []byte(`{"cniVersion":"0.4.0","name":"lab","plugins":[
  {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"`+pods+`"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
  {"type":"portmap","capabilities":{"portMappings":true}}]}`), 0o644)
	cfg := filepath.Join(c.dir, "containerd.toml")
	os.WriteFile(cfg, []byte(`version = 2
root = "`+c.dir+`/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "lab.local/pause:3.10"
  # The snapshots' disk usage, counted by walking every container's files:
  # every 10 minutes, not 10 s.
  stats_collect_period = 600
  [plugins."io.containerd.grpc.v1.cri".containerd]
    # containerd's default, as on real nodes: a container's root is an
    # overlay mount of its image's layers, not a copy of them.
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        NoPivotRoot = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "`+c.bin+`/cni"
    conf_dir = "/etc/cni/net.d"
`), 0o644)
	c.run("containerd", []string{"PATH=" + c.bin + ":" + os.Getenv("PATH")}, "--config", cfg)
	c.waitFor("containerd", time.Minute, func() (bool, error) { return c.ctrCmd("version").Run() == nil, nil }, "containerd")
	images, _ := filepath.Glob(filepath.Join(c.bin, "images", "*.tar"))
	if len(only) > 0 {
		images = slices.DeleteFunc(images, func(f string) bool { return !slices.Contains(only, strings.TrimSuffix(filepath.Base(f), ".tar")) })
	}
	// Two at a time: the guest has two vCPUs, and an import is mostly
	// one process unpacking layers.
	var wg sync.WaitGroup
	errs := make([]error, len(images))
	slots := make(chan struct{}, 2)
	for i, img := range images {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			if out, err := c.ctrCmd("-n", "k8s.io", "images", "import", "--snapshotter", "overlayfs", img).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("ctr import %s: %v\n%s", img, err, out)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.t.Fatal(err)
	}
	c.stage(fmt.Sprintf("%d images imported", len(images)))
}

func (c *cluster) ctrCmd(args ...string) *exec.Cmd {
	return exec.Command(filepath.Join(c.bin, "ctr"), append([]string{"--address", "/run/containerd/containerd.sock"}, args...)...)
}

// ctr runs containerd's ctr and fails the test when it fails.
func (c *cluster) ctr(args ...string) {
	c.t.Helper()
	if out, err := c.ctrCmd(args...).CombinedOutput(); err != nil {
		c.t.Fatalf("ctr %v: %v\n%s", args, err, out)
	}
}

// run starts a binary of the payload in the background with its output in
// <dir>/<name>.log; it is killed when the test ends.
func (c *cluster) run(name string, env []string, args ...string) {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	f, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.logs[name] = f.Name()
	if c.pids == nil {
		c.pids = map[string]int{}
	}
	c.pids[name] = cmd.Process.Pid
	c.t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); f.Close() })
}

// stage logs a milestone with the time since the cluster started.
func (c *cluster) stage(what string) {
	c.t.Logf("%6.1fs %s", time.Since(c.start).Seconds(), what)
}

// tail returns the end of a process's log.
func (c *cluster) tail(name string, n int) string {
	b, _ := os.ReadFile(c.logs[name])
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// waitFor polls ok every second until it reports true, and fails the test
// after limit with ok's last error and the tails of the named logs.
func (c *cluster) waitFor(what string, limit time.Duration, ok func() (bool, error), logsOf ...string) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, err := ok()
		if done {
			break
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, l := range logsOf {
				fmt.Fprintf(&b, "\n--- %s log:\n%s", l, c.tail(l, 4000))
			}
			c.t.Fatalf("%s not reached after %s (last: %v)%s", what, limit, err, b.String())
		}
		time.Sleep(time.Second)
	}
	c.stage(what)
}
