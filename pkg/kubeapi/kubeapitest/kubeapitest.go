// Package kubeapitest gives tests client-go's fake dynamic client, knowing
// the objects nfsdir reads and writes.
package kubeapitest

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/fake"
)

// Dynamic returns a fake dynamic client that holds objs (typed objects of
// core/v1 and storage.k8s.io/v1). The fake keeps everything unstructured,
// as the API server's answers are.
func Dynamic(t testing.TB, objs ...runtime.Object) *fake.FakeDynamicClient {
	typed := runtime.NewScheme()
	if err := corev1.AddToScheme(typed); err != nil {
		t.Fatal(err)
	}
	if err := storagev1.AddToScheme(typed); err != nil {
		t.Fatal(err)
	}
	var us []runtime.Object
	for _, o := range objs {
		gvks, _, err := typed.ObjectKinds(o)
		if err != nil {
			t.Fatal(err)
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetGroupVersionKind(gvks[0])
		us = append(us, u)
	}
	return fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		{Version: "v1", Resource: "persistentvolumes"}:                       "PersistentVolumeList",
		{Version: "v1", Resource: "persistentvolumeclaims"}:                  "PersistentVolumeClaimList",
		{Version: "v1", Resource: "configmaps"}:                              "ConfigMapList",
		{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}: "StorageClassList",
	}, us...)
}
