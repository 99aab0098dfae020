package k8s

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The host control plane. A Kubernetes run of make (e2e, e2e-multinode,
// e2e-storage) runs etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler and the snapshot-controller natively on the host, where
// Go programs run about ten times faster than under the guest's emulation,
// and boots the lab guest with what needs its kernel: containerd, the
// kubelet, the NFS server pod, the driver and the workloads.
//
// Nothing leaves loopback. The guest's second NIC is qemu's user-mode
// network, restricted to two kinds of forward (run.sh's
// NFSDIR_LAB_HOSTNET): connections to apiForward in the guest reach the
// API server on the host's 127.0.0.1, and the host's 127.0.0.1 ports of
// kubeletForwards reach the kubelets. The API server dials a kubelet
// through its egress selector (the "cluster" egress), an HTTP CONNECT
// proxy on a unix socket here that knows each node's forward.
const (
	hostNetMAC = "52:54:00:c0:00:0c"
	// hostNetIP is the guest's address on the user-mode network
	// (198.51.100.128/25: the service range is the lower half).
	hostNetIP = "198.51.100.140"
	// apiForward is the API server as the guest dials it.
	apiForward = "198.51.100.129:443"
	// planeInGuest is where the guest finds the host plane's credentials
	// (the payload's plane directory).
	planeInGuest = "/work/bin/plane"
	// workerKubeletPort is the first guest's port that relays to the
	// worker's kubelet.
	workerKubeletPort = 10251
)

// TestHostPlane runs on the host: it starts the control plane from the
// programs in NFSDIR_E2E_HOST_BIN (with the VolumeSnapshot CRDs in its
// snapshot-crds), then the lab guest (NFSDIR_LAB_RUNNER, run.sh) with the
// payload NFSDIR_LAB_BIN, this test binary and the tests
// NFSDIR_E2E_GUEST_RUN names; it runs the storage suite when they ask
// (serveSuiteRuns) and passes when they pass.
func TestHostPlane(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") == "1" || os.Getenv("NFSDIR_E2E_HOST_PLANE") != "1" {
		t.Skip("runs on the host around a Kubernetes lab guest: make e2e")
	}
	payload, runner, run := os.Getenv("NFSDIR_LAB_BIN"), os.Getenv("NFSDIR_LAB_RUNNER"), os.Getenv("NFSDIR_E2E_GUEST_RUN")
	bin := os.Getenv("NFSDIR_E2E_HOST_BIN")
	if payload == "" || runner == "" || run == "" || bin == "" {
		t.Fatal("NFSDIR_LAB_BIN, NFSDIR_LAB_RUNNER, NFSDIR_E2E_GUEST_RUN and NFSDIR_E2E_HOST_BIN are needed")
	}
	suiteBinaries(t, bin)
	state := strings.TrimSuffix(payload, "/") + "-plane"
	creds := filepath.Join(payload, "plane")
	for _, d := range []string{state, creds} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := &cluster{t: t, bin: bin, dir: state, start: time.Now(), logs: map[string]string{}}
	ports := freePorts(t, 7)
	api := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	kubelets := map[string]int{nodeIP: ports[3], secondNode.ip: ports[4]}

	// The guest's credentials name the API server at 127.0.0.1:443,
	// where the guest relays to it; the host's name its port here.
	c.pki = newPKI(t, creds)
	c.pki.kubeconfig(t, "admin", "lab-admin", "system:masters")
	c.pki.kubeconfig(t, "kubelet", "system:node:"+nodeName, "system:nodes")
	c.admin = c.pki.kubeconfig(t, "host-admin", "lab-admin", "system:masters")
	retarget(t, c.admin, api)
	c.connect()
	c.stage("certificates")

	sock, err := os.MkdirTemp("", "nfsdir-egress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	sock = filepath.Join(sock, "egress.sock")
	serveEgress(t, sock, kubelets)
	egress := filepath.Join(state, "egress.yaml")
	if err := os.WriteFile(egress, []byte(`apiVersion: apiserver.k8s.io/v1beta1
kind: EgressSelectorConfiguration
egressSelections:
- name: cluster
  connection:
    proxyProtocol: HTTPConnect
    transport:
      uds: {udsName: `+sock+`}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c.startControlPlane(planePorts{etcd: ports[0], etcdPeer: ports[1], api: ports[2], controllers: ports[5], scheduler: ports[6],
		apiFlags: []string{"--bind-address=127.0.0.1", "--egress-selector-config-file=" + egress}}, api)
	c.startSnapshotController()

	// The storage suite's runs the guest asks for.
	out := cmp.Or(os.Getenv("NFSDIR_E2E_SUITE_OUT"), filepath.Join(state, "storage-e2e"))
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); c.serveSuiteRuns(ctx, bin, out, os.Stdout) }()
	t.Cleanup(func() { cancel(); <-served })

	fwd := fmt.Sprintf("guestfwd=tcp:%s-cmd:busybox nc 127.0.0.1 %d,hostfwd=tcp:127.0.0.1:%d-%s:10250,hostfwd=tcp:127.0.0.1:%d-%s:%d",
		apiForward, ports[2], kubelets[nodeIP], hostNetIP, kubelets[secondNode.ip], hostNetIP, workerKubeletPort)
	cmd := exec.Command(runner, os.Args[0], "-test.v=true", "-test.timeout=0", "-test.run="+run)
	cmd.Env = append(os.Environ(), "NFSDIR_E2E_PLANE="+planeInGuest, "NFSDIR_LAB_HOSTNET="+fwd)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	c.stage("lab guest ended")
	// Nothing of the plane may be reachable from the network: every
	// listener is on 127.0.0.1 (and the guests reach them through qemu).
	c.checkHostListeners()
	if err != nil {
		for _, name := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "snapshot-controller"} {
			t.Logf("--- %s log (host):\n%s", name, c.tail(name, 3000))
		}
		t.Fatalf("lab guest (%s): %v", run, err)
	}
}

// joinHostPlane readies this guest for the control plane on the host: its
// user-mode NIC, relays from 127.0.0.1:443 (the kubeconfigs' address) and
// the API's Service address to the API server, and from workerKubeletPort
// to a worker's kubelet; the cluster's CA and clients. It returns the
// kubelet's kubeconfig.
func (c *cluster) joinHostPlane(dir string) string {
	t := c.t
	sh(t, `for i in /sys/class/net/*; do if [ "$(cat $i/address)" = `+hostNetMAC+` ]; then `+
		`ip addr add `+hostNetIP+`/25 dev ${i##*/} && ip link set ${i##*/} up; fi; done; ip -o addr show | grep -q `+hostNetIP)
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.dir, "ca.crt"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	c.pki = loadPKI(t, dir, c.dir)
	c.admin = filepath.Join(dir, "admin.kubeconfig")
	c.relay(":443", apiForward)
	if len(c.nodes) > 1 {
		c.relay(fmt.Sprintf(":%d", workerKubeletPort), c.nodes[1].ip+":10250")
	}
	c.connect()
	c.serveWorkers()
	c.waitFor("kube-apiserver on the host", 5*time.Minute, c.apiReady)
	return filepath.Join(dir, "kubelet.kubeconfig")
}

// relay accepts connections on addr and joins each to one it dials to to,
// until the test ends.
func (c *cluster) relay(addr, to string) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				out, err := net.DialTimeout("tcp", to, 30*time.Second)
				if err != nil {
					in.Close()
					return
				}
				join(in, out, nil)
			}()
		}
	}()
}

// join copies between a and b both ways (a's first bytes from ra when it
// is not nil) until either side ends, then closes both.
func join(a, b net.Conn, ra io.Reader) {
	if ra == nil {
		ra = a
	}
	var once sync.Once
	done := func() { once.Do(func() { a.Close(); b.Close() }) }
	go func() { io.Copy(b, ra); done() }()
	io.Copy(a, b)
	done()
}

// serveEgress answers the API server's HTTP CONNECT requests on the unix
// socket sock: a request for port 10250 of a node's address joins the
// connection to that node's kubelet forward on 127.0.0.1; anything else is
// refused.
func serveEgress(t *testing.T, sock string, kubelets map[string]int) {
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(conn)
				req, err := http.ReadRequest(br)
				if err != nil {
					conn.Close()
					return
				}
				host, port, _ := net.SplitHostPort(req.Host)
				fwd, ok := kubelets[host]
				if req.Method != http.MethodConnect || port != "10250" || !ok {
					fmt.Fprintf(conn, "HTTP/1.1 403 Forbidden\r\n\r\n")
					conn.Close()
					return
				}
				out, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", fwd), 30*time.Second)
				if err != nil {
					fmt.Fprintf(conn, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
					conn.Close()
					return
				}
				fmt.Fprintf(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
				join(conn, out, br)
			}()
		}
	}()
}

// freePorts returns n ports of 127.0.0.1 that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
