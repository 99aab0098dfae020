package k8s

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fsGroupMeasure is the table of make bench-bound that shows what the
// kubelet's fsGroup handling costs a pod's start on a full volume.
const fsGroupMeasure = "Pod start with fsGroup on a full volume in Kubernetes"

// fsGroupStarts measures the time from creating a pod to the pod Ready,
// on one nfsdir volume holding files files, for each way the kubelet
// may treat the pod's fsGroup: the CSIDriver's fsGroupPolicy File with
// the pod's fsGroupChangePolicy Always (every start changes the group of
// every file), OnRootMismatch (only when the volume's top directory has
// another group), and the CSIDriver's fsGroupPolicy None (the kubelet
// never changes a file). Each is compared with the same pod without
// fsGroup. Before a time counts, the files on the server must show what
// the policy did: all of them in the group, or none changed.
func (c *cluster) fsGroupStarts(files, rounds int) {
	const ns, claim = "fsgroup", "full"
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	class := "nfsdir"
	if _, err := c.kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: claim},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.boundPV(ns, claim)
	dir := filepath.Join(serverDir, ns, claim)
	fill(c.t, dir, files)
	c.stage(fmt.Sprintf("claim %s/%s holds %d files in %d directories", ns, claim, files, files/100))

	var (
		durs    = map[string][]time.Duration{}
		nextGID = int64(3000)
	)
	start := func(name string, gid int64, change corev1.PodFSGroupChangePolicy) time.Duration {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "starts", Namespace: ns, Labels: map[string]string{"app": "starts"}},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "w", Image: "lab.local/busybox:lab", ImagePullPolicy: corev1.PullNever,
					Command:      []string{"/bin/sleep", "3600"},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
				}},
				TerminationGracePeriodSeconds: ptr(int64(0)),
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
			},
		}
		if gid != 0 {
			pod.Spec.SecurityContext = &corev1.PodSecurityContext{FSGroup: &gid, FSGroupChangePolicy: &change}
		}
		t0 := time.Now()
		if _, err := c.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			c.t.Fatal(err)
		}
		c.pollUntil(name+": pod Ready", 15*time.Minute, func() (bool, string) {
			p, err := c.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Status.Phase == corev1.PodFailed {
				c.t.Fatalf("%s: pod failed: %s", name, c.describePod(p))
			}
			return p.Status.Phase == corev1.PodRunning && isReady(p), string(p.Status.Phase)
		})
		d := time.Since(t0)
		if err := c.kube.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
			c.t.Fatal(err)
		}
		c.pollUntil(name+": pod gone", 5*time.Minute, func() (bool, string) {
			_, err := c.kube.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err != nil, "still there"
		})
		return d
	}
	setPolicy := func(p storagev1.FSGroupPolicy) {
		d, err := c.kube.StorageV1().CSIDrivers().Get(ctx, driverName, metav1.GetOptions{})
		if err != nil {
			c.t.Fatal(err)
		}
		d.Spec.FSGroupPolicy = &p
		if _, err := c.kube.StorageV1().CSIDrivers().Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			c.t.Fatalf("CSIDriver fsGroupPolicy %s: %v", p, err)
		}
		// The kubelet reads the CSIDriver through an informer: one start of a
		// pod without fsGroup lets it see the change before a time counts.
		start("fsGroupPolicy "+string(p)+" seen", 0, "")
	}
	const (
		always = "fsGroupPolicy File, fsGroupChangePolicy Always: every start"
		first  = "fsGroupPolicy File, OnRootMismatch: first start with a new fsGroup"
		later  = "fsGroupPolicy File, OnRootMismatch: later starts"
		none   = "fsGroupPolicy None (or a pod without fsGroup on File): every start"
		bare   = "no fsGroup"
	)
	for r := range rounds {
		durs[bare] = append(durs[bare], start(bare, 0, ""))

		gid := nextGID
		nextGID++
		durs[always] = append(durs[always], start(always, gid, corev1.FSGroupChangeAlways))
		groupsAre(c.t, dir, always, gid)

		gid = nextGID
		nextGID++
		durs[first] = append(durs[first], start(first, gid, corev1.FSGroupChangeOnRootMismatch))
		groupsAre(c.t, dir, first, gid)
		// One file given back to root: a later start that walks the tree
		// would change it again; OnRootMismatch must not.
		stray := filepath.Join(dir, "d000", "f00000")
		if err := os.Lchown(stray, -1, 0); err != nil {
			c.t.Fatal(err)
		}
		durs[later] = append(durs[later], start(later, gid, corev1.FSGroupChangeOnRootMismatch))
		if g := groupOf(c.t, stray); g != 0 {
			c.t.Fatalf("%s: %s has group %d after the start: the kubelet walked the volume", later, stray, g)
		}

		setPolicy(storagev1.NoneFSGroupPolicy)
		durs[none] = append(durs[none], start(none, nextGID, corev1.FSGroupChangeAlways))
		if g := groupOf(c.t, stray); g != 0 {
			c.t.Fatalf("%s: %s has group %d after the start: the kubelet changed the volume", none, stray, g)
		}
		groupsAre(c.t, filepath.Join(dir, "d001"), none, gid)
		setPolicy(storagev1.FileFSGroupPolicy)
		c.stage(fmt.Sprintf("fsGroup starts, round %d: without %.1f s, Always %.1f s, OnRootMismatch %.1f s then %.1f s, None %.1f s", r+1,
			durs[bare][r].Seconds(), durs[always][r].Seconds(), durs[first][r].Seconds(), durs[later][r].Seconds(), durs[none][r].Seconds()))
	}
	for _, cs := range []string{always, first, later, none} {
		benchRow(c.t, fsGroupMeasure, fmt.Sprintf("%s (%d files, median of %d rounds)", cs, files, rounds), median(durs[cs]),
			"a pod without fsGroup", "the same pod and volume", median(durs[bare]))
	}
	if err := c.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// fill writes n empty files into dir on the server, 100 to a directory:
// what a volume of many small files looks like to the kubelet's walk.
func fill(t *testing.T, dir string, n int) {
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/100))
		if i%100 == 0 {
			if err := os.Mkdir(sub, 0o775); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d", i)), nil, 0o664); err != nil {
			t.Fatal(err)
		}
	}
}

// groupsAre checks on the server that every entry under dir has group
// want.
func groupsAre(t *testing.T, dir, what string, want int64) {
	t.Helper()
	seen, wrong := 0, 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		seen++
		if groupOf(t, p) != want {
			wrong++
		}
		return nil
	})
	if err != nil || wrong > 0 {
		t.Fatalf("%s: %d of %d entries under %s have another group than %d (%v)", what, wrong, seen, dir, want, err)
	}
}

func groupOf(t *testing.T, path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Gid)
}
