package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestMissedConnectDeadline: the logs of sidecars that exited on a lost
// connection. Only the one whose gRPC client says it closed the connection
// itself, at its connect deadline, before the sidecar left, is excused.
func TestMissedConnectDeadline(t *testing.T) {
	const start = `I1203 10:33:58.722465       1 csi-resizer.go:168] "Version" version="v1.14.0"
I1203 10:33:59.605031       1 envvar.go:172] "Feature gate default state" feature="InformerResourceVersion" enabled=false
`
	const aborted = `2026/12/03 10:34:02 INFO: [transport] [client-transport 0xc0004a2000] Aborting due to connect deadline expiring: context deadline exceeded
`
	const probing = `I1203 10:34:02.274319       1 common.go:143] "Probing CSI driver for readiness"
`
	const lost = `E1203 10:34:03.254053       1 connection.go:208] "Lost connection" address="unix:///csi/csi.sock"
E1203 10:34:03.258237       1 connection.go:116] "Lost connection to CSI driver, exiting"
`
	for _, c := range []struct {
		name string
		log  string
		want bool
	}{
		{"closed by its own client at the deadline", start + aborted + lost, true},
		{"closed at the deadline after the channel was ready", start + aborted + probing + lost, true},
		{"lost with no word from its client", start + probing + lost, false},
		{"lost before the client's abort", start + lost + aborted, false},
		{"killed, not lost", start + aborted, false},
		{"log cut before its end", start[:100], false},
	} {
		if got := missedConnectDeadline(c.log); got != c.want {
			t.Errorf("%s: missedConnectDeadline = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStatusesOfSidecars: a pod's sidecars (restartable init containers)
// count among its containers; an init container that runs to completion
// does not.
func TestStatusesOfSidecars(t *testing.T) {
	always, yes := corev1.ContainerRestartPolicyAlways, true
	p := corev1.Pod{
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "setup"}, {Name: "nfsdir", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "csi-provisioner"}},
		},
		Status: corev1.PodStatus{
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "setup"}, {Name: "nfsdir", Started: &yes}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "csi-provisioner", Started: &yes}},
		},
	}
	var names []string
	for _, s := range statusesOf(&p) {
		names = append(names, s.Name)
	}
	if len(names) != 2 || names[0] != "nfsdir" || names[1] != "csi-provisioner" {
		t.Errorf("statusesOf = %v", names)
	}
	if !allStarted(p) || containerNamed(&p, "nfsdir") == nil || containerNamed(&p, "setup") != nil {
		t.Errorf("allStarted %v, containerNamed(nfsdir) %v", allStarted(p), containerNamed(&p, "nfsdir"))
	}
}
