package k8s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The storage suite runs on the host. e2e.test only talks to the API
// server (and through it to the kubelets), so it runs natively next to the
// control plane rather than under the guest's emulation. A test in the
// guest asks for a run with a ConfigMap in suiteNS labelled suiteLabel
// (its request: a suiteRun); the host's TestHostPlane runs the selection
// and writes the answer (a suiteAnswer) into the same ConfigMap.
const (
	suiteNS    = "kube-system"
	suiteLabel = "nfsdir-lab/storage-suite"
)

// suiteRun is one selection of the storage suite: the specs that match
// Focus and not Skip, Procs at a time, for at most Limit, and Repeat more
// times after that unless one fails (to chase a spec that fails only now
// and then).
type suiteRun struct {
	Focus, Skip string
	Procs       int
	Limit       time.Duration
	Repeat      int
}

// suiteAnswer is the host's answer to a suiteRun: the run's summary and
// how e2e.test ended (empty when it succeeded).
type suiteAnswer struct {
	Summary suiteSummary
	Error   string
}

// budget is how long r may take in all: Limit for each of its runs.
func (r suiteRun) budget() time.Duration {
	return r.Limit * time.Duration(1+r.Repeat)
}

var suiteRuns atomic.Int32

// askHost asks the host to run r and waits for the answer.
func (c *cluster) askHost(r suiteRun) (suiteSummary, error) {
	ctx := context.Background()
	req, err := json.Marshal(r)
	if err != nil {
		c.t.Fatal(err)
	}
	name := fmt.Sprintf("nfsdir-lab-suite-%d", suiteRuns.Add(1))
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{suiteLabel: "request"}},
		Data: map[string]string{"request": string(req)}}
	if _, err := c.kube.CoreV1().ConfigMaps(suiteNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	var answer suiteAnswer
	c.waitFor("the host's run of the storage suite", r.budget()+10*time.Minute, func() (bool, error) {
		cm, err := c.kube.CoreV1().ConfigMaps(suiteNS).Get(ctx, name, metav1GetOptions)
		if err != nil {
			return false, err
		}
		a, ok := cm.Data["answer"]
		if !ok {
			return false, errors.New("no answer yet")
		}
		return true, json.Unmarshal([]byte(a), &answer)
	})
	if answer.Error != "" {
		return answer.Summary, errors.New(answer.Error)
	}
	return answer.Summary, nil
}

// serveSuiteRuns runs, one at a time until ctx ends, the storage suite
// selections the guest asks for, with e2e.test and the Ginkgo CLI from bin
// and the reports below out, and answers each.
func (c *cluster) serveSuiteRuns(ctx context.Context, bin, out string, progress io.Writer) {
	done := map[string]bool{}
	for ctx.Err() == nil {
		list, err := c.kube.CoreV1().ConfigMaps(suiteNS).List(ctx, metav1.ListOptions{LabelSelector: suiteLabel + "=request"})
		if err == nil {
			for _, cm := range list.Items {
				if !done[cm.Name] && cm.Data["answer"] == "" {
					done[cm.Name] = true
					c.answerSuiteRun(ctx, cm, bin, filepath.Join(out, cm.Name), progress)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
}

// answerSuiteRun runs the selection cm asks for and writes the answer.
func (c *cluster) answerSuiteRun(ctx context.Context, cm corev1.ConfigMap, bin, report string, progress io.Writer) {
	var r suiteRun
	var a suiteAnswer
	if err := json.Unmarshal([]byte(cm.Data["request"]), &r); err != nil {
		a.Error = "bad request: " + err.Error()
	} else {
		began := time.Now()
		fmt.Fprintf(progress, "storage e2e suite on the host (%s, %d at a time): report in %s\n", cm.Name, r.Procs, report)
		sum, err := execSuite(ctx, bin, c.admin, report, r, progress)
		fmt.Fprintf(progress, "storage e2e suite finished after %s\n", time.Since(began).Round(time.Second))
		a.Summary = sum
		if err != nil {
			a.Error = err.Error()
		}
		if sum.Failed > 0 || err != nil {
			c.keepSuiteEvidence(ctx, report, progress)
		}
	}
	text, _ := json.Marshal(a)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		cur, err := c.kube.CoreV1().ConfigMaps(suiteNS).Get(ctx, cm.Name, metav1GetOptions)
		if err == nil {
			cur.Data["answer"] = string(text)
			_, err = c.kube.CoreV1().ConfigMaps(suiteNS).Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err == nil || apierrors.IsNotFound(err) || attempt == 30 {
			return
		}
		time.Sleep(2 * time.Second)
	}
}

// keepSuiteEvidence writes into report what a failed run of the storage
// suite leaves behind and the suite's own report does not show: the
// VolumeSnapshotContents that remain (their finalizers and annotations
// say which controller still holds them), the driver's containers' whole
// logs, current and previous, and the host's snapshot-controller log. It
// writes the contents still present on progress as well.
func (c *cluster) keepSuiteEvidence(ctx context.Context, report string, progress io.Writer) {
	// A cluster that no longer answers does not hold the answer up.
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var b strings.Builder
	list, err := c.dyn.Resource(resources["VolumeSnapshotContent"]).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "listing VolumeSnapshotContents: %v\n", err)
	} else {
		for _, o := range list.Items {
			spec, _ := o.Object["spec"].(map[string]any)
			status, _ := o.Object["status"].(map[string]any)
			fmt.Fprintf(&b, "VolumeSnapshotContent %s: deletionTimestamp=%v finalizers=%q annotations=%v deletionPolicy=%v volumeSnapshotRef=%v status=%v\n",
				o.GetName(), o.GetDeletionTimestamp(), o.GetFinalizers(), o.GetAnnotations(), spec["deletionPolicy"], spec["volumeSnapshotRef"], status)
		}
	}
	fmt.Fprint(progress, b.String())
	files := map[string][]byte{"volumesnapshotcontents.txt": []byte(b.String())}
	if log, err := os.ReadFile(c.logs["snapshot-controller"]); err == nil {
		files["snapshot-controller.log"] = log
	}
	pods, err := c.kube.CoreV1().Pods(driverNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nfsdir"})
	if err != nil {
		fmt.Fprintf(progress, "listing the driver's pods: %v\n", err)
		pods = &corev1.PodList{}
	}
	for _, p := range pods.Items {
		for _, ctr := range containersOf(&p) {
			for _, previous := range []bool{false, true} {
				log, err := c.kube.CoreV1().Pods(driverNS).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, Previous: previous}).DoRaw(ctx)
				if err != nil {
					continue
				}
				name := p.Name + "_" + ctr.Name
				if previous {
					name += "_previous"
				}
				files[name+".log"] = log
			}
		}
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(report, name), data, 0o644); err != nil {
			fmt.Fprintf(progress, "keeping %s: %v\n", name, err)
		}
	}
	fmt.Fprintf(progress, "the failed run's evidence is in %s (%d files)\n", report, len(files))
}

// suiteBinaries checks that bin holds what TestHostPlane runs: the
// control plane and what serveSuiteRuns runs.
func suiteBinaries(t *testing.T, bin string) {
	var missing []string
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "snapshot-controller",
		"snapshot-crds", "ginkgo", "e2e.test", "kubectl"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		t.Fatalf("%s lacks %s (make k8s-bins k8s-e2e-bins)", bin, strings.Join(missing, ", "))
	}
}
