package k8s

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

var metav1GetOptions = metav1.GetOptions{}

// resources maps the kinds the tests create to their API resources.
var resources = map[string]schema.GroupVersionResource{
	"Pod":                      {Version: "v1", Resource: "pods"},
	"PersistentVolumeClaim":    {Version: "v1", Resource: "persistentvolumeclaims"},
	"PersistentVolume":         {Version: "v1", Resource: "persistentvolumes"},
	"Deployment":               {Group: "apps", Version: "v1", Resource: "deployments"},
	"StorageClass":             {Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"},
	"VolumeAttributesClass":    {Group: "storage.k8s.io", Version: "v1", Resource: "volumeattributesclasses"},
	"Namespace":                {Version: "v1", Resource: "namespaces"},
	"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"VolumeSnapshot":           {Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"},
	"VolumeSnapshotClass":      {Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"},
	"VolumeSnapshotContent":    {Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"},
}

// labImages maps the images the examples name to the lab's imported ones.
var labImages = strings.NewReplacer(
	"nfs-server.default.svc.cluster.local", nodeIP,
	"image: busybox:1.36", "image: lab.local/busybox:lab",
)

// manifest reads a YAML file of the payload (the repository's deploy/example
// or the package's testdata) with the examples' server and image names
// replaced by the lab's.
func (c *cluster) manifest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	return labImages.Replace(string(b))
}

// create creates every object of a multi-document YAML text, the way
// `kubectl create --validate=false -f` does.
func (c *cluster) create(text string) []*unstructured.Unstructured {
	c.t.Helper()
	var made []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			c.t.Fatalf("decode manifest: %v", err)
		}
		if obj == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gvr, ok := resources[u.GetKind()]
		if !ok {
			c.t.Fatalf("no resource known for kind %s", u.GetKind())
		}
		var ri dynamic.ResourceInterface = c.dyn.Resource(gvr)
		if ns := u.GetNamespace(); ns != "" {
			ri = c.dyn.Resource(gvr).Namespace(ns)
		} else if gvr.Resource == "pods" || gvr.Resource == "persistentvolumeclaims" || gvr.Resource == "deployments" || gvr.Resource == "volumesnapshots" {
			ri = c.dyn.Resource(gvr).Namespace("default")
		}
		out, err := ri.Create(context.Background(), u, metav1.CreateOptions{})
		if err != nil {
			c.t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
		made = append(made, out)
	}
	return made
}

// pods lists the pods of a namespace matching a label selector.
func (c *cluster) pods(ns, selector string) []corev1.Pod {
	l, err := c.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		c.t.Fatal(err)
	}
	return l.Items
}

// podsReady waits until n pods match selector and all of them are Running
// and Ready; it fails early when one of them failed.
func (c *cluster) podsReady(what, ns, selector string, n int, limit time.Duration) []corev1.Pod {
	c.t.Helper()
	var ready, ps []corev1.Pod
	deadline := time.Now().Add(limit)
	c.waitFor(what, limit+time.Minute, func() (bool, error) {
		ps = c.pods(ns, selector)
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, p := range ps {
				b.WriteString(c.describePod(&p))
			}
			c.t.Fatalf("%s not reached after %s:\n%s\n--- kubelet log:\n%s", what, limit, b.String(), c.tail("kubelet", 3000))
		}
		ready = ready[:0]
		for _, p := range ps {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Status.Phase == corev1.PodFailed {
				c.t.Fatalf("pod %s failed: %s\n%s", p.Name, p.Status.Message, c.describePod(&p))
			}
			if p.Status.Phase == corev1.PodRunning && isReady(&p) {
				ready = append(ready, p)
			}
		}
		if len(ready) == n && len(ps) == n {
			return true, nil
		}
		return false, fmt.Errorf("%d of %d pods ready: %s", len(ready), n, c.podSummary(ps))
	}, "kubelet")
	return ready
}

// podReaches waits until a pod reaches phase want: Succeeded (it ran to
// completion), or Running and Ready. Any other end fails the test.
func (c *cluster) podReaches(ns, name string, want corev1.PodPhase, limit time.Duration) {
	c.t.Helper()
	c.waitFor("pod "+name+" "+string(want), limit, func() (bool, error) {
		p, err := c.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		ended := p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
		if ended && p.Status.Phase != want {
			c.t.Fatalf("pod %s ended %s\n%s", name, p.Status.Phase, c.describePod(p))
		}
		done := p.Status.Phase == want && (want != corev1.PodRunning || isReady(p))
		return done, fmt.Errorf("%s", c.podSummary([]corev1.Pod{*p}))
	}, "kubelet")
}

// podRunning waits until a pod runs and is Ready.
func (c *cluster) podRunning(ns, name string, limit time.Duration) {
	c.t.Helper()
	c.waitFor("pod "+name+" Running", limit, func() (bool, error) {
		p, err := c.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
			c.t.Fatalf("pod %s ended\n%s", name, c.describePod(p))
		}
		return p.Status.Phase == corev1.PodRunning && isReady(p), fmt.Errorf("%s", c.podSummary([]corev1.Pod{*p}))
	}, "kubelet")
}

func isReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podSummary describes pods in one line each: phase and why containers wait.
func (c *cluster) podSummary(ps []corev1.Pod) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "[%s %s", p.Name, p.Status.Phase)
		for _, s := range statusesOf(&p) {
			if w := s.State.Waiting; w != nil {
				fmt.Fprintf(&b, " %s:%s %s", s.Name, w.Reason, w.Message)
			}
			if s.RestartCount > 0 {
				fmt.Fprintf(&b, " %s restarts=%d", s.Name, s.RestartCount)
			}
		}
		b.WriteString("] ")
	}
	return b.String()
}

// describePod returns a pod's status, its events and its containers' logs.
func (c *cluster) describePod(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s: %s\n", p.Namespace, p.Name, c.podSummary([]corev1.Pod{*p}))
	ev, _ := c.kube.CoreV1().Events(p.Namespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + p.Name})
	if ev != nil {
		for _, e := range ev.Items {
			fmt.Fprintf(&b, "  event %s %s: %s\n", e.Type, e.Reason, e.Message)
		}
	}
	for _, ctr := range containersOf(p) {
		fmt.Fprintf(&b, "  logs of %s:\n%s\n", ctr.Name, c.logsOf(p.Namespace, p.Name, ctr.Name))
	}
	for _, s := range statusesOf(p) {
		if s.RestartCount > 0 {
			prev, err := c.previousLog(p, s.Name)
			fmt.Fprintf(&b, "  logs of the previous %s: %v\n%s\n", s.Name, err, prev)
		}
	}
	return b.String()
}

// previousLog returns the log of a container's previous run (its first
// 64 KiB).
func (c *cluster) previousLog(p *corev1.Pod, container string) (string, error) {
	first := int64(64 << 10)
	b, err := c.kube.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, Previous: true, LimitBytes: &first}).DoRaw(context.Background())
	return string(b), err
}

// logsOf returns a container's log: its first 4 KiB through the API
// (LimitBytes counts from the start), the last 4 KiB of the node's files
// when the API server cannot reach the kubelet.
func (c *cluster) logsOf(ns, pod, container string) string {
	tail := int64(4096)
	b, err := c.kube.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container, LimitBytes: &tail}).DoRaw(context.Background())
	if err == nil {
		return string(b)
	}
	// The node's own files, when the API server cannot reach the kubelet.
	files, _ := filepath.Glob(filepath.Join("/var/log/pods", ns+"_"+pod+"_*", container, "*.log"))
	var all []byte
	for _, f := range files {
		fb, _ := os.ReadFile(f)
		all = append(all, fb...)
	}
	if len(all) > 4096 {
		all = all[len(all)-4096:]
	}
	return fmt.Sprintf("(API: %v; from /var/log/pods:)\n%s", err, all)
}

// toolEnv is the environment of helm and kubectl: the cluster's
// kubeconfig, helm's homes in the cluster's directory.
func (c *cluster) toolEnv() []string {
	return append(os.Environ(), "KUBECONFIG="+c.admin, "HOME="+c.dir, "HELM_CACHE_HOME="+c.dir+"/helm-cache",
		"HELM_CONFIG_HOME="+c.dir+"/helm-config", "HELM_DATA_HOME="+c.dir+"/helm-data")
}

// helm runs the helm binary of the payload against the cluster and returns
// its output; it fails the test when helm fails.
func (c *cluster) helm(args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "helm"), args...)
	cmd.Env = c.toolEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// mounts returns the lines of the node's mount table (the guest's own) that
// contain every one of the given strings.
func mounts(contains ...string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
next:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range contains {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}
