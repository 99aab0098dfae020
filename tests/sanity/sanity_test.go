// Package sanity runs the CSI conformance suite (csi-test's pkg/sanity)
// against nfsdir: with a fake mounter on any host, and against the real
// kernel NFS server and client in the lab guest. No spec is skipped by name.
package sanity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/tests/lab"
)

func run(t *testing.T, d *lab.Driver, server, share string) {
	dir := t.TempDir()
	cfg := sanity.NewTestConfig()
	cfg.Address = d.Endpoint
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeParameters = map[string]string{"server": server, "share": share}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
}

// TestSanityFake runs the suite with NFS replaced by local directories.
func TestSanityFake(t *testing.T) {
	base := t.TempDir()
	m := nfsmounttest.New(base)
	if err := os.MkdirAll(m.ExportDir("nfs.example", "/export"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, lab.StartDriver(t, m, nil), "nfs.example", "/export")
}

// TestSanityNFS runs the suite against the lab's kernel NFS server.
func TestSanityNFS(t *testing.T) {
	lab.Require(t)
	run(t, lab.StartDriver(t, nfsmount.NewSystem(), nil), lab.Server(), lab.Export())
}
