package k8s

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// movedFrom is a second address of the lab node's NFS server, where the
// named export main is until HelmUpgrade moves it to nodeIP.
const movedFrom = "192.0.2.11"

// namedClass is a StorageClass that names its export.
const namedClass = `apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: nfsdir-named}
provisioner: nfsdir.csi.io
parameters: {export: main, subDir: "named/${pvc.metadata.name}"}
reclaimPolicy: Delete
---
`

// namedExportBeforeMove: with the chart's exports naming main at
// movedFrom, a claim of a class that names the export is bound to a
// volume whose handle carries the name and whose attributes the address;
// a pod writes to it and goes.
func (c *cluster) namedExportBeforeMove() {
	ctx := context.Background()
	c.create(namedClass + reuseClaim("default", "named", "nfsdir-named"))
	pv := c.boundPV("default", "named")
	if !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "n2|main|") || pv.Spec.CSI.VolumeAttributes["server"] != movedFrom || pv.Spec.CSI.VolumeAttributes["export"] != "main" {
		c.t.Fatalf("volume of a named export: handle %s, attributes %v", pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.VolumeAttributes)
	}
	c.create(podOn("named-writer", "named", "echo before-the-move > /data/f && sync"))
	c.podReaches("default", "named-writer", corev1.PodSucceeded, 3*time.Minute)
	if err := c.kube.CoreV1().Pods("default").Delete(ctx, "named-writer", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("named writer gone, its mount released", 2*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().Pods("default").Get(ctx, "named-writer", metav1GetOptions)
		return apierrors.IsNotFound(err) && len(mounts(pv.Name)) == 0, err
	})
}

// namedExportAfterMove runs after HelmUpgrade moved main to nodeIP:
// movedFrom is taken off the node, so that only the new place answers.
// The claim's PersistentVolume is the same object, unchanged; a new pod
// mounts it and reads what was written before the move; deleting the
// claim removes its directory, through the new place.
func (c *cluster) namedExportAfterMove() {
	ctx := context.Background()
	sh(c.t, "ip addr del "+movedFrom+"/32 dev dummy0")
	pv := c.boundPV("default", "named")
	if !strings.HasPrefix(pv.Spec.CSI.VolumeHandle, "n2|main|") || pv.Spec.CSI.VolumeAttributes["server"] != movedFrom {
		c.t.Errorf("the volume changed: handle %s, attributes %v", pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.VolumeAttributes)
	}
	c.create(podOn("named-reader", "named", `test "$(cat /data/f)" = before-the-move`))
	c.podReaches("default", "named-reader", corev1.PodSucceeded, 3*time.Minute)
	c.kube.CoreV1().Pods("default").Delete(ctx, "named-reader", metav1.DeleteOptions{})
	c.deleteClaim("default", "named")
	c.waitFor("volume of the named claim deleted", 3*time.Minute, func() (bool, error) {
		_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1GetOptions)
		return apierrors.IsNotFound(err), err
	})
	if _, err := os.Stat(filepath.Join(serverDir, "named", "named")); !os.IsNotExist(err) {
		c.t.Errorf("the named claim's directory after its deletion: %v", err)
	}
}
