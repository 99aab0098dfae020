package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// poolShare is a second share of the lab node's NFS server (a directory
// of its NFSv4 root), added to the chart's exports while the driver runs.
const poolShare = "/pool2"

// poolClass names both exports and drains main: its volumes go on
// second.
const poolClass = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: nfsdir-pool}
provisioner: nfsdir.csi.io
parameters: {export: "main,second", drainExports: main, subDir: "pool/${pvc.metadata.name}"}
reclaimPolicy: Delete
---
`

// poolGrowsWithoutRestart: an upgrade that only adds an export to the
// chart's exports changes the ConfigMap the driver follows and no pod:
// every nfsdir process names the new export once the kubelet has updated
// the file, with the same pods and no container restarted; a claim of a
// class of both exports, the old one drained, is made on the new one,
// and a pod writes and reads it there.
func (c *cluster) poolGrowsWithoutRestart() {
	ctx := context.Background()
	poolDir := filepath.Join(serverDir, poolShare)
	if err := os.MkdirAll(poolDir, 0o755); err != nil {
		c.t.Fatal(err)
	}
	before := c.pods(driverNS, "app.kubernetes.io/name=nfsdir")
	began := time.Now()
	c.helm("upgrade", release, filepath.Join(c.bin, "chart", "nfsdir"), "--namespace", driverNS, "--reuse-values",
		"--set", "exports.second.server="+nodeIP, "--set", "exports.second.share="+poolShare)
	c.waitFor("every nfsdir process names export second", 5*time.Minute, func() (bool, error) {
		for _, p := range c.pods(driverNS, "app.kubernetes.io/name=nfsdir") {
			if l := c.logsSince(p.Name, "nfsdir", began); !strings.Contains(l, "export second: added") {
				return false, fmt.Errorf("%s has not logged it: %.2000s", p.Name, l)
			}
		}
		return true, nil
	})
	c.stage(fmt.Sprintf("every nfsdir process named the new export %.1fs after the upgrade", time.Since(began).Seconds()))
	after := c.pods(driverNS, "app.kubernetes.io/name=nfsdir")
	if uids(before) != uids(after) {
		c.t.Errorf("the upgrade replaced pods: before %s, after %s", uids(before), uids(after))
	}
	c.noRestartsIn(after)

	c.create(poolClass + reuseClaim("default", "pooled", "nfsdir-pool"))
	pv := c.boundPV("default", "pooled")
	if !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "n2|second|") || pv.Spec.CSI.VolumeAttributes["share"] != poolShare {
		c.t.Fatalf("pooled volume: handle %s, attributes %v", pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.VolumeAttributes)
	}
	c.create(podOn("pool-writer", "pooled", `echo pooled > /data/f && sync && test "$(cat /data/f)" = pooled`))
	c.podReaches("default", "pool-writer", corev1.PodSucceeded, 3*time.Minute)
	if b, err := os.ReadFile(filepath.Join(poolDir, "pool", "pooled", "f")); err != nil || string(b) != "pooled\n" {
		c.t.Errorf("the pooled volume's file on the new export: %q, %v", b, err)
	}
	c.kube.CoreV1().Pods("default").Delete(ctx, "pool-writer", metav1.DeleteOptions{})
	c.deleteClaim("default", "pooled")
	c.waitFor("pooled volume deleted", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1GetOptions)
		return apierrors.IsNotFound(err), err
	})
	if _, err := os.Stat(filepath.Join(poolDir, "pool", "pooled")); !os.IsNotExist(err) {
		c.t.Errorf("the pooled claim's directory after its deletion: %v", err)
	}
}

// uids lists pods' names and UIDs, sorted.
func uids(pods []corev1.Pod) string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"="+string(p.UID))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// logsSince returns what a container of the driver's namespace logged
// since t.
func (c *cluster) logsSince(pod, container string, t time.Time) string {
	since := metav1.NewTime(t.Add(-time.Second))
	b, err := c.kube.CoreV1().Pods(driverNS).GetLogs(pod, &corev1.PodLogOptions{Container: container, SinceTime: &since}).DoRaw(context.Background())
	if err != nil {
		return err.Error()
	}
	return string(b)
}
