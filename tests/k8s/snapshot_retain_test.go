package k8s

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// The annotations external-snapshotter v8 puts on a VolumeSnapshotContent:
// csi-snapshotter's while it waits for CreateSnapshot, the
// snapshot-controller's once the VolumeSnapshot is being deleted.
const (
	annBeingCreated = "snapshot.storage.kubernetes.io/volumesnapshot-being-created"
	annBeingDeleted = "snapshot.storage.kubernetes.io/volumesnapshot-being-deleted"
)

// retainedContentDeleted: a VolumeSnapshot's content is set to Retain,
// the VolumeSnapshot deleted, then the content deleted, as operators do
// to keep a snapshot past its VolumeSnapshot (and as the storage suite's
// pre-provisioned specs do). The snapshot-controller sets the
// being-deleted annotation from its cached copy of the content, and when
// that copy is older than csi-snapshotter's last write it puts the
// being-created annotation back. csi-snapshotter then sees the deletion
// with being-created on, takes the annotation off and, since it ignores
// changes to the annotations it owns, does not look at the content again
// until its next resync. The step puts being-created back itself (that
// change alone wakes no controller) and checks that the content is gone
// within the chart's resync period and a margin, and that the snapshot's
// copy stays on the share, as Retain promises.
func (c *cluster) retainedContentDeleted() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	// The example StorageClass, which the first scenario makes, when this
	// one runs alone.
	if _, err := c.kube.StorageV1().StorageClasses().Get(ctx, "nfsdir", metav1GetOptions); apierrors.IsNotFound(err) {
		c.create(c.example("storageclass.yaml"))
	}
	c.create(claimWith("retain-src", "", "echo kept > /data/file && sync"))
	c.podReaches("default", "retain-src-pod", corev1.PodSucceeded, 5*time.Minute)
	snaps := c.dyn.Resource(resources["VolumeSnapshot"]).Namespace("default")
	contents := c.dyn.Resource(resources["VolumeSnapshotContent"])
	vsc := c.readySnapshot("retain-1", "retain-src")
	content := vsc.GetName()
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	f := strings.Split(handle, "|")
	if len(f) != 5 {
		c.t.Fatalf("snapshot handle %q is not an nfsdir snapshot ID", handle)
	}
	copyDir := filepath.Join(serverDir, ".nfsdir", "snapshots", f[3])

	patch := func(p string) {
		c.t.Helper()
		if _, err := contents.Patch(ctx, content, types.MergePatchType, []byte(p), metav1.PatchOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	patch(`{"spec":{"deletionPolicy":"Retain"}}`)
	if err := snaps.Delete(ctx, "retain-1", metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.waitFor("VolumeSnapshot retain-1 gone, its content marked being-deleted", 3*time.Minute, func() (bool, error) {
		_, err := snaps.Get(ctx, "retain-1", metav1GetOptions)
		if !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("snapshot: %v", err)
		}
		vsc, err := contents.Get(ctx, content, metav1GetOptions)
		if err != nil {
			return false, err
		}
		_, marked := vsc.GetAnnotations()[annBeingDeleted]
		return marked, fmt.Errorf("annotations %v", vsc.GetAnnotations())
	}, "snapshot-controller")
	c.stage("content " + content + " retained after its VolumeSnapshot was deleted")

	patch(`{"metadata":{"annotations":{"` + annBeingCreated + `":"yes"}}}`)
	if err := contents.Delete(ctx, content, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	deleted := time.Now()
	c.waitFor("retained content "+content+" deleted", 3*time.Minute, func() (bool, error) {
		vsc, err := contents.Get(ctx, content, metav1GetOptions)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("still there: finalizers %q, annotations %v", vsc.GetFinalizers(), vsc.GetAnnotations())
	}, "snapshot-controller")
	if _, err := os.Stat(filepath.Join(copyDir, "file")); err != nil {
		c.t.Errorf("the retained snapshot's copy on the share: %v", err)
	}
	c.kube.CoreV1().Pods("default").Delete(ctx, "retain-src-pod", metav1.DeleteOptions{})
	c.stage(fmt.Sprintf("retained content deleted %.0fs after the delete call; its copy stays on the share", time.Since(deleted).Seconds()))
}

// readySnapshot takes a VolumeSnapshot name of claim (namespace default,
// the chart's class nfsdir), waits until it is ready to use and returns
// its VolumeSnapshotContent.
func (c *cluster) readySnapshot(name, claim string) *unstructured.Unstructured {
	c.t.Helper()
	c.create(fmt.Sprintf(`apiVersion: snapshot.storage.k8s.io/v1
kind: VolumeSnapshot
metadata: {name: %s, namespace: default}
spec: {volumeSnapshotClassName: nfsdir, source: {persistentVolumeClaimName: %s}}
`, name, claim))
	return c.snapshotReady(name)
}

// snapshotReady waits until VolumeSnapshot name (namespace default) is
// ready to use and returns its VolumeSnapshotContent.
func (c *cluster) snapshotReady(name string) *unstructured.Unstructured {
	c.t.Helper()
	ctx := context.Background()
	snaps := c.dyn.Resource(resources["VolumeSnapshot"]).Namespace("default")
	var content string
	c.waitFor("VolumeSnapshot "+name+" readyToUse", 5*time.Minute, func() (bool, error) {
		s, err := snaps.Get(ctx, name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse")
		content, _, _ = unstructured.NestedString(s.Object, "status", "boundVolumeSnapshotContentName")
		return ready, fmt.Errorf("status %v", s.Object["status"])
	}, "snapshot-controller")
	vsc, err := c.dyn.Resource(resources["VolumeSnapshotContent"]).Get(ctx, content, metav1GetOptions)
	if err != nil {
		c.t.Fatal(err)
	}
	return vsc
}
