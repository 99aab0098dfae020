package k8s

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// nodeMetricsPort is the chart's default node.metricsPort.
const nodeMetricsPort = 29655

// nodeExportMounts reads nfsdir_node_export_mounts from the node plugin.
func (c *cluster) nodeExportMounts() (string, error) {
	b, err := httpGet(nodeIP, nodeMetricsPort, "/metrics")
	for _, l := range strings.Split(b, "\n") {
		if v, ok := strings.CutPrefix(l, "nfsdir_node_export_mounts "); ok {
			return v, err
		}
	}
	return "", fmt.Errorf("no nfsdir_node_export_mounts in the node's metrics (%v)", err)
}

// stagedClass puts its volumes on the named export main, wherever the
// steps before have it.
const stagedClass = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: nfsdir-staged}
provisioner: nfsdir.csi.io
parameters: {export: main, subDir: "staged/${pvc.metadata.name}"}
reclaimPolicy: Delete
---
`

// nodeStageMode: an upgrade that sets node.stage replaces the node plugin
// with one that stages. A claim used by three pods is then staged once by
// the kubelet: its staging path (globalmount) shows the volume's
// directory, each pod's target is bound from it, and the node plugin
// holds one mount of the export; the pods see each other's files. Once
// the pods are gone the kubelet unstages the volume, and the node's mount
// of the export goes with it. The steps after this one run in this mode.
func (c *cluster) nodeStageMode() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	began := time.Now()
	c.helm("upgrade", release, filepath.Join(c.bin, "chart", "nfsdir"), "--namespace", driverNS, "--reuse-values", "--set", "node.stage=true")
	c.waitFor("the node plugin stages", 5*time.Minute, func() (bool, error) {
		ps := c.pods(driverNS, "app.kubernetes.io/name=nfsdir,app.kubernetes.io/component=node")
		for _, p := range ps {
			ctr := containerNamed(&p, "nfsdir")
			if p.DeletionTimestamp != nil || ctr == nil || !strings.Contains(strings.Join(ctr.Args, " "), "--node-stage") {
				return false, fmt.Errorf("%s", c.podSummary(ps))
			}
		}
		return len(ps) == 1, fmt.Errorf("%s", c.podSummary(ps))
	})
	c.driverRunning("the staging node plugin running")
	c.stage(fmt.Sprintf("node plugin in NodeStage mode %.1fs after the upgrade", time.Since(began).Seconds()))

	c.create(stagedClass + reuseClaim("default", "staged", "nfsdir-staged"))
	pv := c.boundPV("default", "staged")
	src := path.Join("/", pv.Spec.CSI.VolumeAttributes["share"], pv.Spec.CSI.VolumeAttributes["subDir"])
	listed := ":" + src + " " // how mountinfo lists a mount of the volume's directory
	names := []string{"staged-1", "staged-2", "staged-3"}
	for _, n := range names {
		c.create(podOn(n, "staged", fmt.Sprintf(`echo %s > /data/%s && until [ -f /data/staged-1 ] && [ -f /data/staged-2 ] && [ -f /data/staged-3 ]; do sleep 1; done; echo seen all; sleep 3600`, n, n)))
	}
	for _, n := range names {
		c.podRunning("default", n, 5*time.Minute)
	}
	c.waitFor("each pod sees the others' files", 2*time.Minute, func() (bool, error) {
		for _, n := range names {
			if l := c.logsOf("default", n, "w"); !strings.Contains(l, "seen all") {
				return false, fmt.Errorf("%s logged %q", n, l)
			}
			if _, err := os.Stat(filepath.Join(serverDir, src, n)); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	global := mounts("/plugins/kubernetes.io/csi/", "/globalmount ")
	var staging []string
	for _, l := range global {
		if strings.Contains(l, listed) {
			staging = append(staging, l)
		}
	}
	if len(staging) != 1 {
		c.t.Errorf("the claim's staging path: %d mounts of %s at a globalmount:\n%s", len(staging), src, strings.Join(global, "\n"))
	}
	targets := mounts("/volumes/kubernetes.io~csi/"+pv.Name+"/mount ", listed)
	if len(targets) != 3 {
		c.t.Errorf("%d pod targets of the claim, want 3:\n%s", len(targets), strings.Join(targets, "\n"))
	}
	c.waitFor("the node plugin holds one mount of the export", time.Minute, func() (bool, error) {
		v, err := c.nodeExportMounts()
		return v == "1", fmt.Errorf("nfsdir_node_export_mounts %q: %v", v, err)
	})

	zero := int64(0)
	for _, n := range names {
		c.kube.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	c.waitFor("the pods gone and the claim unstaged", 3*time.Minute, func() (bool, error) {
		for _, n := range names {
			if _, err := c.kube.CoreV1().Pods("default").Get(ctx, n, metav1GetOptions); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("pod %s: %v", n, err)
			}
		}
		left := mounts(listed)
		return len(left) == 0, fmt.Errorf("still mounted:\n%s", strings.Join(left, "\n"))
	})
	c.waitFor("the node's mount of the export gone", time.Minute, func() (bool, error) {
		v, err := c.nodeExportMounts()
		return v == "0", fmt.Errorf("nfsdir_node_export_mounts %q: %v", v, err)
	})
	c.deleteClaim("default", "staged")
	c.waitFor("staged claim's volume deleted", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1GetOptions)
		return apierrors.IsNotFound(err), err
	})
}
