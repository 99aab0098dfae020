package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

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
