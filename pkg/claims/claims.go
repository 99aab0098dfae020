// Package claims reads what subDir templates may use of a
// PersistentVolumeClaim (its labels and annotations) from the Kubernetes
// API. It is the controller's only use of the API, and happens only when
// the operator enables it and a StorageClass's template needs it.
package claims

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/subdir"
)

// Reader returns the metadata of one claim.
type Reader interface {
	Claim(ctx context.Context, namespace, name string) (*subdir.Claim, error)
}

// Timeout bounds one read of a claim.
const Timeout = 15 * time.Second

// InCluster returns a Reader that uses the pod's service account.
func InCluster() (Reader, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("reading claim metadata needs the Kubernetes API from inside the cluster: %w", err)
	}
	cfg.Timeout = Timeout
	cfg.UserAgent = "nfsdir-controller"
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return api{c}, nil
}

// NewReader returns a Reader over a clientset (tests pass a fake one).
func NewReader(c kubernetes.Interface) Reader { return api{c} }

type api struct{ c kubernetes.Interface }

func (a api) Claim(ctx context.Context, namespace, name string) (*subdir.Claim, error) {
	if namespace == "" || name == "" {
		return nil, fault.New(fault.InvalidArgument, "the subDir template uses the claim's labels or annotations, and the request names no claim (run csi-provisioner with --extra-create-metadata)")
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	pvc, err := a.c.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return &subdir.Claim{Labels: pvc.Labels, Annotations: pvc.Annotations}, nil
	case apierrors.IsNotFound(err):
		return nil, fault.Wrap(fault.NotFound, err, "claim %s/%s, whose labels or annotations the subDir template uses, does not exist", namespace, name)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return nil, fault.Wrap(fault.FailedPrecondition, err, "the controller may not read claim %s/%s, whose labels or annotations the subDir template uses: grant it get on persistentvolumeclaims (chart value controller.claimMetadata.enabled)", namespace, name)
	}
	return nil, fault.Wrap(fault.Unavailable, err, "reading claim %s/%s from the Kubernetes API", namespace, name)
}
