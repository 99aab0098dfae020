package k8s

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// containersOf returns p's containers: its sidecars (init containers that
// run beside the others, started one after another) and the regular ones.
func containersOf(p *corev1.Pod) []corev1.Container {
	var out []corev1.Container
	for _, ctr := range p.Spec.InitContainers {
		if isSidecar(ctr) {
			out = append(out, ctr)
		}
	}
	return append(out, p.Spec.Containers...)
}

func isSidecar(ctr corev1.Container) bool {
	return ctr.RestartPolicy != nil && *ctr.RestartPolicy == corev1.ContainerRestartPolicyAlways
}

// statusesOf returns the status of every container containersOf(p) names.
func statusesOf(p *corev1.Pod) []corev1.ContainerStatus {
	var out []corev1.ContainerStatus
	for _, s := range p.Status.InitContainerStatuses {
		if slices.ContainsFunc(p.Spec.InitContainers, func(ctr corev1.Container) bool { return ctr.Name == s.Name && isSidecar(ctr) }) {
			out = append(out, s)
		}
	}
	return append(out, p.Status.ContainerStatuses...)
}

// containerNamed returns p's container called name, or nil.
func containerNamed(p *corev1.Pod, name string) *corev1.Container {
	for _, ctr := range containersOf(p) {
		if ctr.Name == name {
			return &ctr
		}
	}
	return nil
}

// allStarted: every container of p has passed its startup probe.
func allStarted(p corev1.Pod) bool {
	ss := statusesOf(&p)
	for _, s := range ss {
		if s.Started == nil || !*s.Started {
			return false
		}
	}
	return len(ss) > 0
}

// expectedWhileStarting: a startup probe's failure, which kubelet reports
// while a container starts (its process not yet listening, the driver not
// yet answering) and which, once the container has started, did what it is
// for. A liveness probe's failure never is.
func expectedWhileStarting(message string) bool {
	return strings.HasPrefix(message, "Startup probe failed")
}

// noContainerRestarted: after all of the above, no container of the driver
// or of the NFS server has restarted (a crash, a failed liveness probe, a
// sidecar that lost its leader lease or its connection to the driver).
func (c *cluster) noContainerRestarted() {
	pods := append(c.pods(driverNS, "app.kubernetes.io/name=nfsdir"), c.pods("default", "app=nfs-server")...)
	c.noRestartsIn(pods)
}

// noRestartsIn fails the test for every container of pods that restarted,
// with how it ended and what kubelet and containerd said of its pod.
func (c *cluster) noRestartsIn(pods []corev1.Pod) {
	for _, p := range pods {
		for _, s := range statusesOf(&p) {
			if s.RestartCount > 0 {
				c.t.Errorf("container %s of %s restarted %d times\n%s\n%s", s.Name, p.Name, s.RestartCount,
					c.terminations(&p), c.describePod(&p))
			}
		}
	}
}

// grpcLogEnv turns on the transport log of gRPC's Go client in a sidecar:
// the connections it makes and why it closes them.
var grpcLogEnv = []corev1.EnvVar{
	{Name: "GRPC_GO_LOG_SEVERITY_LEVEL", Value: "info"},
	{Name: "GRPC_GO_LOG_VERBOSITY_LEVEL", Value: "2"},
}

// cpuHogs keeps both CPUs of the node busy, as a neighbour's batch job
// would.
const cpuHogs = `apiVersion: v1
kind: Pod
metadata: {name: cpu-hogs, namespace: default}
spec:
  terminationGracePeriodSeconds: 0
  containers:
    - name: hogs
      image: lab.local/busybox:lab
      imagePullPolicy: Never
      command: ["/bin/sh", "-c", "for i in 1 2; do (while :; do :; done) & done; wait"]
      resources: {requests: {cpu: 100m}}
`

// controllerRestartsUnderLoad: the controller's pod is replaced while a
// pod beside it keeps both CPUs of the node busy, by a change of its
// template (the sidecars' gRPC transport log turned on, as an operator
// would to see their connections). Every container of the new pod starts
// once: no sidecar exits because its first connection to the driver took
// long on the loaded node.
func (c *cluster) controllerRestartsUnderLoad() {
	ctx := context.Background()
	const selector = "app.kubernetes.io/name=nfsdir,app.kubernetes.io/component=controller"
	c.create(cpuHogs)
	defer func() {
		zero := int64(0)
		c.kube.CoreV1().Pods("default").Delete(ctx, "cpu-hogs", metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	c.podRunning("default", "cpu-hogs", 3*time.Minute)

	deployments := c.kube.AppsV1().Deployments(driverNS)
	d, err := deployments.Get(ctx, release+"-controller", metav1GetOptions)
	if err != nil {
		c.t.Fatal(err)
	}
	old := c.pods(driverNS, selector)
	for _, list := range [][]corev1.Container{d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers} {
		for i := range list {
			if list[i].Name != "nfsdir" && !slices.Contains(list[i].Env, grpcLogEnv[0]) {
				list[i].Env = append(list[i].Env, grpcLogEnv...)
			}
		}
	}
	if _, err := deployments.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	c.replacedControllerStarts("controller pod with a changed template, under load", selector, old)
}

// replacedControllerStarts waits for the one controller pod that is not
// among old to start all its containers and be Ready, and fails the test
// for any of its containers that restarted meanwhile.
func (c *cluster) replacedControllerStarts(what, selector string, old []corev1.Pod) {
	var current corev1.Pod
	began := time.Now()
	c.waitFor(what, 8*time.Minute, func() (bool, error) {
		ps := c.pods(driverNS, selector)
		var fresh []corev1.Pod
		for _, p := range ps {
			if p.DeletionTimestamp == nil && !slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == p.UID }) {
				fresh = append(fresh, p)
			}
		}
		if len(fresh) != 1 || len(ps) != 1 || !allStarted(fresh[0]) || !isReady(&fresh[0]) {
			return false, fmt.Errorf("%s", c.podSummary(ps))
		}
		current = fresh[0]
		return true, nil
	})
	c.stage(fmt.Sprintf("%s: started and Ready in %.0fs", what, time.Since(began).Seconds()))
	c.noRestartsIn([]corev1.Pod{current})
}

// terminations tells how each container of p last ended and what kubelet
// and containerd logged about p: enough to tell a driver's exit from a
// sidecar's, and either from the runtime's doing.
func (c *cluster) terminations(p *corev1.Pod) string {
	var b strings.Builder
	for _, s := range statusesOf(p) {
		if t := s.LastTerminationState.Terminated; t != nil {
			fmt.Fprintf(&b, "  %s (restarts %d) last ended: %s, exit %d, signal %d, %s .. %s: %q\n", s.Name, s.RestartCount,
				t.Reason, t.ExitCode, t.Signal, t.StartedAt.Format(time.RFC3339), t.FinishedAt.Format(time.RFC3339), t.Message)
		}
		if r := s.State.Running; r != nil {
			fmt.Fprintf(&b, "  %s running since %s\n", s.Name, r.StartedAt.Format(time.RFC3339))
		}
	}
	for _, name := range []string{"kubelet", "containerd"} {
		data, _ := os.ReadFile(c.logs[name])
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, p.Name) || strings.Contains(l, string(p.UID)) {
				lines = append(lines, l)
			}
		}
		if len(lines) > 60 {
			lines = lines[len(lines)-60:]
		}
		fmt.Fprintf(&b, "  --- %s's lines about %s:\n%s\n", name, p.Name, strings.Join(lines, "\n"))
	}
	return b.String()
}
