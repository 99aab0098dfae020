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

	"github.com/nfsdir/nfsdir/pkg/config"
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

// TestMountServerOnRealNFS: a VolumeAttributesClass's mountServer moves a
// volume's mounts to another address of its server (127.0.0.2 for
// 127.0.0.1) once the controller has seen the volume's sealed directory
// there: the next publish mounts from it and sees the data, the running
// mount stays; an address with no server is Unavailable within the mount
// timeout and changes nothing; "" goes back. NFSv3: an NFSv4 client would
// carry the new address's mount over its client of the old one.
func TestMountServerOnRealNFS(t *testing.T) {
	c := start(t, func(cfg *config.Config) { cfg.MountTimeout = 5 * time.Second })
	vc := lab.RWX("nfsvers=3", "nolock")
	v := c.Create(t, "pvc-mount-server", params(), vc)
	before := filepath.Join(t.TempDir(), "before")
	c.Publish(t, v, before, vc, false)
	must(t, os.WriteFile(filepath.Join(before, "data"), []byte("same"), 0o644))
	modify := func(server string) error {
		_, err := c.Controller.ControllerModifyVolume(lab.Ctx(t, time.Minute), &csi.ControllerModifyVolumeRequest{VolumeId: v.VolumeId,
			MutableParameters: map[string]string{"mountServer": server}})
		return err
	}
	source := func(target string) string {
		f := strings.Fields(lab.MountInfo(t, target))
		if len(f) < 2 {
			t.Fatalf("%s not mounted", target)
		}
		return f[len(f)-2]
	}
	if err := modify("127.0.0.2"); err != nil {
		t.Fatal(err)
	}
	if rec := recordOnShare(t, v.VolumeId); rec["mountServer"] != "127.0.0.2" {
		t.Fatalf("record after the move: %v", rec)
	}
	after := filepath.Join(t.TempDir(), "after")
	c.Publish(t, v, after, vc, false)
	if got := source(after); !strings.HasPrefix(got, "127.0.0.2:") {
		t.Errorf("published after the move from %s", got)
	}
	if got := source(before); !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("the running mount changed to %s", got)
	}
	if b, err := os.ReadFile(filepath.Join(after, "data")); err != nil || string(b) != "same" {
		t.Errorf("data through the new address: %q %v", b, err)
	}
	start := time.Now()
	if err := modify("192.0.2.1"); status.Code(err) != codes.Unavailable && status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("move to an address with no server: %v", err)
	}
	t.Logf("move to an address with no server refused after %s", time.Since(start).Round(time.Millisecond))
	if rec := recordOnShare(t, v.VolumeId); rec["mountServer"] != "127.0.0.2" {
		t.Errorf("a refused move changed the record: %v", rec)
	}
	c.Unpublish(t, v, after)
	if err := modify(""); err != nil {
		t.Fatal(err)
	}
	c.Publish(t, v, after, vc, false)
	if got := source(after); !strings.HasPrefix(got, "127.0.0.1:") {
		t.Errorf("published after moving back from %s", got)
	}
	c.Unpublish(t, v, after)
	c.Unpublish(t, v, before)
	c.Delete(t, v)
}
