package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/tests/lab"
)

// TestModifyVolumeOnRealNFS: a VolumeAttributesClass changes a volume's
// onDelete policy at once (deleting it then keeps the directory) and its
// mount options from its next publish (the mount table shows them; the
// running mount is left alone); a replayed CreateVolume with the
// StorageClass's own parameters still answers with the volume; keys a
// class may not set are InvalidArgument naming them; mutable parameters
// given at CreateVolume land in the record.
func TestModifyVolumeOnRealNFS(t *testing.T) {
	c := start(t, nil)
	vc := lab.RWX("nfsvers=4.1")
	p := params("onDelete", "delete")
	v := c.Create(t, "pvc-modify", p, vc)
	target := filepath.Join(t.TempDir(), "t")
	c.Publish(t, v, target, vc, false)
	must(t, os.WriteFile(filepath.Join(target, "data"), []byte("kept"), 0o644))
	modify := func(id string, mp map[string]string) error {
		_, err := c.Controller.ControllerModifyVolume(lab.Ctx(t, time.Minute), &csi.ControllerModifyVolumeRequest{VolumeId: id, MutableParameters: mp})
		return err
	}
	for key, want := range map[string]string{"subDir": "cannot change", "XXX_FakeKey": "XXX_FakeKey", "uid": "cannot change"} {
		err := modify(v.VolumeId, map[string]string{key: "x"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), want) {
			t.Errorf("modify %s: %v, want InvalidArgument naming it", key, err)
		}
	}
	if err := modify(v.VolumeId, map[string]string{"onDelete": "retain", "mountOptions": "nfsvers=4.1,actimeo=7"}); err != nil {
		t.Fatal(err)
	}
	rec := recordOnShare(t, v.VolumeId)
	if rec["onDelete"] != "retain" || rec["publishOptions"] != "nfsvers=4.1,actimeo=7" || rec["modified"] != true {
		t.Fatalf("record after modify: %v", rec)
	}
	if strings.Contains(lab.MountInfo(t, target), "acregmin=7") {
		t.Error("the running mount changed options")
	}
	again, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: "pvc-modify", Parameters: p,
		VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil || again.Volume.VolumeId != v.VolumeId {
		t.Fatalf("CreateVolume replayed after modify: %v %v", again, err)
	}
	c.Unpublish(t, v, target)
	c.Publish(t, v, target, vc, false)
	if mi := lab.MountInfo(t, target); !strings.Contains(mi, "acregmin=7") {
		t.Errorf("mount after modify: %s, want acregmin=7", mi)
	}
	if b, err := os.ReadFile(filepath.Join(target, "data")); err != nil || string(b) != "kept" {
		t.Errorf("data after republish: %q %v", b, err)
	}
	c.Unpublish(t, v, target)
	c.Delete(t, v)
	dir := onExport(v.VolumeContext["subDir"])
	if _, err := os.Stat(filepath.Join(dir, "data")); err != nil {
		t.Errorf("the directory of a volume modified to onDelete retain was not kept: %v", err)
	}
	os.RemoveAll(dir)
	if err := modify(v.VolumeId, map[string]string{"onDelete": "delete"}); status.Code(err) != codes.NotFound {
		t.Errorf("modify a deleted volume: %v", err)
	}

	// Mutable parameters at creation.
	r, err := c.Controller.CreateVolume(lab.Ctx(t, time.Minute), &csi.CreateVolumeRequest{Name: "pvc-modify-vac", Parameters: p,
		MutableParameters:  map[string]string{"onDelete": "archive"},
		VolumeCapabilities: []*csi.VolumeCapability{vc}, CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 30}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := recordOnShare(t, r.Volume.VolumeId); rec["onDelete"] != "archive" {
		t.Errorf("record of a volume created with a class: %v", rec)
	}
	c.Delete(t, r.Volume)
	os.RemoveAll(onExport("archived-" + r.Volume.VolumeContext["subDir"]))
}
