package migrate_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nfsdir/nfsdir/pkg/kubeapi"
	"github.com/nfsdir/nfsdir/pkg/kubeapi/kubeapitest"
	"github.com/nfsdir/nfsdir/pkg/migrate"
	"github.com/nfsdir/nfsdir/pkg/params"
)

var ctx = context.Background()

// fakeShares records what Apply and Rollback asked of the shares.
type fakeShares struct {
	mu       sync.Mutex
	adopted  map[string]migrate.Item
	released []string
}

func (f *fakeShares) Adopt(_ context.Context, it migrate.Item) (string, map[string]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.adopted == nil {
		f.adopted = map[string]migrate.Item{}
	}
	f.adopted[it.PV] = it
	return "n1|192.0.2.10|/srv|key-" + it.PV + ".token|", map[string]string{"server": "192.0.2.10", "share": "/srv", "subDir": it.SubDir}, nil
}

func (f *fakeShares) Check(_ context.Context, it migrate.Item) error {
	if it.SubDir == "taken" {
		return errors.New(`directory "taken" already belongs to nfsdir volume "pvc-x"`)
	}
	return nil
}

func (f *fakeShares) Release(_ context.Context, it migrate.Item) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, it.PV)
	delete(f.adopted, it.PV)
	return nil
}

// bindOnCreate stands in for the PV controller: a PV created with a claim
// reference is bound at once.
func bindOnCreate(d *fake.FakeDynamicClient) {
	d.PrependReactor("create", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		u := a.(k8stesting.CreateAction).GetObject().(*unstructured.Unstructured)
		if _, ok, _ := unstructured.NestedMap(u.Object, "spec", "claimRef"); ok {
			_ = unstructured.SetNestedField(u.Object, "Bound", "status", "phase")
		}
		return false, nil, nil
	})
}

func subdirObjects() (*corev1.PersistentVolume, *corev1.PersistentVolumeClaim) {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-1", UID: "old-uid", Finalizers: []string{"kubernetes.io/pv-protection"},
			Annotations: map[string]string{migrate.AnnProvisionedBy: migrate.NFSSubdirName}, Labels: map[string]string{"team": "blue"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              "nfs-client",
			MountOptions:                  []string{"nfsvers=4.1", "hard"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "192.0.2.10", Path: "/srv/team-data-pv-1"}},
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: "team", Name: "data", UID: "claim-uid", ResourceVersion: "7"},
		},
		Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeBound},
	}
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "data", UID: "claim-uid"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv-1"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound}}
	return pv, c
}

var replaceItem = migrate.Item{PV: "pv-1", Claim: "team/data", Action: migrate.Replace, SubDir: "team-data-pv-1", OnDelete: params.Archive, CapacityBytes: 1 << 30}

func opts() migrate.Options {
	return migrate.Options{Namespace: "kube-system", Driver: "nfsdir.csi.io", Wait: 3 * time.Second}
}

func TestApplyReplacesThePVAndRollbackRestoresIt(t *testing.T) {
	pv, claim := subdirObjects()
	d := kubeapitest.Dynamic(t, pv, claim)
	bindOnCreate(d)
	kube := kubeapi.New(d)
	sh := &fakeShares{}
	plan := migrate.Plan{From: migrate.FromNFSSubdir, Items: []migrate.Item{replaceItem,
		{PV: "pv-refused", Action: migrate.Refuse, Reason: "x"}}}

	// The first create of the nfsdir PV fails: the old PV object is gone
	// by then, and the run stops with the old one saved.
	failed := false
	d.PrependReactor("create", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !failed {
			failed = true
			return true, nil, errors.New("apiserver went away")
		}
		return false, nil, nil
	})
	res := migrate.Apply(ctx, kube, sh, plan, opts())
	if len(res) != 1 || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "rerun") {
		t.Fatalf("interrupted Apply = %+v", res)
	}
	if got, _ := kube.PV(ctx, "pv-1"); got != nil {
		t.Fatalf("old PV still there: %+v", got)
	}
	// Resumed: the same plan again.
	for range 2 {
		if res := migrate.Apply(ctx, kube, sh, plan, opts()); len(res) != 1 || res[0].Err != nil {
			t.Fatalf("resumed Apply = %+v", res)
		}
	}
	np, err := kube.PV(ctx, "pv-1")
	if err != nil || np == nil || np.Spec.CSI == nil {
		t.Fatalf("nfsdir PV: %+v, %v", np, err)
	}
	if np.Spec.CSI.Driver != "nfsdir.csi.io" || np.Spec.CSI.VolumeHandle != "n1|192.0.2.10|/srv|key-pv-1.token|" ||
		np.Spec.CSI.VolumeAttributes["subDir"] != "team-data-pv-1" || np.Spec.NFS != nil ||
		np.Spec.ClaimRef.UID != "claim-uid" || np.Spec.ClaimRef.ResourceVersion != "" ||
		np.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || np.Spec.StorageClassName != "nfs-client" ||
		strings.Join(np.Spec.MountOptions, ",") != "nfsvers=4.1,hard" || np.Spec.Capacity.Storage().Value() != 1<<30 ||
		np.Annotations[migrate.AnnProvisionedBy] != "nfsdir.csi.io" || np.Annotations[migrate.AnnMigratedFrom] != migrate.FromNFSSubdir ||
		np.Labels["team"] != "blue" {
		t.Errorf("nfsdir PV: %+v", np)
	}
	if it := sh.adopted["pv-1"]; it.SubDir != "team-data-pv-1" || it.OnDelete != params.Archive {
		t.Errorf("adopted %+v", sh.adopted)
	}
	cms, _ := kube.ConfigMaps(ctx, "kube-system", migrate.LabelMigration+"="+migrate.FromNFSSubdir)
	if len(cms) != 1 || !strings.Contains(cms[0].Data["pv.json"], `"path":"/srv/team-data-pv-1"`) || !strings.Contains(cms[0].Data["pv.json"], `"persistentVolumeReclaimPolicy":"Delete"`) {
		t.Fatalf("saved PV: %+v", cms)
	}

	// Rollback: the saved PV is back, the directory released.
	for range 2 {
		res, err := migrate.Rollback(ctx, kube, sh, migrate.FromNFSSubdir, nil, opts())
		if err != nil || len(res) > 1 || (len(res) == 1 && res[0].Err != nil) {
			t.Fatalf("Rollback = %+v, %v", res, err)
		}
	}
	back, _ := kube.PV(ctx, "pv-1")
	if back == nil || back.Spec.NFS == nil || back.Spec.NFS.Path != "/srv/team-data-pv-1" || back.Spec.CSI != nil ||
		back.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || back.Annotations[migrate.AnnProvisionedBy] != migrate.NFSSubdirName {
		t.Errorf("restored PV: %+v", back)
	}
	if len(sh.released) != 1 || len(sh.adopted) != 0 {
		t.Errorf("released %v, adopted %v", sh.released, sh.adopted)
	}
	if cms, _ := kube.ConfigMaps(ctx, "kube-system", ""); len(cms) != 0 {
		t.Errorf("saved PVs left after the rollback: %d", len(cms))
	}
}

func TestApplyKeepsADropInPV(t *testing.T) {
	const handle = "192.0.2.10#srv#pvc-1#pvc-1#delete"
	pv, claim := subdirObjects()
	pv.Name, claim.Spec.VolumeName = "pvc-1", "pvc-1"
	pv.Annotations = map[string]string{migrate.AnnProvisionedBy: migrate.CSIDriverNFSName}
	pv.Spec.NFS = nil
	pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: migrate.CSIDriverNFSName, VolumeHandle: handle}
	d := kubeapitest.Dynamic(t, pv, claim)
	kube := kubeapi.New(d)
	sh := &fakeShares{}
	o := opts()
	o.Driver = migrate.CSIDriverNFSName
	it := migrate.Item{PV: "pvc-1", Claim: "team/data", Action: migrate.Keep, SubDir: "pvc-1", OnDelete: params.Delete, LegacyID: handle}
	policies := []string{}
	d.PrependReactor("patch", "persistentvolumes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		policies = append(policies, string(a.(k8stesting.PatchAction).GetPatch()))
		return false, nil, nil
	})
	if res := migrate.Apply(ctx, kube, sh, migrate.Plan{From: migrate.FromCSIDriverNFS, Items: []migrate.Item{it}}, o); len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Apply = %+v", res)
	}
	kept, _ := kube.PV(ctx, "pvc-1")
	if kept.UID != "old-uid" || kept.Spec.CSI.VolumeHandle != handle || kept.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete ||
		kept.Annotations[migrate.AnnMigratedFrom] != migrate.FromCSIDriverNFS {
		t.Errorf("kept PV: %+v", kept)
	}
	// Retain first, while the directory is adopted; then the policy back.
	if len(policies) != 2 || !strings.Contains(policies[0], `"Retain"`) || !strings.Contains(policies[1], `"Delete"`) {
		t.Errorf("patches %v", policies)
	}
	if sh.adopted["pvc-1"].LegacyID != handle {
		t.Errorf("adopted %+v", sh.adopted)
	}
	if res, err := migrate.Rollback(ctx, kube, sh, migrate.FromCSIDriverNFS, func(pv string) bool { return pv == "pvc-1" }, o); err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Rollback = %+v, %v", res, err)
	}
	kept, _ = kube.PV(ctx, "pvc-1")
	if _, ok := kept.Annotations[migrate.AnnMigratedFrom]; ok || kept.UID != "old-uid" || len(sh.released) != 1 {
		t.Errorf("rolled back: %+v, released %v", kept, sh.released)
	}
}

func TestApplyLeavesAStrangerAlone(t *testing.T) {
	pv, claim := subdirObjects()
	d := kubeapitest.Dynamic(t, pv, claim)
	kube := kubeapi.New(d)
	sh := &fakeShares{}
	// The PV was saved by a first run, then replaced by somebody else's.
	plan := migrate.Plan{From: migrate.FromNFSSubdir, Items: []migrate.Item{replaceItem}}
	d.PrependReactor("delete", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("stop here")
	})
	if res := migrate.Apply(ctx, kube, sh, plan, opts()); res[0].Err == nil {
		t.Fatal("delete failure not reported")
	}
	d.ReactionChain = d.ReactionChain[1:]
	if err := kube.DeletePV(ctx, "pv-1", "old-uid"); err != nil {
		t.Fatal(err)
	}
	stranger := pv.DeepCopy()
	stranger.UID, stranger.ResourceVersion = "stranger", ""
	if err := kube.CreatePV(ctx, stranger); err != nil {
		t.Fatal(err)
	}
	if res := migrate.Apply(ctx, kube, sh, plan, opts()); res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "left alone") {
		t.Errorf("stranger: %+v", res)
	}
	if got, _ := kube.PV(ctx, "pv-1"); got.Spec.NFS == nil {
		t.Errorf("the stranger PV was changed: %+v", got)
	}
}

func TestVetAndResume(t *testing.T) {
	plan := migrate.Vet(ctx, migrate.Plan{Items: []migrate.Item{{PV: "a", Action: migrate.Replace, SubDir: "taken"},
		{PV: "b", Action: migrate.Replace, SubDir: "free"}, {PV: "c", Action: migrate.Done, SubDir: "taken"}}}, &fakeShares{})
	if plan.Items[0].Action != migrate.Refuse || !strings.Contains(plan.Items[0].Reason, "already belongs") ||
		plan.Items[1].Action != migrate.Replace || plan.Items[2].Action != migrate.Done {
		t.Errorf("vetted %+v", plan.Items)
	}
	// A run stopped after deleting the old PV object: the next plan
	// resumes it from the saved item.
	pv, claim := subdirObjects()
	d := kubeapitest.Dynamic(t, pv, claim)
	kube := kubeapi.New(d)
	d.PrependReactor("create", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("stop here")
	})
	migrate.Apply(ctx, kube, &fakeShares{}, migrate.Plan{From: migrate.FromNFSSubdir, Items: []migrate.Item{replaceItem}}, opts())
	cms, _ := kube.ConfigMaps(ctx, "kube-system", "")
	resumed, err := migrate.MakePlan(migrate.Input{From: migrate.FromNFSSubdir, Driver: "nfsdir.csi.io", Saved: migrate.Saved(cms)})
	if err != nil || len(resumed.Items) != 1 || resumed.Items[0].Action != migrate.Replace || resumed.Items[0].SubDir != "team-data-pv-1" ||
		!strings.Contains(resumed.Items[0].Reason, "resumed") {
		t.Errorf("resumed plan %+v, %v", resumed.Items, err)
	}
}

// replaceOne is an nfs-subdir PV and its claim in a fake API server that
// binds PVs as they are made, and the plan that replaces the PV.
func replaceOne(t *testing.T) (*fake.FakeDynamicClient, *kubeapi.Client, *fakeShares, migrate.Plan) {
	t.Helper()
	pv, claim := subdirObjects()
	d := kubeapitest.Dynamic(t, pv, claim)
	bindOnCreate(d)
	return d, kubeapi.New(d), &fakeShares{}, migrate.Plan{From: migrate.FromNFSSubdir, Items: []migrate.Item{replaceItem}}
}

// forge replaces the saved copy of pv-1 with one whose PV mounts the
// node's root through hostPath, as whoever can write ConfigMaps in the
// state namespace could.
func forge(t *testing.T, kube *kubeapi.Client) {
	t.Helper()
	cms, err := kube.ConfigMaps(ctx, "kube-system", migrate.LabelMigration)
	if err != nil || len(cms) != 1 {
		t.Fatalf("saved copies: %v, %v", cms, err)
	}
	forged := cms[0].DeepCopy()
	forged.ResourceVersion, forged.UID = "", ""
	forged.Data["pv.json"] = strings.Replace(forged.Data["pv.json"], `"nfs":{"server":"192.0.2.10","path":"/srv/team-data-pv-1"}`, `"hostPath":{"path":"/"}`, 1)
	if forged.Data["pv.json"] == cms[0].Data["pv.json"] {
		t.Fatalf("nothing forged in %s", forged.Data["pv.json"])
	}
	if err := kube.DeleteConfigMap(ctx, "kube-system", forged.Name); err != nil {
		t.Fatal(err)
	}
	if err := kube.CreateConfigMap(ctx, forged); err != nil {
		t.Fatal(err)
	}
}

// A rollback restores only the saved copy the PV in its place vouches
// for: a forged ConfigMap is refused and nothing changes; a dry run
// changes nothing either; the genuine copy is restored.
func TestRollbackRestoresOnlyWhatNfsdirSaved(t *testing.T) {
	_, kube, sh, plan := replaceOne(t)
	if res := migrate.Apply(ctx, kube, sh, plan, opts()); len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Apply = %+v", res)
	}
	genuine, _ := kube.ConfigMaps(ctx, "kube-system", migrate.LabelMigration)
	forge(t, kube)
	res, err := migrate.Rollback(ctx, kube, sh, migrate.FromNFSSubdir, nil, opts())
	if err != nil || len(res) != 1 || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "is not the copy") {
		t.Errorf("Rollback of a forged copy = %+v, %v", res, err)
	}
	if now, _ := kube.PV(ctx, "pv-1"); now == nil || now.Spec.CSI == nil || now.Spec.HostPath != nil || len(sh.released) != 0 {
		t.Fatalf("after the refused rollback: PV %+v, released %v", now, sh.released)
	}

	// The genuine copy back: a dry run says what it would do, and does
	// nothing.
	if err := kube.DeleteConfigMap(ctx, "kube-system", genuine[0].Name); err != nil {
		t.Fatal(err)
	}
	genuine[0].ResourceVersion, genuine[0].UID = "", ""
	if err := kube.CreateConfigMap(ctx, &genuine[0]); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	dry := opts()
	dry.DryRun, dry.Log = true, &log
	if res, err := migrate.Rollback(ctx, kube, sh, migrate.FromNFSSubdir, nil, dry); err != nil || len(res) != 1 || res[0].Err != nil ||
		!strings.Contains(log.String(), "would restore the saved PV (NFS 192.0.2.10:/srv/team-data-pv-1") {
		t.Errorf("dry run = %+v, %v:\n%s", res, err, log.String())
	}
	if now, _ := kube.PV(ctx, "pv-1"); now == nil || now.Spec.CSI == nil || len(sh.released) != 0 {
		t.Fatalf("after the dry run: PV %+v, released %v", now, sh.released)
	}
	if res, err := migrate.Rollback(ctx, kube, sh, migrate.FromNFSSubdir, nil, opts()); err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Rollback = %+v, %v", res, err)
	}
	if back, _ := kube.PV(ctx, "pv-1"); back == nil || back.Spec.NFS == nil || back.Spec.HostPath != nil {
		t.Errorf("restored PV: %+v", back)
	}
}

// A migration resumed with a copy nfsdir did not write, while the PV it
// claims to save is still there, stops before changing the PV.
func TestApplyRefusesAForgedCopyOfALivePV(t *testing.T) {
	d, kube, sh, plan := replaceOne(t)
	// The copy nfsdir would write, planted beforehand and forged.
	failed := false
	d.PrependReactor("patch", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !failed {
			failed = true
			return true, nil, errors.New("apiserver went away")
		}
		return false, nil, nil
	})
	if res := migrate.Apply(ctx, kube, sh, plan, opts()); len(res) != 1 || res[0].Err == nil {
		t.Fatalf("interrupted Apply = %+v", res)
	}
	forge(t, kube)
	res := migrate.Apply(ctx, kube, sh, plan, opts())
	if len(res) != 1 || res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "is not the copy") {
		t.Errorf("Apply with a forged copy = %+v", res)
	}
	if now, _ := kube.PV(ctx, "pv-1"); now == nil || now.Spec.NFS == nil || now.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || len(sh.adopted) != 0 {
		t.Errorf("the PV was changed: %+v, adopted %v", now, sh.adopted)
	}
}
