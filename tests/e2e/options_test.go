package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// optionValue is the value of option key in a mount table line.
func optionValue(line, key string) string {
	for _, f := range strings.FieldsFunc(line, func(r rune) bool { return r == ',' || r == ' ' }) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestMountOptionsNotAppliedOnRealNFS: the kernel gives a second mount of
// the export, asking only for another timeo, the first mount's superblock
// and its timeo. NodePublishVolume succeeds and NodeGetVolumeHealth
// reports the volume DEGRADED (MountOptionsNotApplied) naming timeo as the
// mount table shows it; with strictMountOptions the same publish is
// FailedPrecondition and nothing stays mounted; with nosharecache the
// mount gets its timeo and its health is clean.
func TestMountOptionsNotAppliedOnRealNFS(t *testing.T) {
	c := start(t, nil)
	base := []string{"nfsvers=4.2", "hard", "timeo=600"}
	first := c.Create(t, "pvc-opts-first", params(), lab.RWX(base...))
	second := c.Create(t, "pvc-opts-second", params(), lab.RWX(base...))
	strict := c.Create(t, "pvc-opts-strict", params("strictMountOptions", "true"), lab.RWX(base...))
	defer c.Delete(t, first)
	defer c.Delete(t, second)
	defer c.Delete(t, strict)
	health := func(v *csi.Volume, target string) []*csi.VolumeHealth_VolumeHealthEntry {
		r, err := c.Node.NodeGetVolumeHealth(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeHealthRequest{VolumeId: v.VolumeId, VolumePublishPath: target})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetVolumeHealth().GetHealthStatuses()
	}

	t1 := filepath.Join(t.TempDir(), "first")
	c.Publish(t, first, t1, lab.RWX(base...), false)
	defer c.Unpublish(t, first, t1)
	line1 := lab.MountInfo(t, t1)
	t.Logf("first: %s", line1)
	if h := health(first, t1); len(h) != 0 {
		t.Errorf("the first mount got other options than it asked for: %v", h)
	}

	other := []string{"nfsvers=4.2", "hard", "timeo=150"}
	t2 := filepath.Join(t.TempDir(), "second")
	c.Publish(t, second, t2, lab.RWX(other...), false)
	line2 := lab.MountInfo(t, t2)
	t.Logf("second: %s", line2)
	if got := optionValue(line2, "timeo"); got != optionValue(line1, "timeo") {
		t.Fatalf("the kernel gave the second mount timeo=%s, not the first mount's %s: the scenario needs a shared superblock", got, optionValue(line1, "timeo"))
	}
	h := health(second, t2)
	if len(h) != 1 || h[0].Status != csi.VolumeHealthErrorType_DEGRADED || h[0].Reason != "MountOptionsNotApplied" ||
		!strings.Contains(h[0].Message, "timeo=150 (got timeo="+optionValue(line1, "timeo")+")") {
		t.Errorf("health of the second mount: %v", h)
	}
	c.Unpublish(t, second, t2)

	t3 := filepath.Join(t.TempDir(), "strict")
	err := c.TryPublish(lab.Ctx(t, time.Minute), strict, t3, lab.RWX(other...), false)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "timeo=150") || !strings.Contains(err.Error(), "strictMountOptions") {
		t.Errorf("strict publish: %v, want FailedPrecondition naming timeo", err)
	}
	if line := lab.MountInfo(t, t3); line != "" {
		t.Errorf("a strict publish that did not get its options stays mounted: %s", line)
		c.Unpublish(t, strict, t3)
	}

	own := append(other, "nosharecache")
	t4 := filepath.Join(t.TempDir(), "own")
	c.Publish(t, strict, t4, lab.RWX(own...), false)
	if line := lab.MountInfo(t, t4); optionValue(line, "timeo") != "150" {
		t.Errorf("with nosharecache: %s", line)
	}
	if h := health(strict, t4); len(h) != 0 {
		t.Errorf("with nosharecache: %v", h)
	}
	c.Unpublish(t, strict, t4)
}
