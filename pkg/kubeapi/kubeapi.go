// Package kubeapi is nfsdir's access to the Kubernetes API: the
// controller reads claims' labels and annotations for subDir templates
// (only when the operator enables it), and `nfsdir migrate` reads and
// replaces PersistentVolumes. It goes through client-go's dynamic client
// and converts to the typed objects itself, so that the binary does not
// carry every API group's typed client.
package kubeapi

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/subdir"
)

// Timeout bounds one request to the API server.
const Timeout = 15 * time.Second

// The resources nfsdir uses.
var (
	PVs        = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	Claims     = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	ConfigMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	Classes    = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
	Namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// Client talks to one API server.
type Client struct{ d dynamic.Interface }

// InCluster returns a Client that uses the pod's service account.
func InCluster(userAgent string) (*Client, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("the Kubernetes API from inside the cluster: %w", err)
	}
	return forConfig(cfg, userAgent)
}

// FromKubeconfig returns a Client for the kubeconfig at path, or, when
// path is empty, the one $KUBECONFIG or ~/.kube/config names, or the
// pod's service account.
func FromKubeconfig(path, userAgent string) (*Client, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return forConfig(cfg, userAgent)
}

func forConfig(cfg *rest.Config, userAgent string) (*Client, error) {
	cfg.Timeout, cfg.UserAgent = Timeout, userAgent
	d, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{d}, nil
}

// New returns a Client over a dynamic client (tests pass a fake one).
func New(d dynamic.Interface) *Client { return &Client{d} }

func (c *Client) res(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return c.d.Resource(gvr)
	}
	return c.d.Resource(gvr).Namespace(namespace)
}

// get reads one object into out; found is false when it does not exist.
func get[T any](ctx context.Context, c *Client, gvr schema.GroupVersionResource, namespace, name string) (*T, error) {
	u, err := c.res(gvr, namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvr.Resource, name, err)
	}
	return out, nil
}

func list[T any](ctx context.Context, c *Client, gvr schema.GroupVersionResource, namespace, selector string) ([]T, error) {
	var out []T
	opts := metav1.ListOptions{LabelSelector: selector, Limit: 500}
	for {
		l, err := c.res(gvr, namespace).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for _, u := range l.Items {
			var t T
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
				return nil, fmt.Errorf("%s %s: %w", gvr.Resource, u.GetName(), err)
			}
			out = append(out, t)
		}
		if opts.Continue = l.GetContinue(); opts.Continue == "" {
			return out, nil
		}
	}
}

func create(ctx context.Context, c *Client, gvr schema.GroupVersionResource, namespace, kind string, obj any) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(schema.GroupVersion{Group: gvr.Group, Version: gvr.Version}.String())
	u.SetKind(kind)
	_, err = c.res(gvr, namespace).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// Claim returns the labels and annotations of claim namespace/name, for
// subDir templates. Its errors have the kind the controller answers with.
func (c *Client) Claim(ctx context.Context, namespace, name string) (*subdir.Claim, error) {
	if namespace == "" || name == "" {
		return nil, fault.New(fault.InvalidArgument, "the subDir template uses the claim's labels or annotations, and the request names no claim (run csi-provisioner with --extra-create-metadata)")
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	u, err := c.d.Resource(Claims).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return &subdir.Claim{Labels: u.GetLabels(), Annotations: u.GetAnnotations()}, nil
	case apierrors.IsNotFound(err):
		return nil, fault.Wrap(fault.NotFound, err, "claim %s/%s, whose labels or annotations the subDir template uses, does not exist", namespace, name)
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return nil, fault.Wrap(fault.FailedPrecondition, err, "the controller may not read claim %s/%s, whose labels or annotations the subDir template uses: grant it get on persistentvolumeclaims (chart value controller.claimMetadata.enabled)", namespace, name)
	}
	return nil, fault.Wrap(fault.Unavailable, err, "reading claim %s/%s from the Kubernetes API", namespace, name)
}

// PV returns the PersistentVolume name, or nil when there is none.
func (c *Client) PV(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	pv, err := get[corev1.PersistentVolume](ctx, c, PVs, "", name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return pv, err
}

// ClusterUID returns the UID of the kube-system namespace, which names
// the cluster: it is made once, with the cluster, and never changes.
func (c *Client) ClusterUID(ctx context.Context) (string, error) {
	ns, err := get[corev1.Namespace](ctx, c, Namespaces, "", "kube-system")
	switch {
	case err == nil && ns.UID != "":
		return string(ns.UID), nil
	case err == nil:
		return "", fault.New(fault.Unavailable, "namespace kube-system has no UID")
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return "", fault.Wrap(fault.FailedPrecondition, err, "the controller may not read namespace kube-system, whose UID names the cluster: grant it get on that namespace (the chart does) or set the cluster's identity (chart value driver.clusterID)")
	}
	return "", fault.Wrap(fault.Unavailable, err, "reading namespace kube-system from the Kubernetes API")
}

// PVExists reports whether a PersistentVolume name exists.
func (c *Client) PVExists(ctx context.Context, name string) (bool, error) {
	pv, err := c.PV(ctx, name)
	switch {
	case err == nil:
		return pv != nil, nil
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return false, fault.Wrap(fault.FailedPrecondition, err, "the controller may not read PersistentVolume %s: grant it get on persistentvolumes (csi-provisioner's rules do)", name)
	}
	return false, fault.Wrap(fault.Unavailable, err, "reading PersistentVolume %s from the Kubernetes API", name)
}

// PVs lists the PersistentVolumes that match the label selector ("": all).
func (c *Client) PVs(ctx context.Context, selector string) ([]corev1.PersistentVolume, error) {
	return list[corev1.PersistentVolume](ctx, c, PVs, "", selector)
}

// CreatePV creates pv.
func (c *Client) CreatePV(ctx context.Context, pv *corev1.PersistentVolume) error {
	return create(ctx, c, PVs, "", "PersistentVolume", pv)
}

// PatchPV applies a JSON merge patch to PV name.
func (c *Client) PatchPV(ctx context.Context, name string, patch []byte) error {
	_, err := c.d.Resource(PVs).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// DeletePV deletes PV name if it is still the object with uid.
func (c *Client) DeletePV(ctx context.Context, name string, uid types.UID) error {
	return c.d.Resource(PVs).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
}

// Claims lists the claims of all namespaces.
func (c *Client) Claims(ctx context.Context) ([]corev1.PersistentVolumeClaim, error) {
	return list[corev1.PersistentVolumeClaim](ctx, c, Claims, "", "")
}

// ClaimObject returns claim namespace/name.
func (c *Client) ClaimObject(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return get[corev1.PersistentVolumeClaim](ctx, c, Claims, namespace, name)
}

// StorageClasses lists the StorageClasses.
func (c *Client) StorageClasses(ctx context.Context) ([]storagev1.StorageClass, error) {
	return list[storagev1.StorageClass](ctx, c, Classes, "", "")
}

// ConfigMap returns ConfigMap namespace/name, or nil when there is none.
func (c *Client) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm, err := get[corev1.ConfigMap](ctx, c, ConfigMaps, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return cm, err
}

// ConfigMaps lists the ConfigMaps of namespace that match selector.
func (c *Client) ConfigMaps(ctx context.Context, namespace, selector string) ([]corev1.ConfigMap, error) {
	return list[corev1.ConfigMap](ctx, c, ConfigMaps, namespace, selector)
}

// CreateConfigMap creates cm.
func (c *Client) CreateConfigMap(ctx context.Context, cm *corev1.ConfigMap) error {
	return create(ctx, c, ConfigMaps, cm.Namespace, "ConfigMap", cm)
}

// DeleteConfigMap deletes ConfigMap namespace/name; none is not an error.
func (c *Client) DeleteConfigMap(ctx context.Context, namespace, name string) error {
	err := c.d.Resource(ConfigMaps).Namespace(namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
