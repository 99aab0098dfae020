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

// hostileIDs are volume IDs a buggy or hostile caller could send.
func hostileIDs() []string {
	share := strings.TrimPrefix(lab.Export(), "/")
	srv := lab.Server()
	long := strings.Repeat("x", 10000)
	return []string{
		"..", "../..", "/", "/etc", ".", "", long, "a\x00b", "%2e%2e%2f%2e%2e",
		"n1|" + srv + "|/export/..|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		"n1|" + srv + "|/|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		"n1|" + srv + "|%2Fexport|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		"n1|" + srv + "|/export%00|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		"n1|" + srv + "|/export|../../../../../../../..aa.bbbbbbbb|",
		"n1|::1|/export|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		"n1|[::1]|/export|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		"n1|fe80::1%25lo|/export|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|",
		srv + "#" + share + "#../../etc#x#delete",
		srv + "#" + share + "/..#x#y#delete",
		srv + "#..#x",
		srv + "#" + share + "#.nfsdir#x#delete",
		srv + "#" + share + "#.nfsdir/volumes#x#delete",
		srv + "#" + share + "##x#delete",
		srv + "#/#" + share + "#x#delete",
		srv + "#" + share + "#pvc-sibling#x#delete",
		srv + "#" + share + "#pvc-sibling#x#archive",
		"::1#" + share + "#pvc-sibling#x#delete",
		"[::1]#" + share + "#pvc-sibling",
		"fe80::1%lo#" + share + "#x",
		srv + "#" + share + "#pvc-sibling/../..#x#delete",
	}
}

// TestHostileInput runs a corpus of hostile IDs, parameters, templates and
// target paths, and plants symlinks in a volume that point at the share
// root, "/" and a sibling volume before deleting and archiving it. Canaries
// outside the managed directory, in a sibling volume and on the guest's root
// file system must be untouched.
func TestHostileInput(t *testing.T) {
	c := start(t, nil)
	check := canaries(t)
	defer check()
	vc := lab.RWX("nfsvers=4.2")
	sib := c.Create(t, "pvc-sibling", params("onDelete", "retain"), vc)
	os.WriteFile(onExport("pvc-sibling/canary"), []byte("sibling"), 0o644)
	os.WriteFile("/canary-rootfs", []byte("root"), 0o644)
	defer func() {
		if b, err := os.ReadFile(onExport("pvc-sibling/canary")); err != nil || string(b) != "sibling" {
			t.Errorf("sibling volume's canary: %q %v", b, err)
		}
		if b, err := os.ReadFile("/canary-rootfs"); err != nil || string(b) != "root" {
			t.Errorf("root file system canary: %q %v", b, err)
		}
	}()
	allowed := map[codes.Code]bool{codes.OK: true, codes.InvalidArgument: true, codes.NotFound: true, codes.FailedPrecondition: true}

	target := filepath.Join(t.TempDir(), "t")
	for _, id := range hostileIDs() {
		if err := deleteErr(c, t, id); !allowed[status.Code(err)] {
			t.Errorf("DeleteVolume(%.60q): %v", id, err)
		}
		_, err := c.Controller.ValidateVolumeCapabilities(lab.Ctx(t, time.Minute), &csi.ValidateVolumeCapabilitiesRequest{VolumeId: id, VolumeCapabilities: []*csi.VolumeCapability{vc}})
		if !allowed[status.Code(err)] {
			t.Errorf("ValidateVolumeCapabilities(%.60q): %v", id, err)
		}
		// A csi-driver-nfs handle may publish (mounting destroys nothing);
		// anything published is unpublished again.
		err = c.TryPublish(lab.Ctx(t, time.Minute), &csi.Volume{VolumeId: id}, target, vc, true)
		if !allowed[status.Code(err)] && status.Code(err) != codes.Internal {
			t.Errorf("NodePublishVolume(%.60q): %v", id, err)
		}
		if lab.MountInfo(t, target) != "" {
			c.Unpublish(t, &csi.Volume{VolumeId: id}, target)
		}
		_, err = c.Node.NodeGetVolumeStats(lab.Ctx(t, time.Minute), &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: "/nonexistent/" + id})
		if !allowed[status.Code(err)] {
			t.Errorf("NodeGetVolumeStats(%.60q): %v", id, err)
		}
	}

	// Parameters and templates.
	for _, p := range []map[string]string{
		params("subDir", "../.."), params("subDir", "${pvc.metadata.name}", "csi.storage.k8s.io/pvc/name", "../.."),
		params("subDir", "${pvc.metadata.namespace}/${pvc.metadata.name}", "csi.storage.k8s.io/pvc/namespace", "pvc-sibling", "csi.storage.k8s.io/pvc/name", "x"),
		params("subDir", "pvc-sibling"), params("subDir", "pvc-sibling/inner"), params("subDir", strings.Repeat("y", 256)),
		params("subDir", "a\x00b"), params("server", lab.Server()+"/../"), params("share", lab.Export()+"/.."),
		params("share", lab.Export()+"/pvc-sibling", "subDir", ".."), params("server", "[::1"), params("server", "fe80::1%lo"),
		params("mountPermissions", "7777777"), params("uid", "-1"), params("onDelete", "shred"), params("subDir", ".nfsdir/volumes"),
	} {
		err := createErr(c, t, "pvc-hostile", p)
		if code := status.Code(err); code != codes.InvalidArgument && code != codes.AlreadyExists {
			t.Errorf("CreateVolume(%v): %v", p, err)
		}
	}
	// Strange but legal names stay literal names inside the share.
	for _, sub := range []string{"%2e%2e%2f", "..%2f..", "a..b", "...", strings.Repeat("z", 255)} {
		v := c.Create(t, "pvc-odd", params("subDir", sub), vc)
		if !exists(onExport(sub)) {
			t.Errorf("subDir %q not created as a literal name", sub)
		}
		c.Delete(t, v)
	}
	for _, tp := range []string{"relative/path", "../x", ""} {
		if err := c.TryPublish(lab.Ctx(t, time.Minute), sib, tp, vc, false); status.Code(err) != codes.InvalidArgument {
			t.Errorf("publish on target %q: %v", tp, err)
		}
	}

	// Symlinks planted by a pod, then delete and archive.
	for _, policy := range []string{"delete", "archive"} {
		name := "pvc-links-" + policy
		v := c.Create(t, name, params("onDelete", policy), vc)
		c.Publish(t, v, target, vc, false)
		for link, to := range map[string]string{"up": "..", "root": "/", "share": lab.Export(), "sib": "../pvc-sibling", "meta": "../.nfsdir"} {
			if err := os.Symlink(to, filepath.Join(target, link)); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(filepath.Join(target, "d"), 0o755)
		os.Symlink("../../pvc-sibling", filepath.Join(target, "d", "deep"))
		os.Symlink("/", filepath.Join(target, "d", "root"))
		c.Unpublish(t, v, target)
		// A template that walks through the planted link is refused.
		err := createErr(c, t, "pvc-walk", params("subDir", "${pvc.metadata.namespace}/${pvc.metadata.name}",
			"csi.storage.k8s.io/pvc/namespace", name, "csi.storage.k8s.io/pvc/name", "up"))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("template through %s/up: %v", name, err)
		}
		c.Delete(t, v)
	}
	waitTrashEmpty(t)
	if target, err := os.Readlink(onExport("archived-pvc-links-archive/up")); err != nil || target != ".." {
		t.Errorf("archived volume's link: %q %v", target, err)
	}
	os.RemoveAll(onExport("archived-pvc-links-archive"))
	c.Delete(t, sib)
}
