package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// noopDriver is the CSI driver of tests/k8s/images/noopcsi, whose
// CreateVolume returns at once.
const noopDriver = "noop.csi.lab"

// TestClaimsBoundBench runs in the lab guest (make bench-bound): the
// time from creating many claims at once to all of them Bound, for
// nfsdir's class and for a class of a driver that does nothing, behind
// the same csi-provisioner with the same flags and rights. The second is
// what the provisioner and the API server alone cost; the ratio is what
// nfsdir adds. It measures the deletions too: claims deleted, their
// volumes gone; and then a pod's start on a volume of many files for
// each fsGroup policy (fsGroupStarts).
func TestClaimsBoundBench(t *testing.T) {
	if os.Getenv("NFSDIR_LAB") != "1" || os.Getenv("NFSDIR_E2E_BENCH") != "1" {
		t.Skip("runs in the lab guest: make bench-bound")
	}
	claims := envInt(t, "NFSDIR_BENCH_CLAIMS", 200)
	rounds := envInt(t, "NFSDIR_BENCH_ROUNDS", 2)
	c := startCluster(t)
	c.startNFSServer(false)
	c.installDriver()
	c.create(c.example("storageclass.yaml"))
	c.startNoopDriver()
	type row struct {
		class          string
		bound, deleted []time.Duration
	}
	rows := []*row{{class: "noop"}, {class: "nfsdir"}}
	for r := range rounds {
		for _, rw := range rows {
			b, d := c.claimsBound(fmt.Sprintf("bench-%s-%d", rw.class, r), rw.class, claims)
			rw.bound, rw.deleted = append(rw.bound, b), append(rw.deleted, d)
			c.stage(fmt.Sprintf("%s, round %d: %d claims Bound in %.1f s, gone in %.1f s", rw.class, r+1, claims, b.Seconds(), d.Seconds()))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d claims created at once, %d rounds (median; min–max)\n", claims, rounds)
	fmt.Fprintf(&b, "| driver | all Bound | claims/s | ratio | all deleted and gone | ratio |\n|---|---|---|---|---|---|\n")
	base := rows[0]
	for _, rw := range rows {
		mb, md := median(rw.bound), median(rw.deleted)
		fmt.Fprintf(&b, "| %s | %.1f s (%.1f–%.1f) | %.1f | %.2f× | %.1f s (%.1f–%.1f) | %.2f× |\n", rw.class,
			mb.Seconds(), slices.Min(rw.bound).Seconds(), slices.Max(rw.bound).Seconds(), float64(claims)/mb.Seconds(),
			mb.Seconds()/median(base.bound).Seconds(),
			md.Seconds(), slices.Min(rw.deleted).Seconds(), slices.Max(rw.deleted).Seconds(), md.Seconds()/median(base.deleted).Seconds())
	}
	t.Log(b.String())
	// The rows of docs/benchmarks.md (tests/bench/report reads them).
	var u unix.Utsname
	unix.Uname(&u)
	t.Logf("BENCH-GUEST Linux %s, %d vCPUs, running the kubelet, the driver and the NFS server's pod; the control plane runs on the host",
		unix.ByteSliceToString(u.Release[:]), runtime.NumCPU())
	nfsdir, noop := rows[1], rows[0]
	const measure, kind, what = "Claims to Bound in Kubernetes", "a driver whose calls do nothing", "the same csi-provisioner"
	benchRow(t, measure, fmt.Sprintf("%d claims created at once: all Bound, median of %d rounds", claims, rounds), median(nfsdir.bound), kind, what, median(noop.bound))
	benchRow(t, measure, fmt.Sprintf("the %d claims deleted: all their volumes gone, median of %d rounds", claims, rounds), median(nfsdir.deleted), kind, what, median(noop.deleted))
	c.fsGroupStarts(envInt(t, "NFSDIR_BENCH_FSGROUP_FILES", 10000), rounds)
}

// benchRow logs one row of make bench-bound's tables in the form of
// tests/bench/report: nfsdir's time for a case of a measure against a
// base (kind names its column, what says what ran).
func benchRow(t *testing.T, measure, cs string, got time.Duration, kind, what string, base time.Duration) {
	type against struct {
		Kind    string  `json:"kind"`
		What    string  `json:"what"`
		Seconds float64 `json:"seconds"`
	}
	row := struct {
		Measure string    `json:"measure"`
		Case    string    `json:"case"`
		Seconds float64   `json:"seconds"`
		Against []against `json:"against"`
	}{measure, cs, got.Seconds(), []against{{kind, what, base.Seconds()}}}
	b, err := json.Marshal(row)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("BENCH-ROW " + string(b))
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// startNoopDriver runs the no-op driver beside a copy of nfsdir's own
// csi-provisioner container (same image, flags and service account), as
// a Deployment in the driver's namespace, with its CSIDriver and a
// StorageClass "noop". Capacity tracking, which asks the driver for
// GetCapacity, is left off: the no-op driver has no capacity.
func (c *cluster) startNoopDriver() {
	ctx := context.Background()
	ds, err := c.kube.AppsV1().Deployments(driverNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
	if err != nil || len(ds.Items) != 1 {
		c.t.Fatalf("nfsdir's controller Deployment: %v (%d found)", err, len(ds.Items))
	}
	ctrl := ds.Items[0].Spec.Template.Spec
	var prov corev1.Container
	for _, ct := range ctrl.Containers {
		if ct.Name == "csi-provisioner" {
			prov = *ct.DeepCopy()
		}
	}
	if prov.Name == "" {
		c.t.Fatal("nfsdir's controller has no csi-provisioner container")
	}
	prov.Args = slices.DeleteFunc(prov.Args, func(a string) bool {
		return strings.HasPrefix(a, "--enable-capacity") || strings.HasPrefix(a, "--capacity-")
	})
	prov.LivenessProbe, prov.StartupProbe, prov.Ports = nil, nil, nil
	prov.VolumeMounts = []corev1.VolumeMount{{Name: "socket-dir", MountPath: "/csi"}}
	labels := map[string]string{"app": "noop-csi"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "noop-csi", Namespace: driverNS},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: ctrl.ServiceAccountName,
					NodeSelector:       ctrl.NodeSelector,
					Tolerations:        ctrl.Tolerations,
					Containers: []corev1.Container{prov, {
						Name: "noop", Image: "lab.local/noopcsi:lab", ImagePullPolicy: corev1.PullNever,
						Args:         []string{"--endpoint=/csi/csi.sock", "--name=" + noopDriver},
						VolumeMounts: []corev1.VolumeMount{{Name: "socket-dir", MountPath: "/csi"}},
					}},
					Volumes: []corev1.Volume{{Name: "socket-dir", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
				},
			},
		},
	}
	if _, err := c.kube.AppsV1().Deployments(driverNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	no := false
	if _, err := c.kube.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: noopDriver},
		Spec: storagev1.CSIDriverSpec{AttachRequired: &no}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	del, immediate := corev1.PersistentVolumeReclaimDelete, storagev1.VolumeBindingImmediate
	if _, err := c.kube.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "noop"},
		Provisioner: noopDriver, ReclaimPolicy: &del, VolumeBindingMode: &immediate}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.podsReady("no-op driver running", driverNS, "app=noop-csi", 1, 5*time.Minute)
}

// claimsBound creates n claims of class in a namespace of their own, 16
// at a time as a controller would, and returns the time from the first
// creation until all are Bound; then deletes them and returns the time
// until their volumes are gone too.
func (c *cluster) claimsBound(ns, class string, n int) (bound, gone time.Duration) {
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	claim := func(i int) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("claim-%03d", i), Namespace: ns},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				StorageClassName: &class,
				Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
	}
	start := time.Now()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if _, err := c.kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, claim(i), metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatalf("create a claim: %v", err)
	}
	c.pollUntil(ns+": all claims Bound", 15*time.Minute, func() (bool, string) {
		list, err := c.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		b := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.ClaimBound {
				b++
			}
		}
		return b == n, fmt.Sprintf("%d of %d Bound", b, n)
	})
	bound = time.Since(start)
	start = time.Now()
	if err := c.kube.CoreV1().PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.pollUntil(ns+": all claims and volumes gone", 15*time.Minute, func() (bool, string) {
		claims, err := c.kube.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		pvs, err := c.kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := 0
		for _, pv := range pvs.Items {
			if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
				left++
			}
		}
		return len(claims.Items) == 0 && left == 0, fmt.Sprintf("%d claims and %d volumes left", len(claims.Items), left)
	})
	gone = time.Since(start)
	if err := c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return bound, gone
}

// pollUntil asks ok every 500 ms until it is done, failing the test after
// limit with ok's last word: fine-grained, for timings.
func (c *cluster) pollUntil(what string, limit time.Duration, ok func() (bool, string)) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for {
		done, last := ok()
		if done {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not reached after %s: %s", what, limit, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
