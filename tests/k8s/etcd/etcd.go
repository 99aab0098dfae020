//go:build tools

// Package etcd pins the etcd server the end-to-end lab builds from the Go
// module proxy (the module root is the etcd main package).
package etcd

import _ "go.etcd.io/etcd/server/v3"
