package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/volumeid"
	"github.com/nfsdir/nfsdir/tests/lab"
)

// recordOnShare reads the record of a volume ID from the share.
func recordOnShare(t *testing.T, volumeID string) map[string]any {
	t.Helper()
	return recordOn(t, lab.Export(), volumeID)
}

// recordOn reads the record of a volume ID from the export share, on the
// server's side.
func recordOn(t *testing.T, share, volumeID string) map[string]any {
	t.Helper()
	id, err := volumeid.Parse(volumeID)
	if err != nil {
		t.Fatal(err)
	}
	target, err := os.Readlink(filepath.Join(share, ".nfsdir/volumes", id.Key))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if err := json.Unmarshal([]byte(target), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExpandOnRealNFS: ControllerExpandVolume records the new capacity on
// the share while the volume is mounted and written; shrinking is
// OutOfRange; the ID of a deleted volume never expands the volume created
// since at the same directory; nothing is left in the records directory.
func TestExpandOnRealNFS(t *testing.T) {
	c := start(t, nil)
	temps := tempRecords(t)
	vc := lab.RWX("nfsvers=4.1")
	v := c.Create(t, "pvc-grow", params("onDelete", "delete"), vc)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	os.WriteFile(filepath.Join(target, "data"), []byte("kept"), 0o644)
	expand := func(id string, bytes int64) (*csi.ControllerExpandVolumeResponse, error) {
		return c.Controller.ControllerExpandVolume(lab.Ctx(t, time.Minute), &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: bytes}})
	}
	r, err := expand(v.VolumeId, 5<<30)
	if err != nil || r.CapacityBytes != 5<<30 || r.NodeExpansionRequired {
		t.Fatalf("expand: %v %v", r, err)
	}
	if got := recordOnShare(t, v.VolumeId)["capacityBytes"]; got != float64(5<<30) {
		t.Errorf("capacity on the share: %v", got)
	}
	if _, err := expand(v.VolumeId, 1<<30); status.Code(err) != codes.OutOfRange {
		t.Errorf("shrink: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "kept" {
		t.Errorf("data after expand: %q %v", b, err)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
	later := c.Create(t, "pvc-grow", params("onDelete", "delete"), vc)
	if _, err := expand(v.VolumeId, 9<<30); status.Code(err) != codes.NotFound {
		t.Errorf("expand with the deleted volume's ID: %v", err)
	}
	if got := recordOnShare(t, later.VolumeId)["capacityBytes"]; got != float64(later.CapacityBytes) {
		t.Errorf("the later volume's capacity changed to %v", got)
	}
	recordNames(t, temps...) // fails the test on records it left under a temporary name
	c.Delete(t, later)
}
