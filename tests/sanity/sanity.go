// Package sanity runs the CSI conformance suite (csi-test's pkg/sanity)
// against nfsdir: with a fake mounter on any host, and against the real
// kernel NFS server and client in the lab guest. No spec is skipped by
// name. The suite runs once per test process; tests/sanity/stage runs it
// on a node plugin in NodeStage mode.
package sanity

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/nfsmount/nfsmounttest"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// Run starts a driver configured by mutate (nil: the defaults) and runs
// the suite against it: in the lab guest on the kernel NFS server and
// client, elsewhere with NFS replaced by local directories (nfsmounttest).
func Run(t *testing.T, mutate func(*config.Config)) {
	if lab.Inside() {
		suite(t, lab.StartDriver(t, nfsmount.NewSystem(), mutate), lab.Server(), lab.Export())
		return
	}
	m := nfsmounttest.New(t.TempDir())
	if err := os.MkdirAll(m.ExportDir("nfs.example", "/export"), 0o755); err != nil {
		t.Fatal(err)
	}
	suite(t, lab.StartDriver(t, m, mutate), "nfs.example", "/export")
}

func suite(t *testing.T, d *lab.Driver, server, share string) {
	dir := t.TempDir()
	cfg := sanity.NewTestConfig()
	cfg.Address = d.Endpoint
	cfg.TargetPath = filepath.Join(dir, "target")
	cfg.StagingPath = filepath.Join(dir, "staging")
	cfg.TestVolumeParameters = map[string]string{"server": server, "share": share}
	cfg.IdempotentCount = 2
	sanity.Test(t, cfg)
}
