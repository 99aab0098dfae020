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

// TestSanity runs the suite once per process (Ginkgo allows no more): in the
// lab guest against the kernel NFS server and client, elsewhere with NFS
// replaced by local directories (nfsmounttest).
func TestSanity(t *testing.T) {
	if lab.Inside() {
		run(t, lab.StartDriver(t, nfsmount.NewSystem(), nil), lab.Server(), lab.Export())
		return
	}
	base := t.TempDir()
	m := nfsmounttest.New(base)
	if err := os.MkdirAll(m.ExportDir("nfs.example", "/export"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, lab.StartDriver(t, m, nil), "nfs.example", "/export")
}
