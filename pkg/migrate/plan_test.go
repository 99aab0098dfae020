package migrate

import (
	"path"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/safepath"
)

const server = "192.0.2.10"

// nfsdirClass is an nfsdir StorageClass on server:/srv.
func nfsdirClass(driver string) storagev1.StorageClass {
	return storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "nfsdir"}, Provisioner: driver,
		Parameters: map[string]string{"server": server, "share": "/srv"}, MountOptions: []string{"nfsvers=4.1"}}
}

// subdirClass is nfs-subdir-external-provisioner's class with params.
func subdirClass(name string, params map[string]string) storagev1.StorageClass {
	return storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: NFSSubdirName, Parameters: params}
}

// bound returns a PV bound to claim ns/name and the claim.
func bound(pv string, src corev1.PersistentVolumeSource, ns, name string) (corev1.PersistentVolume, corev1.PersistentVolumeClaim) {
	uid := types.UID("uid-" + ns + "-" + name)
	p := corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              "nfs-client",
			PersistentVolumeSource:        src,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: uid},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	c := corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: pv}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	return p, c
}

// subdirPV is what nfs-subdir-external-provisioner makes for claim ns/name
// with NFS_PATH /srv: the directory <namespace>-<claim>-<pv>.
func subdirPV(pv, ns, name string) (corev1.PersistentVolume, corev1.PersistentVolumeClaim) {
	p, c := bound(pv, corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: server, Path: "/srv/" + ns + "-" + name + "-" + pv}}, ns, name)
	p.Annotations = map[string]string{AnnProvisionedBy: NFSSubdirName}
	return p, c
}

// csiPV is what csi-driver-nfs makes: handle server#share#subDir#uuid#onDelete.
func csiPV(pv, handle, ns, name string) (corev1.PersistentVolume, corev1.PersistentVolumeClaim) {
	return bound(pv, corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriverNFSName, VolumeHandle: handle,
		VolumeAttributes: map[string]string{"server": server, "share": "/srv", "subdir": pv}}}, ns, name)
}

func byPV(t *testing.T, p Plan) map[string]Item {
	t.Helper()
	m := map[string]Item{}
	for _, it := range p.Items {
		m[it.PV] = it
	}
	return m
}

func TestPlanNFSSubdir(t *testing.T) {
	in := Input{From: FromNFSSubdir, Driver: "nfsdir.csi.io", Classes: []storagev1.StorageClass{nfsdirClass("nfsdir.csi.io"),
		subdirClass("nfs-client", nil), subdirClass("nfs-delete", map[string]string{"archiveOnDelete": "false"}),
		subdirClass("nfs-retain", map[string]string{"onDelete": "retain", "archiveOnDelete": "false"})}}
	add := func(pv corev1.PersistentVolume, c corev1.PersistentVolumeClaim) {
		in.PVs, in.Claims = append(in.PVs, pv), append(in.Claims, c)
	}
	add(subdirPV("pv-ok", "team", "data"))
	p, c := subdirPV("pv-del", "team", "scratch")
	p.Spec.StorageClassName = "nfs-delete"
	add(p, c)
	p, c = subdirPV("pv-keep", "team", "keep")
	p.Spec.StorageClassName = "nfs-retain"
	add(p, c)
	p, c = subdirPV("pv-retain-policy", "team", "r")
	p.Spec.PersistentVolumeReclaimPolicy = corev1.PersistentVolumeReclaimRetain
	p.Spec.StorageClassName = "nfs-delete"
	add(p, c)
	p, c = subdirPV("pv-gone-class", "team", "g")
	p.Spec.StorageClassName = "deleted-since"
	add(p, c)
	// Refusals.
	p, c = subdirPV("pv-unbound", "team", "u")
	p.Status.Phase = corev1.VolumeReleased
	add(p, c)
	p, _ = subdirPV("pv-no-claim", "team", "missing")
	in.PVs = append(in.PVs, p)
	p, c = subdirPV("pv-other-uid", "team", "o")
	c.UID = "recreated"
	add(p, c)
	p, c = subdirPV("pv-claim-elsewhere", "team", "e")
	c.Spec.VolumeName = "another-pv"
	add(p, c)
	p, c = subdirPV("pv-server", "team", "s")
	p.Spec.NFS.Server = "nfs.elsewhere.example"
	add(p, c)
	p, c = subdirPV("pv-outside", "team", "x")
	p.Spec.NFS.Path = "/home/team-x"
	add(p, c)
	p, c = subdirPV("pv-root", "team", "root")
	p.Spec.NFS.Path = "/srv/"
	add(p, c)
	p, c = subdirPV("pv-meta", "team", "meta")
	p.Spec.NFS.Path = "/srv/.nfsdir/volumes"
	add(p, c)
	p, c = subdirPV("pv-dup1", "team", "d1")
	p.Spec.NFS.Path = "/srv/shared"
	add(p, c)
	p, c = subdirPV("pv-dup2", "team", "d2")
	p.Spec.NFS.Path = "/srv/shared/"
	add(p, c)
	p, c = subdirPV("pv-outer", "team", "outer")
	p.Spec.NFS.Path = "/srv/tree"
	add(p, c)
	// A static PV of someone else's, inside pv-outer's directory.
	p, c = bound("static-inner", corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: server, Path: "/srv/tree/inner"}}, "ops", "inner")
	add(p, c)
	// Not the incumbent's: left out of the plan.
	p, c = bound("other-driver", corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: server, Path: "/srv/x"}}, "ops", "x")
	add(p, c)

	plan, err := MakePlan(in)
	if err != nil {
		t.Fatal(err)
	}
	items := byPV(t, plan)
	for name, want := range map[string]params.OnDelete{"pv-ok": params.Archive, "pv-del": params.Delete, "pv-keep": params.Retain,
		"pv-retain-policy": params.Retain, "pv-gone-class": params.Archive} {
		it := items[name]
		if it.Action != Replace || it.OnDelete != want || it.Share.Class != "nfsdir" || it.CapacityBytes != 1<<30 {
			t.Errorf("%s: %+v, want Replace with onDelete %s", name, it, want)
		}
	}
	if it := items["pv-ok"]; it.SubDir != "team-data-pv-ok" || it.Claim != "team/data" || it.LegacyID != "" {
		t.Errorf("pv-ok: %+v", it)
	}
	for name, reason := range map[string]string{
		"pv-unbound":         "not bound",
		"pv-no-claim":        "does not exist",
		"pv-other-uid":       "another object",
		"pv-claim-elsewhere": `names volume "another-pv"`,
		"pv-server":          "not the server of any nfsdir StorageClass",
		"pv-outside":         "outside every share",
		"pv-root":            "whole share",
		"pv-meta":            "metadata area",
		"pv-dup1":            "PV pv-dup2 uses the same directory",
		"pv-dup2":            "PV pv-dup1 uses the same directory",
		"pv-outer":           "PV static-inner's directory lies inside it",
	} {
		if it := items[name]; it.Action != Refuse || !strings.Contains(it.Reason, reason) {
			t.Errorf("%s: %+v, want refused for %q", name, it, reason)
		}
	}
	if _, ok := items["other-driver"]; ok {
		t.Error("a PV of another provisioner is in the plan")
	}
	if _, ok := items["static-inner"]; ok {
		t.Error("a static PV is in the plan")
	}
	if n := plan.Counts(); n[Replace] != 5 || n[Refuse] != 11 {
		t.Errorf("counts %v", n)
	}
	// Selection.
	in.Selected = func(pv *corev1.PersistentVolume) bool { return pv.Name == "pv-ok" }
	if plan, _ := MakePlan(in); len(plan.Items) != 1 {
		t.Errorf("selected plan %+v", plan.Items)
	}
}

func TestPlanCSIDriverNFS(t *testing.T) {
	in := Input{From: FromCSIDriverNFS, Driver: "nfsdir.csi.io", Classes: []storagev1.StorageClass{nfsdirClass("nfsdir.csi.io")}}
	add := func(pv corev1.PersistentVolume, c corev1.PersistentVolumeClaim) {
		in.PVs, in.Claims = append(in.PVs, pv), append(in.Claims, c)
	}
	add(csiPV("pvc-1", server+"#srv#pvc-1#pvc-1#archive", "team", "a"))
	add(csiPV("pvc-2", server+"#srv#pvc-2#pvc-2#", "team", "b"))
	p, c := csiPV("pvc-3", server+"#srv#pvc-3#pvc-3#retain", "team", "c")
	add(p, c)
	add(csiPV("pvc-nested-share", server+"#srv/sub#pvc-4#pvc-4#delete", "team", "d"))
	add(csiPV("pvc-bad", "not-a-handle", "team", "e"))
	add(csiPV("pvc-root", server+"#srv##pvc-5#delete", "team", "f"))
	items := byPV(t, must(MakePlan(in)))
	for name, want := range map[string]struct {
		sub string
		od  params.OnDelete
	}{"pvc-1": {"pvc-1", params.Archive}, "pvc-2": {"pvc-2", params.Delete}, "pvc-3": {"pvc-3", params.Retain}, "pvc-nested-share": {"sub/pvc-4", params.Delete}} {
		if it := items[name]; it.Action != Replace || it.SubDir != want.sub || it.OnDelete != want.od {
			t.Errorf("%s: %+v, want Replace of %s with %s", name, it, want.sub, want.od)
		}
	}
	if _, ok := items["pvc-bad"]; ok {
		t.Error("a PV with a handle csi-driver-nfs never writes is in the plan")
	}
	if it := items["pvc-root"]; it.Action != Refuse || !strings.Contains(it.Reason, "whole share") {
		t.Errorf("pvc-root: %+v", it)
	}

	// Drop-in: nfsdir serves as nfs.csi.k8s.io; PVs are kept, with their handle.
	in.Driver = CSIDriverNFSName
	in.Classes = []storagev1.StorageClass{nfsdirClass(CSIDriverNFSName)}
	// nfsdir's own new volumes under that name are not the incumbent's.
	add(bound("pvc-new", corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriverNFSName,
		VolumeHandle: "n1|" + server + "|/srv|aaaaaaaaaaaaaaaaaaaa.bbbbbbbb|", VolumeAttributes: map[string]string{"subDir": "pvc-new"}}}, "team", "new"))
	items = byPV(t, must(MakePlan(in)))
	if it := items["pvc-1"]; it.Action != Keep || it.LegacyID != server+"#srv#pvc-1#pvc-1#archive" || it.SubDir != "pvc-1" {
		t.Errorf("drop-in pvc-1: %+v", it)
	}
	if it := items["pvc-nested-share"]; it.Action != Refuse || !strings.Contains(it.Reason, "share") {
		t.Errorf("drop-in with another share than the handle's: %+v", it)
	}
	if _, ok := items["pvc-new"]; ok {
		t.Error("nfsdir's own volume is in the drop-in plan")
	}
	// Kept once: migrated.
	for i := range in.PVs {
		if in.PVs[i].Name == "pvc-1" {
			in.PVs[i].Annotations = map[string]string{AnnMigratedFrom: FromCSIDriverNFS}
		}
	}
	if it := byPV(t, must(MakePlan(in)))["pvc-1"]; it.Action != Done {
		t.Errorf("kept PV: %+v, want Done", it)
	}
	if _, err := MakePlan(Input{From: "rook"}); err == nil {
		t.Error("unknown incumbent accepted")
	}
}

func must(p Plan, err error) Plan {
	if err != nil {
		panic(err)
	}
	return p
}

// FuzzPlanStaysInsideTheShare: whatever a PV says (the incumbent's
// objects are anyone's to write), an item the plan would act on names a
// clean directory strictly below a known share, never its metadata area.
func FuzzPlanStaysInsideTheShare(f *testing.F) {
	f.Add(server, "/srv/team-data-pv", "pv", server+"#srv#pvc-1#pvc-1#delete")
	f.Add(server, "/srv/../etc", "pv", server+"#srv#../..#x#delete")
	f.Add(server, "/srv/.nfsdir/volumes", "pv", server+"#srv/.nfsdir#x#x#")
	f.Add("192.0.2.10.", "/srv//a/./b", "p", "#srv#a#b#c")
	f.Fuzz(func(t *testing.T, nfsServer, nfsPath, name, handle string) {
		for _, from := range []string{FromNFSSubdir, FromCSIDriverNFS} {
			in := Input{From: from, Driver: "nfsdir.csi.io", Classes: []storagev1.StorageClass{nfsdirClass("nfsdir.csi.io")}}
			p, c := subdirPV(name, "ns", "claim")
			p.Spec.NFS.Server, p.Spec.NFS.Path = nfsServer, nfsPath
			q, d := csiPV(name+"-csi", handle, "ns", "other")
			in.PVs, in.Claims = []corev1.PersistentVolume{p, q}, []corev1.PersistentVolumeClaim{c, d}
			plan, err := MakePlan(in)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range plan.Items {
				if it.Action != Keep && it.Action != Replace {
					continue
				}
				if err := safepath.CheckVolumePath(it.SubDir); err != nil || it.Share.Export.Share != "/srv" {
					t.Fatalf("%s plans %+v: %v", from, it, err)
				}
				if j := path.Join("/srv", it.SubDir); !strings.HasPrefix(j, "/srv/") || j == "/srv/.nfsdir" || strings.HasPrefix(j, "/srv/.nfsdir/") {
					t.Fatalf("%s plans %s", from, j)
				}
			}
		}
	})
}
