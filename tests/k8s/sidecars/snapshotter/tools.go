//go:build tools

// Package snapshotter pins csi-snapshotter (the sidecar) and
// snapshot-controller (the cluster's snapshot controller), which the
// end-to-end lab builds from the Go module proxy, and the VolumeSnapshot
// CRDs of the same release (config/crd of the client module).
package snapshotter

import (
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
