package csiserver

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
)

// TestNodeMetricCountsMountsBySecurity: nfsdir_node_volume_mounts counts
// the node's published NFS mounts by the security the mount table shows,
// and forgets a mount once it is unpublished.
func TestNodeMetricCountsMountsBySecurity(t *testing.T) {
	var d *Driver
	conn, _, _ := startFakeWith(t, nil, func(x *Driver) { d = x })
	ctl, node := csi.NewControllerClient(conn), csi.NewNodeClient(conn)
	scrape := func() string {
		rec := httptest.NewRecorder()
		d.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		var lines []string
		for _, l := range strings.Split(rec.Body.String(), "\n") {
			if strings.HasPrefix(l, "nfsdir_node_volume_mounts{") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	var targets []string
	for i, flags := range [][]string{{"nfsvers=4.2", "sec=krb5p"}, {"nfsvers=4.2", "sec=krb5p"}, {"nfsvers=4.2", "sec=sys", "xprtsec=mtls"}} {
		v := createFake(t, ctl, "pvc-"+string(rune('a'+i)), nil)
		target := filepath.Join(t.TempDir(), "t")
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: v.VolumeId, TargetPath: target,
			VolumeCapability: mountCap(csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER, flags...), VolumeContext: v.VolumeContext}); err != nil {
			t.Fatal(err)
		}
		targets = append(targets, v.VolumeId+" "+target)
	}
	want := `nfsdir_node_volume_mounts{security="sec=krb5p,xprtsec=none"} 2` + "\n" + `nfsdir_node_volume_mounts{security="sec=sys,xprtsec=mtls"} 1`
	if got := scrape(); got != want {
		t.Errorf("metrics:\n%s\nwant:\n%s", got, want)
	}
	id, target, _ := strings.Cut(targets[2], " ")
	if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
		t.Fatal(err)
	}
	if got := scrape(); got != `nfsdir_node_volume_mounts{security="sec=krb5p,xprtsec=none"} 2` {
		t.Errorf("after an unpublish: %s", got)
	}
}
