//go:build tools

// Package provisioner pins the csi-provisioner sidecar the end-to-end lab
// builds from the Go module proxy.
package provisioner

import _ "github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner"
