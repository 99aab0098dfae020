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
)

// reuseDirectoryAfterRebuild: claims of a class with reuseDirectory are
// made and written; the cluster's objects go (the claims, then their
// Released PersistentVolumes: reclaimPolicy Retain, so nothing is
// deleted on the share); the same claims made again are bound to new
// PersistentVolumes on their old directories (the same volume handle)
// and pods read the old data. Refused, with an event saying why: a claim
// made again while its earlier PersistentVolume still exists (bound once
// that is deleted), and a claim of another namespace that meets a
// directory made for another claim. Every record names its claim and the
// cluster (the kube-system namespace's UID).
func (c *cluster) reuseDirectoryAfterRebuild() {
	ctx := context.Background()
	defer c.dumpDriverOnFailure()
	ks, err := c.kube.CoreV1().Namespaces().Get(ctx, "kube-system", metav1GetOptions)
	if err != nil {
		c.t.Fatal(err)
	}
	c.create(c.testdata("reuse.yaml"))
	claims := []string{"reuse-a", "reuse-b"}
	old := map[string]*corev1.PersistentVolume{}
	for _, claim := range claims {
		c.create(reuseClaim("default", claim, "nfsdir-reuse"))
	}
	for _, claim := range claims {
		pv := c.boundPV("default", claim)
		old[claim] = pv
		rec, err := recordOnServer(pv.Spec.CSI.VolumeHandle)
		if err != nil || !strings.Contains(rec, `"claim":"default/`+claim+`"`) || !strings.Contains(rec, `"cluster":"`+string(ks.UID)+`"`) {
			c.t.Errorf("record of %s: %s, %v; want its claim and cluster %s", claim, rec, err, ks.UID)
		}
		if err := os.WriteFile(filepath.Join(serverDir, "reuse/default", claim, "data"), []byte(claim), 0o644); err != nil {
			c.t.Fatalf("the directory of %s is not on the server: %v", claim, err)
		}
	}
	// The cluster's objects go: the claims, then their volumes.
	for _, claim := range claims {
		c.deleteClaim("default", claim)
	}
	for _, claim := range claims {
		c.waitFor("volume of "+claim+" Released", 2*time.Minute, func() (bool, error) {
			pv, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, old[claim].Name, metav1GetOptions)
			return err == nil && pv.Status.Phase == corev1.VolumeReleased, err
		})
	}
	// Made again while its volume still exists: refused.
	c.create(reuseClaim("default", "reuse-a", "nfsdir-reuse"))
	c.eventSays("default", "reuse-a", "still belongs to PersistentVolume "+old["reuse-a"].Name)
	for _, claim := range claims {
		if err := c.kube.CoreV1().PersistentVolumes().Delete(ctx, old[claim].Name, metav1.DeleteOptions{}); err != nil {
			c.t.Fatal(err)
		}
	}
	for _, claim := range claims {
		c.waitFor("volume of "+claim+" gone", 2*time.Minute, func() (bool, error) {
			_, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, old[claim].Name, metav1GetOptions)
			return apierrors.IsNotFound(err), err
		})
	}
	c.create(reuseClaim("default", "reuse-b", "nfsdir-reuse"))
	for _, claim := range claims {
		pv := c.boundPV("default", claim)
		if pv.Name == old[claim].Name || pv.Spec.CSI.VolumeHandle != old[claim].Spec.CSI.VolumeHandle {
			c.t.Errorf("%s made again: volume %s, handle %s; the earlier was %s, %s", claim, pv.Name, pv.Spec.CSI.VolumeHandle, old[claim].Name, old[claim].Spec.CSI.VolumeHandle)
		}
		c.create(podOn(claim+"-reader", claim, fmt.Sprintf("test \"$(cat /data/data)\" = %s", claim)))
	}
	for _, claim := range claims {
		c.podReaches("default", claim+"-reader", corev1.PodSucceeded, 3*time.Minute)
	}
	// Another namespace's claim of the same name meets a directory made
	// for default/flat.
	c.create(reuseClaim("default", "flat", "nfsdir-reuse-flat"))
	c.boundPV("default", "flat")
	c.create(reuseClaim("reuse-other", "flat", "nfsdir-reuse-flat"))
	c.eventSays("reuse-other", "flat", "it was made for claim default/flat")

	for _, claim := range claims {
		c.kube.CoreV1().Pods("default").Delete(ctx, claim+"-reader", metav1.DeleteOptions{})
		c.deleteClaim("default", claim)
	}
	c.deleteClaim("default", "flat")
	c.deleteClaim("reuse-other", "flat")
}

// reuseClaim is a ReadWriteMany claim of class.
func reuseClaim(ns, name, class string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s, namespace: %s}
spec: {accessModes: [ReadWriteMany], storageClassName: %s, resources: {requests: {storage: 1Gi}}}
`, name, ns, class)
}

// deleteClaim deletes a claim; a claim already gone is no error.
func (c *cluster) deleteClaim(ns, name string) {
	err := c.kube.CoreV1().PersistentVolumeClaims(ns).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		c.t.Fatal(err)
	}
}

// eventSays waits for a ProvisioningFailed event of the claim that
// contains text.
func (c *cluster) eventSays(ns, claim, text string) {
	c.t.Helper()
	c.waitFor("claim "+ns+"/"+claim+" refused: "+text, 3*time.Minute, func() (bool, error) {
		ev, err := c.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + claim})
		if err != nil {
			return false, err
		}
		last := ""
		for _, e := range ev.Items {
			if e.Reason == "ProvisioningFailed" && strings.Contains(e.Message, text) {
				return true, nil
			}
			last = e.Reason + ": " + e.Message
		}
		return false, fmt.Errorf("%d events, last %q", len(ev.Items), last)
	})
}
