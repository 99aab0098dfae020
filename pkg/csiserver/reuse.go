package csiserver

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/config"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/kubeapi"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
)

// clusterAPI is what the controller asks the Kubernetes API about its
// cluster (kubeapi.Client).
type clusterAPI interface {
	ClusterUID(ctx context.Context) (string, error)
	PVExists(ctx context.Context, name string) (bool, error)
}

// cluster is what the controller knows of its cluster: its identity,
// written into each new volume's record, and whether a PersistentVolume
// exists, which a StorageClass's reuseDirectory asks before a new volume
// takes over an earlier one's directory.
type cluster struct {
	api clusterAPI // nil: no Kubernetes API (a controller outside a cluster)

	mu       sync.Mutex
	id       string // --cluster-id, or the kube-system UID once read
	failedAt time.Time
	failed   error
}

// clusterRetry is how long a failed read of the cluster's identity is
// answered from memory before the API is asked again.
const clusterRetry = 30 * time.Second

// identity returns the cluster's identity: --cluster-id, or the UID of
// the kube-system namespace, read once. "" with no error: not known (no
// API and no --cluster-id).
func (c *cluster) identity(ctx context.Context) (string, error) {
	if c == nil {
		return "", nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id != "" || c.api == nil {
		return c.id, nil
	}
	if c.failed != nil && time.Since(c.failedAt) < clusterRetry {
		return "", c.failed
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	id, err := c.api.ClusterUID(ctx)
	if err != nil {
		c.failed, c.failedAt = err, time.Now()
		klog.Warningf("the cluster's identity is not known (%v): new volumes' records do not name their cluster, and classes with reuseDirectory are refused", err)
		return "", err
	}
	c.id, c.failed = id, nil
	klog.Infof("cluster identity %s (the kube-system namespace's UID), written into new volumes' records", id)
	return id, nil
}

// unused is provision.Request.Reuse: the earlier volume of the claim is
// no longer in use when its PersistentVolume is gone from this cluster
// (its record names this cluster: provision checks that).
func (c *cluster) unused(ctx context.Context, earlier *provision.Record) error {
	if c == nil || c.api == nil {
		return fault.New(fault.FailedPrecondition, "reuseDirectory needs the Kubernetes API, to see that PersistentVolume %s of the earlier volume is gone, and the controller has none (it runs outside a cluster)", earlier.Name)
	}
	exists, err := c.api.PVExists(ctx, earlier.Name)
	if err != nil {
		return err
	}
	if exists {
		return fault.New(fault.FailedPrecondition, "directory %q still belongs to PersistentVolume %s, of an earlier claim %s: delete that PersistentVolume (with reclaimPolicy Retain its data stays on the share) and the new claim gets the directory at its next retry", earlier.SubDir, earlier.Name, earlier.Claim)
	}
	return nil
}

// useAPI gives the controller the Kubernetes API, when it runs in a
// cluster: its cluster's identity, PersistentVolumes for reuseDirectory,
// and, with --read-claim-metadata (which then needs it), claims.
func (s *Controller) useAPI(cfg config.Config) error {
	s.cluster = &cluster{id: cfg.ClusterID}
	kube, err := kubeapi.InCluster("nfsdir-controller")
	switch {
	case err != nil && cfg.ReadClaimMetadata:
		return fmt.Errorf("--read-claim-metadata: %w", err)
	case err != nil:
		klog.Infof("no Kubernetes API (%v): volume records name their cluster only with --cluster-id, and StorageClasses with reuseDirectory are refused", err)
		return nil
	}
	s.cluster.api = kube
	if cfg.ReadClaimMetadata {
		s.claims = kube
	}
	return nil
}

// provenance fills in what req's record says of its origin: the claim
// (from csi-provisioner's parameters p) and the cluster; with
// reuseDirectory (cp.Reuse), also how an earlier volume of the claim is
// found gone.
func (s *Controller) provenance(ctx context.Context, p map[string]string, cp params.Create, req *provision.Request) error {
	ns, _ := lookupFold(p, params.KeyPVCNamespace)
	name, _ := lookupFold(p, params.KeyPVCName)
	if ns != "" && name != "" {
		req.Claim = ns + "/" + name
	}
	id, err := s.cluster.identity(ctx)
	req.Cluster = id
	if !cp.Reuse {
		return nil // a record without its cluster is only not reusable
	}
	if req.Claim == "" {
		return invalid("parameter \"reuseDirectory\" needs the claim's namespace and name: run csi-provisioner with --extra-create-metadata (the chart does)")
	}
	if err != nil {
		return toStatus(err)
	}
	req.Reuse = s.cluster.unused
	return nil
}
