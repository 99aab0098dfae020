package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The two guests of a two-node run talk on 192.0.2.0/24: the first serves
// the worker its credentials on workerBundlePort, the worker serves its
// own logs on workerLogPort.
const (
	workerBundlePort = "29901"
	workerLogPort    = "29902"
)

// TestDriverOnTwoNodes runs in the first guest of `make e2e-multinode`:
// the control plane and lab-node here, lab-node-2 in the second guest
// (TestWorkerNode), the NFS server pod on lab-node, nfsdir installed with
// helm on both, and the scenarios that need two machines, each asserting
// on Kubernetes objects and on the files on the server.
func TestDriverOnTwoNodes(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_MULTINODE") != "1" {
		t.Skip("runs in the first lab guest of a two-node run: make e2e-multinode")
	}
	c := startClusterOn(t, firstNode, &secondNode)
	c.tagE2EImages()
	c.workerReady()
	c.startNFSServer(false)
	// The controller on lab-node: the worker guest is sized for the node
	// plugin and the workloads only.
	// Claims lapse after 120 s here: the replacement of a dead node's pod
	// comes about a minute after the power-off, well inside the lapse,
	// whenever in the renewal period the node died.
	// Installed by the README's quick start, whose StorageClass nfsdir the
	// scenarios use.
	c.quickStartFromTheReadme("--set", `controller.nodeSelector.kubernetes\.io/hostname=`+nodeName, "--set", "node.claimLapse=120s")
	c.runSteps([]step{
		{"SnapshotFromTheDocs", (*cluster).snapshotFromTheDocs},
		{"ReadWriteManyAcrossNodes", (*cluster).readWriteManyAcrossNodes},
		{"LocksAcrossNodes", (*cluster).locksAcrossNodes},
		{"ReadWriteOncePodAcrossNodes", (*cluster).readWriteOncePodAcrossNodes},
		{"ReadWriteOnceAcrossNodes", (*cluster).readWriteOnceAcrossNodes},
		{"StorageSuiteAcrossNodes", (*cluster).storageSuiteAcrossNodes},
		// Last: it turns lab-node-2 off and on again.
		{"NodeKilledWithAVolume", (*cluster).nodeKilledWithAVolume},
	})
}

// TestWorkerNode runs in the second guest of `make e2e-multinode`: it makes
// this guest lab-node-2 (eth0 on the lab link, its own containerd with the
// payload's images), fetches its kubelet credentials from the first guest
// and runs the kubelet until the guest is turned off.
func TestWorkerNode(t *testing.T) {
	if os.Getenv("NFSDIR_LAB_ROLE") != "peer" {
		t.Skip("runs in the second lab guest of a two-node run: make e2e-multinode")
	}
	c := newCluster(t)
	c.prepareNode(secondNode, &firstNode)
	// What the kubelet left on this machine's disk before it was turned
	// off, if it was (the pod directories kept on the peer disk).
	boot := podDirs()
	go serveLogs(t, c.dir, boot)
	for _, f := range []string{"ca.crt", "kubelet.kubeconfig"} {
		c.fetchFromFirst(f, 30*time.Minute)
	}
	c.stage("credentials from " + firstNode.name)
	// What runs on a worker: the node plugin and workload pods (the
	// controller and the NFS server stay on lab-node).
	c.startContainerd(secondNode.podRange, "pause", "nfsdir", "registrar", "livenessprobe", "busybox")
	c.tagE2EImages()
	c.startKubelet(filepath.Join(c.dir, "kubelet.kubeconfig"), secondNode)
	c.stage("kubelet started")
	for { // until the guest is turned off
		time.Sleep(time.Hour)
	}
}

// serveWorkers serves the credentials of the cluster's nodes but the first.
func (c *cluster) serveWorkers() {
	for _, w := range c.nodes[1:] {
		c.serveWorker(w)
	}
}

// serveWorker gives the worker node w its kubelet credentials (a client
// certificate for system:node:<name> with the API server's address on the
// lab link) and the cluster's CA, over HTTP on the lab link: nothing else
// is on it.
func (c *cluster) serveWorker(w labNode) {
	kc := c.pki.kubeconfig(c.t, "kubelet-"+w.name, "system:node:"+w.name, "system:nodes")
	b, err := os.ReadFile(kc)
	if err != nil {
		c.t.Fatal(err)
	}
	kubeconfig := strings.Replace(string(b), "https://127.0.0.1:443", "https://"+nodeIP+":443", 1)
	ca, err := os.ReadFile(filepath.Join(c.dir, "ca.crt"))
	if err != nil {
		c.t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/kubelet.kubeconfig", func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, kubeconfig) })
	mux.HandleFunc("/ca.crt", func(rw http.ResponseWriter, _ *http.Request) { rw.Write(ca) })
	l, err := net.Listen("tcp", nodeIP+":"+workerBundlePort)
	if err != nil {
		c.t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	c.t.Cleanup(func() { srv.Close() })
}

// fetchFromFirst polls the first guest for a file of serveWorker until
// it comes, and stores it in the cluster's directory.
func (c *cluster) fetchFromFirst(name string, limit time.Duration) {
	url := "http://" + nodeIP + ":" + workerBundlePort + "/" + name
	client := &http.Client{Timeout: 10 * time.Second}
	c.waitFor(name+" from "+firstNode.name, limit, func() (bool, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("%s: %s %v", url, resp.Status, err)
		}
		return true, os.WriteFile(filepath.Join(c.dir, name), b, 0o600)
	})
}

// workerState is what the worker tells of its own state (/state): the
// pod directories its kubelet had left when this boot began and those it
// has now, its node plugin's claims file, and its NFS mounts.
type workerState struct {
	Boot, Pods []string
	Claims     string
	NFSMounts  []string
}

// podDirs lists the pod directories below the kubelet's directory.
func podDirs() []string {
	ents, _ := os.ReadDir(filepath.Join(kubeletDir, "pods"))
	var uids []string
	for _, e := range ents {
		uids = append(uids, e.Name())
	}
	return uids
}

// serveLogs serves the worker's process logs (dir/*.log) on the lab link,
// for the first guest to show when the worker misbehaves, and its state
// (workerState, with boot the pod directories found at boot).
func serveLogs(t *testing.T, dir string, boot []string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/state", func(rw http.ResponseWriter, r *http.Request) {
		st := workerState{Boot: boot, Pods: podDirs()}
		b, _ := os.ReadFile(filepath.Join(kubeletDir, "plugins", driverName, "claims.json"))
		st.Claims = string(b)
		m, _ := os.ReadFile("/proc/self/mounts")
		for _, l := range strings.Split(string(m), "\n") {
			if f := strings.Fields(l); len(f) > 2 && strings.HasPrefix(f[2], "nfs") {
				st.NFSMounts = append(st.NFSMounts, l)
			}
		}
		json.NewEncoder(rw).Encode(st)
	})
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		name := filepath.Base(r.URL.Path)
		if !strings.HasSuffix(name, ".log") {
			http.NotFound(rw, r)
			return
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			http.NotFound(rw, r)
			return
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.Size() > 8000 {
			f.Seek(st.Size()-8000, io.SeekStart)
		}
		io.Copy(rw, f)
	})
	srv := &http.Server{Addr: secondNode.ip + ":" + workerLogPort, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		t.Logf("serving logs: %v", err)
	}
}

// workerState fetches the worker's workerState.
func (c *cluster) workerState() workerState {
	client := &http.Client{Timeout: 10 * time.Second}
	var st workerState
	resp, err := client.Get("http://" + secondNode.ip + ":" + workerLogPort + "/state")
	if err == nil {
		defer resp.Body.Close()
		err = json.NewDecoder(resp.Body).Decode(&st)
	}
	if err != nil {
		c.t.Fatalf("the state of %s: %v", secondNode.name, err)
	}
	return st
}

// workerLog returns the end of a worker process's log, fetched from it.
func workerLog(name string) string {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + secondNode.ip + ":" + workerLogPort + "/" + name + ".log")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// workerReady waits until the worker node is Ready (it boots, imports
// the images and starts its kubelet meanwhile), showing its logs if not.
func (c *cluster) workerReady() {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Minute)
	for {
		n, err := c.kube.CoreV1().Nodes().Get(context.Background(), secondNode.name, metav1GetOptions)
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					c.stage("node " + secondNode.name + " Ready")
					return
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("node %s not Ready after 20 min (%v)\n--- its kubelet log:\n%s\n--- its containerd log:\n%s",
				secondNode.name, err, workerLog("kubelet"), workerLog("containerd"))
		}
		time.Sleep(2 * time.Second)
	}
}

// readWriteManyAcrossNodes: the two replicas of a Deployment with
// anti-affinity land on the two nodes, each mounts the claim through its
// own node's plugin, and each reads the 4 MiB the other wrote, closed
// before its marker appeared, byte for byte (close-to-open consistency).
func (c *cluster) readWriteManyAcrossNodes() {
	c.create(c.testdata("two-nodes-rwx.yaml"))
	c.boundPV("default", "spread-data")
	pods := c.podsReady("2 replicas, one per node", "default", "app=spread", 2, 8*time.Minute)
	if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
		c.t.Fatalf("both replicas on %s", pods[0].Spec.NodeName)
	}
	dir := filepath.Join(serverDir, "default", "spread-data")
	seen := map[string]string{}
	c.waitFor("each replica read the other's data", 5*time.Minute, func() (bool, error) {
		for _, p := range pods {
			b, err := os.ReadFile(filepath.Join(dir, "seen", p.Name))
			if err != nil {
				return false, err
			}
			seen[p.Name] = strings.TrimSpace(string(b))
		}
		return true, nil
	})
	for _, p := range pods {
		f := strings.Fields(seen[p.Name])
		if len(f) != 5 {
			c.t.Errorf("%s (on %s) recorded %q", p.Name, p.Spec.NodeName, seen[p.Name])
			continue
		}
		peer, peerNode, got, want, after := f[0], f[1], f[2], f[3], f[4]
		if peerNode == p.Spec.NodeName {
			c.t.Errorf("%s on %s read %s, which says it ran on the same node", p.Name, p.Spec.NodeName, peer)
		}
		if got != want {
			c.t.Errorf("%s on %s read %s's data (written on %s) with checksum %s, want %s: close-to-open broken", p.Name, p.Spec.NodeName, peer, peerNode, got, want)
		}
		c.t.Logf("%s on %s: the data %s wrote on %s was complete, its marker seen %s s after it was written", p.Name, p.Spec.NodeName, peer, peerNode, after)
	}
}

// locksAcrossNodes: for flock(2) and for POSIX (fcntl) locks, an
// exclusive lock held by a pod on lab-node makes a non-blocking attempt on
// lab-node-2 fail, and the waiting attempt there gets the lock only once
// the holder released it, reading what the holder wrote just before (the
// holder waits for the attempt, so the outcome does not depend on timing).
// Over NFSv4.2 (the ReadWriteMany claim of readWriteManyAcrossNodes, of
// the quick start's StorageClass, which names no version) the server keeps
// the locks itself; over NFSv3 (a claim of a second
// StorageClass) they go through lockd and rpc.statd on every machine.
func (c *cluster) locksAcrossNodes() {
	c.create(c.testdata("two-nodes-locks-v3.yaml"))
	for _, v := range []struct{ claim, suffix, fsType, vers string }{
		{"locks-v3", "-v3", " nfs ", "vers=3"},
		{"spread-data", "", " nfs4 ", "vers=4.2"},
	} {
		pv := c.boundPV("default", v.claim)
		holder, contender := "lock-holder"+v.suffix, "lock-contender"+v.suffix
		pods := strings.NewReplacer("spread-data", v.claim, "lock-holder", holder, "lock-contender", contender).Replace(c.testdata("two-nodes-locks.yaml"))
		c.locksOf(v.claim, holder, contender, pods, func() {
			p, err := c.kube.CoreV1().Pods("default").Get(context.Background(), holder, metav1GetOptions)
			if err != nil {
				c.t.Fatal(err)
			}
			m := mounts(string(p.UID), pv.Name)
			if len(m) != 1 || !strings.Contains(m[0], v.fsType) || !strings.Contains(m[0], v.vers) || strings.Contains(m[0], "local_lock=") && !strings.Contains(m[0], "local_lock=none") {
				c.t.Errorf("%s on %s: want one%s%s mount of %s with locks on the server, the node has %q", holder, nodeName, v.fsType, v.vers, v.claim, m)
			}
		})
	}
}

// locksOf runs the pods of two-nodes-locks.yaml (named holder and
// contender, on claim; the contender once the holder made its files) and
// checks the lock each got; mounted checks the holder's mount once it runs.
func (c *cluster) locksOf(claim, holder, contender, pods string, mounted func()) {
	docs := strings.SplitN(pods, "\n---\n", 2)
	if len(docs) != 2 {
		c.t.Fatal("two-nodes-locks.yaml: want the holder, ---, the contender")
	}
	c.create(docs[0])
	defer func() {
		if c.t.Failed() {
			for _, name := range []string{holder, contender} {
				if p, err := c.kube.CoreV1().Pods("default").Get(context.Background(), name, metav1GetOptions); err == nil {
					c.t.Log(c.describePod(p))
				}
			}
		}
		for _, p := range []string{holder, contender} {
			c.kube.CoreV1().Pods("default").Delete(context.Background(), p, metav1.DeleteOptions{})
		}
	}()
	c.podRunning("default", holder, 5*time.Minute)
	mounted()
	dir := filepath.Join(serverDir, "default", claim, "locks")
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return strings.TrimSpace(string(b)), err
	}
	c.waitFor(holder+" made its files", 2*time.Minute, func() (bool, error) {
		r, err := read("ready")
		return r == "yes", err
	})
	c.create(docs[1])
	for _, mode := range []string{"flock", "fcntl"} {
		var try, released, acquired string
		c.waitFor(claim+": "+mode+": the contender on "+secondNode.name+" got the lock", 6*time.Minute, func() (bool, error) {
			if _, err := os.Stat(filepath.Join(dir, "holder-failed-"+mode)); err == nil {
				c.t.Fatalf("%s: %s: the holder on %s could not take the lock", claim, mode, firstNode.name)
			}
			var err error
			if try, err = read("try-" + mode); err != nil || try == "" {
				return false, err
			}
			if released, err = read("released-at-" + mode); err != nil || released == "" {
				return false, err
			}
			acquired, err = read("acquired-at-" + mode)
			return err == nil && acquired != "", err
		})
		held, _ := read("held-at-" + mode)
		if !strings.HasPrefix(try, "busy ") {
			c.t.Errorf("%s: %s: the non-blocking attempt on %s while %s held the lock: %q, want busy", claim, mode, secondNode.name, firstNode.name, try)
		}
		// The two guests' clocks differ: the order is shown by what the
		// contender read once it held the lock, not by the times.
		if saw, err := read("saw-" + mode); err != nil || saw != "written-under-the-lock" {
			c.t.Errorf("%s: %s: once the contender held the lock it read %q (%v); want what the holder wrote just before releasing it", claim, mode, saw, err)
		}
		c.t.Logf("%s: %s: held at %s on %s; tried on %s: %s; released at %s; acquired on %s at %s (each guest's own clock)", claim, mode, held, firstNode.name, secondNode.name, try, released, secondNode.name, acquired)
	}
}

// readWriteOncePodAcrossNodes: while a pod on lab-node uses a
// ReadWriteOncePod claim, a pod asking for it on lab-node-2 is not
// scheduled (the scheduler says why); once the first is gone, it runs.
func (c *cluster) readWriteOncePodAcrossNodes() {
	ctx := context.Background()
	c.create(c.testdata("two-nodes-rwop.yaml"))
	c.podRunning("default", "rwop-first", 5*time.Minute)
	c.create(c.testdata("two-nodes-rwop-second.yaml"))
	var why string
	c.waitFor("rwop-second refused by the scheduler", 3*time.Minute, func() (bool, error) {
		ev, err := c.kube.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=rwop-second,reason=FailedScheduling"})
		if err != nil || len(ev.Items) == 0 {
			return false, err
		}
		why = ev.Items[0].Message
		return true, nil
	})
	time.Sleep(20 * time.Second)
	p, err := c.kube.CoreV1().Pods("default").Get(ctx, "rwop-second", metav1GetOptions)
	if err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != "" {
		c.t.Fatalf("rwop-second while rwop-first runs: %v %s on %q; want Pending, unscheduled", err, p.Status.Phase, p.Spec.NodeName)
	}
	if !strings.Contains(why, "ReadWriteOncePod") {
		c.t.Errorf("the scheduler's reason does not name the access mode: %q", why)
	}
	c.t.Logf("rwop-second: %s", why)
	if err := c.kube.CoreV1().Pods("default").Delete(ctx, "rwop-first", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.podRunning("default", "rwop-second", 5*time.Minute)
	if p, _ := c.kube.CoreV1().Pods("default").Get(ctx, "rwop-second", metav1GetOptions); p.Spec.NodeName != secondNode.name {
		c.t.Errorf("rwop-second runs on %s", p.Spec.NodeName)
	}
	c.boundPV("default", "single-writer")
	owner := filepath.Join(serverDir, "default", "single-writer", "owner")
	c.waitFor("rwop-second wrote on the server", time.Minute, func() (bool, error) {
		b, err := os.ReadFile(owner)
		return strings.TrimSpace(string(b)) == "second", err
	})
	c.kube.CoreV1().Pods("default").Delete(ctx, "rwop-second", metav1.DeleteOptions{})
}

// claimOf returns the node that holds the claim of volume pv on the
// server (.nfsdir/nodes, written by the node plugins), or "" when no
// claim names it.
func (c *cluster) claimOf(pv *corev1.PersistentVolume) string {
	c.t.Helper()
	dir := filepath.Join(serverDir, ".nfsdir", "nodes")
	ents, err := os.ReadDir(dir)
	if err != nil {
		c.t.Fatalf("claims on the server: %v", err)
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "v-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var claim struct{ Node, Volume string }
		if err := json.Unmarshal(b, &claim); err != nil {
			c.t.Errorf("claim %s on the server: %q: %v", e.Name(), b, err)
			continue
		}
		if claim.Volume == pv.Spec.CSI.VolumeHandle {
			return claim.Node
		}
	}
	return ""
}

// mountRefusals returns the FailedMount events of a pod.
func (c *cluster) mountRefusals(name string) []string {
	ev, err := c.kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name + ",reason=FailedMount"})
	if err != nil {
		c.t.Fatal(err)
	}
	var out []string
	for _, e := range ev.Items {
		out = append(out, e.Message)
	}
	return out
}

// readWriteOnceAcrossNodes: while a pod on lab-node uses a ReadWriteOnce
// claim, a pod scheduled with it on lab-node-2 stays ContainerCreating:
// that node's plugin refuses the mount (FailedMount, naming lab-node, whose
// claim is on the server). Once the first pod is gone, the second runs and
// the claim names lab-node-2; without pods, no claim names the volume.
func (c *cluster) readWriteOnceAcrossNodes() {
	ctx := context.Background()
	c.create(c.testdata("two-nodes-rwo.yaml"))
	c.podRunning("default", "rwo-first", 5*time.Minute)
	pv := c.boundPV("default", "one-node")
	if h := c.claimOf(pv); h != nodeName {
		c.t.Fatalf("claim of %s while rwo-first runs: %q, want %s", pv.Name, h, nodeName)
	}
	c.create(c.testdata("two-nodes-rwo-second.yaml"))
	var why []string
	c.waitFor("rwo-second's mount refused on "+secondNode.name, 3*time.Minute, func() (bool, error) {
		why = c.mountRefusals("rwo-second")
		return len(why) > 0, nil
	})
	if !strings.Contains(why[0], `node \"`+nodeName+`\" has it published`) && !strings.Contains(why[0], `node "`+nodeName+`" has it published`) {
		c.t.Errorf("the refusal does not name %s: %q", nodeName, why[0])
	}
	c.t.Logf("rwo-second: %s", why[0])
	time.Sleep(10 * time.Second)
	p, err := c.kube.CoreV1().Pods("default").Get(ctx, "rwo-second", metav1GetOptions)
	if err != nil || p.Status.Phase != corev1.PodPending || p.Spec.NodeName != secondNode.name {
		c.t.Fatalf("rwo-second while rwo-first runs: %v %s on %q; want Pending on %s", err, p.Status.Phase, p.Spec.NodeName, secondNode.name)
	}
	owner := filepath.Join(serverDir, "default", "one-node", "owner")
	if b, _ := os.ReadFile(owner); strings.TrimSpace(string(b)) != "first" {
		c.t.Fatalf("owner on the server while rwo-second waits: %q", b)
	}
	if err := c.kube.CoreV1().Pods("default").Delete(ctx, "rwo-first", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.podRunning("default", "rwo-second", 5*time.Minute)
	c.waitFor("rwo-second wrote on the server", time.Minute, func() (bool, error) {
		b, err := os.ReadFile(owner)
		return strings.TrimSpace(string(b)) == "second", err
	})
	if h := c.claimOf(pv); h != secondNode.name {
		c.t.Errorf("claim of %s while rwo-second runs: %q, want %s", pv.Name, h, secondNode.name)
	}
	c.kube.CoreV1().Pods("default").Delete(ctx, "rwo-second", metav1.DeleteOptions{})
	c.waitFor("no claim of "+pv.Name+" once its pods are gone", 3*time.Minute, func() (bool, error) {
		return c.claimOf(pv) == "", nil
	})
}

// nodeKilledWithAVolume: lab-node-2's machine is turned off (its qemu
// killed) while its pod has a ReadWriteOnce volume mounted and holds an
// fcntl lock on it. The node goes NotReady, the pod is evicted (it
// tolerates that for 5 s) and its replacement is scheduled on lab-node,
// whose mount is refused while the dead node's claim has not lapsed; then
// it runs, finds the 4 MiB fsynced before the power went off intact, and
// gets the lock once the server's lease of the dead client ran out. The
// machine comes back: lab-node-2 is Ready again, the dead pod's object is
// cleaned up, and the claim stays lab-node's.
func (c *cluster) nodeKilledWithAVolume() {
	ctx := context.Background()
	c.create(c.testdata("two-nodes-killed.yaml"))
	dir := filepath.Join(serverDir, "default", "survivor")
	lockedBy := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "locked-by"))
		return strings.TrimSpace(string(b))
	}
	c.waitFor("the survivor pod holds its lock", 5*time.Minute, func() (bool, error) { return lockedBy() != "", nil })
	if who := lockedBy(); who != secondNode.name {
		c.t.Fatalf("the survivor pod runs on %q; its affinity prefers %s", who, secondNode.name)
	}
	pods, err := c.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=survivor"})
	if err != nil || len(pods.Items) != 1 {
		c.t.Fatalf("survivor pods: %v %v", pods, err)
	}
	dead := pods.Items[0]
	pv := c.boundPV("default", "survivor")
	if h := c.claimOf(pv); h != secondNode.name {
		c.t.Fatalf("claim of %s before the power-off: %q", pv.Name, h)
	}

	killed := time.Now()
	since := func() string { return fmt.Sprintf("%.0f s after the power-off", time.Since(killed).Seconds()) }
	fmt.Println("NFSLAB-PEER=kill")
	c.waitFor(secondNode.name+" not Ready", 5*time.Minute, func() (bool, error) {
		n, err := c.kube.CoreV1().Nodes().Get(ctx, secondNode.name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				return cond.Status != corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	c.stage(secondNode.name + " not Ready, " + since())
	var repl corev1.Pod
	c.waitFor("a replacement pod on "+nodeName, 5*time.Minute, func() (bool, error) {
		pods, err := c.kube.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=survivor"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Name != dead.Name && p.Spec.NodeName == nodeName {
				repl = p
				return true, nil
			}
		}
		return false, nil
	})
	c.stage("replacement " + repl.Name + " scheduled on " + nodeName + ", " + since())
	c.podRunning("default", repl.Name, 8*time.Minute)
	c.stage("replacement running, " + since())
	refusals := c.mountRefusals(repl.Name)
	if len(refusals) == 0 || !strings.Contains(strings.Join(refusals, "\n"), secondNode.name) {
		c.t.Errorf("the replacement's mount was never refused for %s's claim (events: %q)", secondNode.name, refusals)
	}
	c.waitFor("the replacement holds the lock", 5*time.Minute, func() (bool, error) { return lockedBy() == nodeName, nil })
	c.stage("the replacement got the lock, " + since())
	if b, err := os.ReadFile(filepath.Join(dir, "checked-on-"+nodeName)); err != nil || !strings.Contains(string(b), "synced: OK") || strings.Contains(string(b), "MISMATCH") {
		c.t.Errorf("the fsynced data, checked by the replacement: %q %v", b, err)
	}
	if h := c.claimOf(pv); h != nodeName {
		c.t.Errorf("claim of %s after the takeover: %q", pv.Name, h)
	}

	fmt.Println("NFSLAB-PEER=start")
	c.workerReady()
	c.stage(secondNode.name + " Ready again, " + since())
	c.waitFor("the dead pod "+dead.Name+" cleaned up", 5*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods("default").Get(ctx, dead.Name, metav1GetOptions)
		return apierrors.IsNotFound(err), nil
	})
	c.driverRunning("after " + secondNode.name + " came back")
	// What the dead pod left on lab-node-2's disk: its pod directory with
	// the volume's (unmounted) target, and the plugin's claims file naming
	// the volume. The kubelet unpublishes the target and removes the
	// directory, the plugin forgets the claim without touching lab-node's.
	var st workerState
	c.waitFor("the dead pod's directory and claim gone from "+secondNode.name, 3*time.Minute, func() (bool, error) {
		st = c.workerState()
		return !slices.Contains(st.Pods, string(dead.UID)) && !strings.Contains(st.Claims, pv.Spec.CSI.VolumeHandle),
			fmt.Errorf("pod directories %q, claims file %q", st.Pods, st.Claims)
	})
	c.stage("stale state of " + dead.Name + " cleaned on " + secondNode.name + ", " + since())
	if !slices.Contains(st.Boot, string(dead.UID)) {
		c.t.Errorf("%s booted without the dead pod's directory (it had %q): its kubelet's state did not survive the power-off, so nothing stale was cleaned", secondNode.name, st.Boot)
	}
	for _, m := range st.NFSMounts {
		if strings.Contains(m, pv.Name) || strings.Contains(m, string(dead.UID)) {
			c.t.Errorf("%s still has a mount of the dead pod's volume: %q", secondNode.name, m)
		}
	}
	for _, p := range c.pods(driverNS, "app.kubernetes.io/component=node") {
		if p.Spec.NodeName != secondNode.name {
			continue
		}
		log := c.logsOf(driverNS, p.Name, "nfsdir")
		if !strings.Contains(log, string(dead.UID)) {
			c.t.Errorf("the node plugin on %s never handled the dead pod's target; its log:\n%s", secondNode.name, log)
		}
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, string(dead.UID)) || strings.Contains(l, "held before the restart") {
				c.t.Logf("%s: %s", secondNode.name, l)
			}
		}
	}
	if h := c.claimOf(pv); h != nodeName {
		c.t.Errorf("claim of %s after %s came back: %q", pv.Name, secondNode.name, h)
	}
	if who := lockedBy(); who != nodeName {
		c.t.Errorf("the lock after %s came back: %q", secondNode.name, who)
	}
	if err := c.kube.AppsV1().Deployments("default").Delete(ctx, "survivor", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("no claim of "+pv.Name+" once the Deployment is gone", 3*time.Minute, func() (bool, error) {
		return c.claimOf(pv) == "", nil
	})
}

// multiNodeSpecs selects the storage suite's specs that need two nodes:
// the multiVolume tests that put their pods on different nodes (on one
// node they skip with "fewer than 2 nodes").
const multiNodeSpecs = `External.Storage.*nfsdir\.csi\.io.*on different node`

// storageSuiteAcrossNodes runs the storage suite's multi-node specs on the
// two nodes: each that runs must pass, and at least the two that only
// wanted a second node (the concurrent access from pods on different
// nodes, and two volumes across pod re-creation on another node) run.
func (c *cluster) storageSuiteAcrossNodes() {
	sum := c.runStorageSuite(suiteRun{Focus: multiNodeSpecs, Skip: suiteSkip, Procs: 2, Limit: 15 * time.Minute})
	if sum.Passed < 2 {
		c.t.Errorf("%d multi-node specs passed, want at least 2", sum.Passed)
	}
	for r := range sum.SkipReasons {
		if strings.Contains(r, "node") && strings.Contains(r, "2") {
			c.t.Errorf("a multi-node spec still skipped for want of nodes: %q", r)
		}
	}
}
