package claims

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nfsdir/nfsdir/pkg/fault"
)

func TestClaimReadsLabelsAndAnnotationsAndClassifiesFailures(t *testing.T) {
	c := fake.NewClientset(&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "data",
		Labels: map[string]string{"team": "blue"}, Annotations: map[string]string{"nfs.io/storage-path": "p"}}})
	r := NewReader(c)
	got, err := r.Claim(context.Background(), "team-a", "data")
	if err != nil || got.Labels["team"] != "blue" || got.Annotations["nfs.io/storage-path"] != "p" {
		t.Fatalf("Claim = %+v, %v", got, err)
	}
	if _, err := r.Claim(context.Background(), "team-a", "gone"); fault.KindOf(err) != fault.NotFound {
		t.Errorf("missing claim: %v (%v)", err, fault.KindOf(err))
	}
	if _, err := r.Claim(context.Background(), "", "data"); fault.KindOf(err) != fault.InvalidArgument {
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
		c.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.err })
		if _, err := r.Claim(context.Background(), "team-a", "data"); fault.KindOf(err) != tt.want {
			t.Errorf("%v: kind %v, want %v", tt.err, fault.KindOf(err), tt.want)
		}
	}
}
