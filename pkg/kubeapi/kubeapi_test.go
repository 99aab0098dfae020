package kubeapi_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/kubeapi"
	"github.com/nfsdir/nfsdir/pkg/kubeapi/kubeapitest"
)

var ctx = context.Background()

func TestClaimReadsLabelsAndAnnotationsAndClassifiesFailures(t *testing.T) {
	d := kubeapitest.Dynamic(t, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "data",
		Labels: map[string]string{"team": "blue"}, Annotations: map[string]string{"nfs.io/storage-path": "p"}}})
	c := kubeapi.New(d)
	got, err := c.Claim(ctx, "team-a", "data")
	if err != nil || got.Labels["team"] != "blue" || got.Annotations["nfs.io/storage-path"] != "p" {
		t.Fatalf("Claim = %+v, %v", got, err)
	}
	if _, err := c.Claim(ctx, "team-a", "gone"); fault.KindOf(err) != fault.NotFound {
		t.Errorf("missing claim: %v (%v)", err, fault.KindOf(err))
	}
	if _, err := c.Claim(ctx, "", "data"); fault.KindOf(err) != fault.InvalidArgument {
		t.Errorf("no namespace: %v", err)
	}
	gr := schema.GroupResource{Resource: "persistentvolumeclaims"}
	for _, tt := range []struct {
		err  error
		want fault.Kind
	}{
		{apierrors.NewForbidden(gr, "data", nil), fault.FailedPrecondition},
		{apierrors.NewServiceUnavailable("etcd"), fault.Unavailable},
		{apierrors.NewTimeoutError("slow", 1), fault.Unavailable},
	} {
		d.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
		if _, err := c.Claim(ctx, "team-a", "data"); fault.KindOf(err) != tt.want {
			t.Errorf("%v: kind %v, want %v", tt.err, fault.KindOf(err), tt.want)
		}
	}
}

func TestObjectsRoundTrip(t *testing.T) {
	c := kubeapi.New(kubeapitest.Dynamic(t))
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
		PersistentVolumeSource:        corev1.PersistentVolumeSource{NFS: &corev1.NFSVolumeSource{Server: "s", Path: "/e/d"}}}}
	if err := c.CreatePV(ctx, pv); err != nil {
		t.Fatal(err)
	}
	if err := c.PatchPV(ctx, "pv-1", []byte(`{"spec":{"persistentVolumeReclaimPolicy":"Retain"}}`)); err != nil {
		t.Fatal(err)
	}
	got, err := c.PV(ctx, "pv-1")
	if err != nil || got.Spec.NFS.Path != "/e/d" || got.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain {
		t.Fatalf("PV = %+v, %v", got, err)
	}
	if all, err := c.PVs(ctx, ""); err != nil || len(all) != 1 {
		t.Errorf("PVs = %v, %v", all, err)
	}
	if err := c.DeletePV(ctx, "pv-1", got.UID); err != nil {
		t.Fatal(err)
	}
	if gone, err := c.PV(ctx, "pv-1"); gone != nil || err != nil {
		t.Errorf("deleted PV = %v, %v; want nil, nil", gone, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm", Labels: map[string]string{"a": "b"}}, Data: map[string]string{"k": "v"}}
	if err := c.CreateConfigMap(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if l, err := c.ConfigMaps(ctx, "ns", "a=b"); err != nil || len(l) != 1 || l[0].Data["k"] != "v" {
		t.Errorf("ConfigMaps = %v, %v", l, err)
	}
	if err := c.DeleteConfigMap(ctx, "ns", "cm"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteConfigMap(ctx, "ns", "cm"); err != nil {
		t.Errorf("deleting a missing ConfigMap: %v", err)
	}
}

func TestClusterUIDAndPVExists(t *testing.T) {
	d := kubeapitest.Dynamic(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: "3f2c-uid"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pvc-1"}})
	c := kubeapi.New(d)
	if got, err := c.ClusterUID(ctx); err != nil || got != "3f2c-uid" {
		t.Fatalf("ClusterUID = %q, %v", got, err)
	}
	if ok, err := c.PVExists(ctx, "pvc-1"); err != nil || !ok {
		t.Errorf("PVExists(pvc-1) = %v, %v", ok, err)
	}
	if ok, err := c.PVExists(ctx, "pvc-2"); err != nil || ok {
		t.Errorf("PVExists(pvc-2) = %v, %v", ok, err)
	}
	d.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "kube-system", nil)
	})
	if _, err := c.ClusterUID(ctx); fault.KindOf(err) != fault.FailedPrecondition {
		t.Errorf("forbidden: %v", err)
	}
	d.PrependReactor("get", "persistentvolumes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("etcd")
	})
	if _, err := c.PVExists(ctx, "pvc-1"); fault.KindOf(err) != fault.Unavailable {
		t.Errorf("unavailable: %v", err)
	}
}
