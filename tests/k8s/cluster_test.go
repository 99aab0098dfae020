package k8s

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func sh(t *testing.T, script string) {
	t.Helper()
	if out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}

// TestNodeBecomesReady runs in the lab guest (make e2e-node, after make
// k8s-bins and make lab-images): etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, containerd with its CRI plugin
// and the CNI bridge, and the kubelet; the node must report Ready, and a pod
// on the pod network must write to the lab's NFS export through a volume
// the kubelet mounts.
func TestNodeBecomesReady(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_NODE") != "1" {
		t.Skip("runs in the lab guest: make e2e-node")
	}
	bin := "/work/bin"
	// Not a t.TempDir: the kubelet leaves mounts below its root directory,
	// and the guest is thrown away after the run anyway.
	dir := "/var/lib/nfsdir-e2e"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stage := func(what string) { t.Logf("%5.1fs %s", time.Since(start).Seconds(), what) }
	if b, err := os.ReadFile(filepath.Join(bin, "lib", "libseccomp.so.2")); err == nil {
		os.WriteFile("/lib/x86_64-linux-gnu/libseccomp.so.2", b, 0o644)
	}
	sh(t, "for m in overlay bridge veth br_netfilter dummy; do modprobe $m; done")
	sh(t, "ip link show dummy0 >/dev/null 2>&1 || ip link add dummy0 type dummy; ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up && ip route add default dev dummy0")
	sh(t, "mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup && echo '+cpuset +cpu +io +memory +pids' > /sys/fs/cgroup/cgroup.subtree_control")
	sh(t, "echo 1 > /proc/sys/net/ipv4/ip_forward; echo 1 > /proc/sys/net/bridge/bridge-nf-call-iptables || true")
	pki := newPKI(t, dir)
	pki.kubeconfig(t, "admin", "lab-admin", "system:masters")
	cm := pki.kubeconfig(t, "controller-manager", "system:kube-controller-manager", "")
	sched := pki.kubeconfig(t, "scheduler", "system:kube-scheduler", "")
	kubelet := pki.kubeconfig(t, "kubelet", "system:node:lab-node", "system:nodes")
	stage("certificates")

	logf := func(name string) *os.File { f, _ := os.Create(filepath.Join(dir, name+".log")); return f }
	procs := map[string]string{}
	run := func(name string, env []string, args ...string) {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Env = append(os.Environ(), env...)
		f := logf(name)
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[name] = f.Name()
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	tail := func(name string) string {
		b, _ := os.ReadFile(procs[name])
		if len(b) > 3000 {
			b = b[len(b)-3000:]
		}
		return string(b)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	run("etcd", nil, "--data-dir="+p("etcd"), "--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379", "--listen-peer-urls=http://127.0.0.1:2380", "--unsafe-no-fsync")
	run("kube-apiserver", nil, "--etcd-servers=http://127.0.0.1:2379", "--advertise-address=192.0.2.10",
		"--secure-port=6443", "--service-cluster-ip-range=198.51.100.0/24",
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"), "--client-ca-file="+p("ca.crt"),
		"--kubelet-client-certificate="+p("apiserver.crt"), "--kubelet-client-key="+p("apiserver.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+p("sa.pub"),
		"--service-account-signing-key-file="+p("sa.key"), "--authorization-mode=Node,RBAC")
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(p("ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	adminCert, err := tls.LoadX509KeyPair(p("admin.crt"), p("admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{adminCert}}}}
	get := func(path string, into any) (int, error) {
		resp, err := client.Get("https://127.0.0.1:6443" + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		if into != nil {
			json.NewDecoder(resp.Body).Decode(into)
		}
		return resp.StatusCode, nil
	}
	waitFor := func(what string, limit time.Duration, ok func() bool, logsOf string) {
		deadline := time.Now().Add(limit)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s not reached after %s; %s log:\n%s", what, limit, logsOf, tail(logsOf))
			}
			time.Sleep(time.Second)
		}
		stage(what)
	}
	waitFor("kube-apiserver /readyz", 5*time.Minute, func() bool { c, _ := get("/readyz", nil); return c == 200 }, "kube-apiserver")
	run("kube-controller-manager", nil, "--kubeconfig="+cm, "--root-ca-file="+p("ca.crt"),
		"--service-account-private-key-file="+p("sa.key"), "--use-service-account-credentials", "--leader-elect=false",
		"--cluster-cidr=203.0.113.0/24", "--service-cluster-ip-range=198.51.100.0/24")
	run("kube-scheduler", nil, "--kubeconfig="+sched, "--leader-elect=false")

	// containerd with the CRI plugin and the CNI bridge.
	os.MkdirAll("/etc/cni/net.d", 0o755)
	os.WriteFile("/etc/cni/net.d/10-lab.conflist", []byte(`{"cniVersion":"0.4.0","name":"lab","plugins":[
  {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"203.0.113.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}},
  {"type":"portmap","capabilities":{"portMappings":true}}]}`), 0o644)
	os.WriteFile(p("containerd.toml"), []byte(`version = 2
root = "`+dir+`/containerd"
state = "/run/containerd"
[grpc]
  address = "/run/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "lab.local/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        NoPivotRoot = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "`+bin+`/cni"
    conf_dir = "/etc/cni/net.d"
`), 0o644)
	run("containerd", []string{"PATH=" + bin + ":" + os.Getenv("PATH")}, "--config", p("containerd.toml"))
	waitFor("containerd", time.Minute, func() bool {
		return exec.Command(filepath.Join(bin, "ctr"), "--address", "/run/containerd/containerd.sock", "version").Run() == nil
	}, "containerd")
	images, _ := filepath.Glob(filepath.Join(bin, "images", "*.tar"))
	for _, img := range images {
		if out, err := exec.Command(filepath.Join(bin, "ctr"), "--address", "/run/containerd/containerd.sock", "-n", "k8s.io",
			"images", "import", "--snapshotter", "native", img).CombinedOutput(); err != nil {
			t.Fatalf("import %s: %v\n%s", img, err, out)
		}
	}
	stage(fmt.Sprintf("%d images imported", len(images)))

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
	run("kubelet", nil, "--kubeconfig="+kubelet, "--config="+p("kubelet.yaml"), "--node-ip=192.0.2.10",
		"--hostname-override=lab-node", "--root-dir="+p("kubelet"))
	var node struct {
		Status struct {
			Conditions []struct{ Type, Status, Message string }
		}
	}
	waitFor("node Ready", 6*time.Minute, func() bool {
		if c, _ := get("/api/v1/nodes/lab-node", &node); c != 200 {
			return false
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == "Ready" && cond.Status == "True" {
				return true
			}
		}
		return false
	}, "kubelet")

	// A pod on the pod network mounts the lab's NFS export through the
	// kubelet (in-tree nfs volume) and writes to it.
	post := func(path, body string) (int, string) {
		resp, err := client.Post("https://127.0.0.1:6443"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor("default service account", 3*time.Minute, func() bool {
		c, _ := get("/api/v1/namespaces/default/serviceaccounts/default", nil)
		return c == 200
	}, "kube-controller-manager")
	code, body := post("/api/v1/namespaces/default/pods", `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"nfs-writer"},
 "spec":{"restartPolicy":"Never","containers":[{"name":"w","image":"lab.local/busybox:lab","imagePullPolicy":"Never",
 "command":["/bin/sh","-c","echo written-by-a-pod > /data/pod-was-here"],"volumeMounts":[{"name":"d","mountPath":"/data"}]}],
 "volumes":[{"name":"d","nfs":{"server":"192.0.2.10","path":"/export"}}]}}`)
	if code != 201 {
		t.Fatalf("create pod: %d %s", code, body)
	}
	var pod struct{ Status struct{ Phase string } }
	waitFor("pod with an NFS volume Succeeded", 5*time.Minute, func() bool {
		get("/api/v1/namespaces/default/pods/nfs-writer", &pod)
		if pod.Status.Phase == "Failed" {
			t.Fatalf("pod failed; kubelet log:\n%s", tail("kubelet"))
		}
		return pod.Status.Phase == "Succeeded"
	}, "kubelet")
	if b, err := os.ReadFile("/export/pod-was-here"); err != nil || string(b) != "written-by-a-pod\n" {
		t.Errorf("the pod's write is not on the export: %q %v", b, err)
	}
}
