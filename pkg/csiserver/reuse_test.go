package csiserver

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nfsdir/nfsdir/pkg/kubeapi"
	"github.com/nfsdir/nfsdir/pkg/kubeapi/kubeapitest"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// TestReuseDirectoryAfterTheClaimIsMadeAgain: with reuseDirectory, a new
// volume of the same claim gets the earlier volume's directory (and ID)
// once the earlier PersistentVolume is gone from the cluster; not while
// it exists, not from another cluster, and not without the claim's name.
// Every record names its claim and the cluster (the kube-system UID).
func TestReuseDirectoryAfterTheClaimIsMadeAgain(t *testing.T) {
	kube := kubeapi.New(kubeapitest.Dynamic(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "uid-1"}}))
	var d *Driver
	conn, m, _ := startFakeWith(t, nil, func(dr *Driver) { d, dr.controller.cluster = dr, &cluster{api: kube} })
	ctl := csi.NewControllerClient(conn)
	create := func(pv string, reuse bool, extra ...string) (*csi.CreateVolumeResponse, error) {
		p := map[string]string{"server": "nfs.example", "share": "/export", "subDir": "${pvc.metadata.namespace}/${pvc.metadata.name}",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "team-a", "csi.storage.k8s.io/pv/name": pv}
		if reuse {
			p["reuseDirectory"] = "true"
		}
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i+1] == "" {
				delete(p, extra[i])
			} else {
				p[extra[i]] = extra[i+1]
			}
		}
		return ctl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: pv, VolumeCapabilities: []*csi.VolumeCapability{rwx}, Parameters: p})
	}
	first, err := create("pvc-1", false)
	if err != nil {
		t.Fatal(err)
	}
	share := m.ExportDir("nfs.example", "/export")
	rec := readRecordFile(t, share, "team-a/data")
	if rec.Claim != "team-a/data" || rec.Cluster != "uid-1" {
		t.Fatalf("record names claim %q, cluster %q", rec.Claim, rec.Cluster)
	}
	if err := os.WriteFile(filepath.Join(share, "team-a/data/kept"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := create("pvc-2", false); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("without reuseDirectory: %v", err)
	}
	// The earlier PersistentVolume still exists: refused.
	if err := kube.CreatePV(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := create("pvc-2", true); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "still belongs to PersistentVolume pvc-1") {
		t.Fatalf("earlier PV exists: %v", err)
	}
	if err := kube.DeletePV(ctx, "pvc-1", ""); err != nil {
		t.Fatal(err)
	}
	// Another cluster's controller: refused, naming the record's cluster.
	d.controller.cluster = &cluster{id: "other", api: kube}
	if _, err := create("pvc-2", true); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), `made in cluster "uid-1", and this is cluster "other"`) {
		t.Fatalf("another cluster: %v", err)
	}
	d.controller.cluster = &cluster{api: kube}
	if _, err := create("pvc-2", true, "csi.storage.k8s.io/pvc/name", "", "subDir", "team-a/data"); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "--extra-create-metadata") {
		t.Fatalf("no claim name: %v", err)
	}
	again, err := create("pvc-2", true)
	if err != nil {
		t.Fatal(err)
	}
	if again.Volume.VolumeId != first.Volume.VolumeId {
		t.Errorf("taken over as %s, the directory's volume ID is %s", again.Volume.VolumeId, first.Volume.VolumeId)
	}
	if rec := readRecordFile(t, share, "team-a/data"); rec.Name != "pvc-2" || rec.Previous != "pvc-1" {
		t.Errorf("record after the takeover: %+v", rec)
	}
	if b, err := os.ReadFile(filepath.Join(share, "team-a/data/kept")); err != nil || string(b) != "x" {
		t.Errorf("the data: %q, %v", b, err)
	}
	// No Kubernetes API: refused, saying why.
	d.controller.cluster = &cluster{id: "uid-1"}
	if _, err := create("pvc-3", true); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "needs the Kubernetes API") {
		t.Fatalf("no API: %v", err)
	}
}

// readRecordFile reads the record of the volume directory subDir from the
// share's metadata area, as the fake server holds it.
func readRecordFile(t *testing.T, share, subDir string) provision.Record {
	t.Helper()
	b, err := os.Readlink(filepath.Join(share, ".nfsdir/volumes", volumeid.KeyForDir(subDir)))
	if err != nil {
		t.Fatal(err)
	}
	var r provision.Record
	if err := json.Unmarshal([]byte(b), &r); err != nil {
		t.Fatal(err)
	}
	return r
}
