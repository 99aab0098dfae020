//go:build tools

// Package tools pins the versions of the tools the tests build from source
// (helm); it is a module of its own so that their dependencies stay out of
// nfsdir's go.mod. `make helm` builds them into bin/.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
