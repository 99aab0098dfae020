package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// This file holds the lab tests of the second safety review (issue 11)
// that did not fit an older file.

// TestControllerWithEmptyStateDeletesEveryVolume: mount options too long
// for the volume ID were kept only in the controller's state directory,
// which the chart backs with an emptyDir, so a new controller pod answered
// DeleteVolume with FailedPrecondition forever. The ID now carries the
// options needed to reach the share next to the digest of the full list.
func TestControllerWithEmptyStateDeletesEveryVolume(t *testing.T) {
	lab.Require(t)
	long := lab.RWX("nfsvers=4.2", "hard", "timeo=600", "retrans=5", "rsize=1048576", "wsize=1048576",
		"acregmin=3", "acregmax=60", "acdirmin=30", "acdirmax=60", "noresvport")
	first := lab.StartDriver(t, nfsmount.NewSystem(), nil)
	c := lab.Connect(t, first.Endpoint)
	v := c.Create(t, "pvc-long-options", params("onDelete", "delete"), long)
	if !strings.Contains(v.VolumeId, "|@") || !strings.Contains(v.VolumeId, "nfsvers=4.2") {
		t.Fatalf("volume ID %q: want a digest of the options and the version needed to reach the share", v.VolumeId)
	}
	os.WriteFile(onExport("pvc-long-options/data"), []byte("x"), 0o644)
	first.Stop()

	fresh := filepath.Join(t.TempDir(), "new-pod-state")
	second := lab.StartDriver(t, nfsmount.NewSystem(), func(cfg *config.Config) { cfg.StateDir = fresh })
	c = lab.Connect(t, second.Endpoint)
	c.Delete(t, v)
	waitTrashEmpty(t)
	if exists(onExport("pvc-long-options")) {
		t.Error("volume directory still on the share after DeleteVolume by a controller with an empty state directory")
	}
	mounts := lab.Sh(t, "cat /proc/mounts")
	var found bool
	for _, l := range strings.Split(mounts, "\n") {
		if strings.Contains(l, fresh) {
			found = true
			if !strings.Contains(l, "vers=4.2") {
				t.Errorf("share mounted without the ID's version: %s", l)
			}
		}
	}
	if !found {
		t.Errorf("no share mount under the new state directory %s", fresh)
	}
}
