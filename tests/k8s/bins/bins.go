//go:build tools

// Package bins pins the Kubernetes release whose binaries the end-to-end
// lab builds from the Go module proxy (kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kubectl). k8s.io/kubernetes requires its staging
// modules at v0.0.0, so each is replaced by the matching published version.
package bins

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
