//go:build tools

// Package resizer pins the csi-resizer sidecar the end-to-end lab builds
// from the Go module proxy.
package resizer

import _ "github.com/kubernetes-csi/external-resizer/cmd/csi-resizer"
