package chart

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkNodeStage: with node.stage the node plugin stages (--node-stage)
// and mounts kubelet's staging directory with Bidirectional propagation,
// so that its bind mounts reach kubelet; without it, neither.
func checkNodeStage(t *testing.T, ds corev1.PodSpec, kubelet string, on bool) {
	t.Helper()
	node := container(t, ds, "nfsdir")
	mounted := slices.ContainsFunc(node.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "staging-dir" && m.MountPath == kubelet+"/plugins/kubernetes.io/csi" &&
			m.MountPropagation != nil && *m.MountPropagation == corev1.MountPropagationBidirectional
	})
	volume := slices.ContainsFunc(ds.Volumes, func(v corev1.Volume) bool {
		return v.Name == "staging-dir" && v.HostPath != nil && v.HostPath.Path == kubelet+"/plugins/kubernetes.io/csi"
	})
	if hasArg(node, "--node-stage") != on || mounted != on || volume != on {
		t.Errorf("node.stage=%v: args %v, staging directory mounted %v, volume %v", on, node.Args, mounted, volume)
	}
}
