package csiserver

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/keylock"
	"github.com/nfsdir/nfsdir/pkg/publock"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// claimTimeout bounds one claim operation on the share; one stuck on a
// dead server is left to finish in the background, at most one per volume.
var claimTimeout = 15 * time.Second

// singleNode reports whether an access mode allows the volume on one node
// only, which nfsdir enforces across nodes with claims.
func singleNode(c *csi.VolumeCapability) bool {
	switch c.GetAccessMode().GetMode() {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csi.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

// nodeClaims holds this node's claims on the single-node volumes it has
// published (pkg/publock): taken at publish, renewed every third of the
// lapse while a target of the volume stays mounted, dropped with its last
// target. What it holds is kept in a file, so a restarted node plugin
// renews the claims of the mounts it left in place.
type nodeClaims struct {
	views   claimsOn
	node    string
	lapse   time.Duration
	file    string
	mounted func(target string) (bool, error)

	names    export.Names // where each named export is now
	inflight keylock.Set  // by volume ID: one claim operation at a time

	mu    sync.Mutex
	held  map[string]*heldClaim // by volume ID
	noDir map[string]bool       // exports already logged as having no claims directory
	lost  atomic.Int64
}

// claimsOn reaches the claims directory of a volume's share
// (shares.Set.Claims).
type claimsOn interface {
	Claims(ctx context.Context, id volumeid.ID, fn func(*os.Root) error) error
}

// heldClaim is one claim and the targets it is held for: true once the
// target is mounted, false while its publish runs (the renewals leave
// such a target alone: it is not in the mount table yet).
type heldClaim struct {
	SubDir  string          `json:"subDir"`
	Targets map[string]bool `json:"targets"`
}

// restore reads the claims a previous process held.
func (c *nodeClaims) restore() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = map[string]*heldClaim{}
	b, err := os.ReadFile(c.file)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = json.Unmarshal(b, &c.held)
	}
	if err != nil {
		klog.Errorf("claims of single-node volumes: reading %s: %v; the claims it listed lapse unless their volumes are published again", c.file, err)
		c.held = map[string]*heldClaim{}
	}
	for _, h := range c.held {
		if h.Targets == nil {
			h.Targets = map[string]bool{}
		}
		// A publish cut by the restart mounted its target or not: the
		// mount table tells.
		for t := range h.Targets {
			h.Targets[t] = true
		}
	}
	klog.Infof("claims of single-node volumes: %d held before the restart, renewed now", len(c.held))
}

// saveLocked writes what is held to the claims file; c.mu is held. The
// file is synced before it replaces the old one: a node that loses power
// right after a publish or unpublish boots with what it held, and frees
// at once the claims whose mounts the power cut took.
func (c *nodeClaims) saveLocked() {
	b, _ := json.Marshal(c.held)
	tmp := c.file + ".tmp"
	err := os.MkdirAll(filepath.Dir(c.file), 0o700)
	if err == nil {
		err = writeSynced(tmp, b)
	}
	if err == nil {
		err = os.Rename(tmp, c.file)
	}
	if err != nil {
		klog.Errorf("claims of single-node volumes: writing %s: %v; after a restart their claims lapse", c.file, err)
	}
}

// writeSynced writes b to a new file at name and syncs it.
func writeSynced(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// run does op on the claims of the volume's share within claimTimeout,
// after the volume's claim operation in flight, if any: a publish or an
// unpublish waits up to a third of claimTimeout for it (a renewal, as a
// rule, done in milliseconds), a renewal (wait false) does not.
func (c *nodeClaims) run(ctx context.Context, volumeID string, wait bool, op func(context.Context, publock.Files) error) error {
	id, err := volumeid.Parse(volumeID)
	if err != nil {
		return nil // not an nfsdir volume: no claims (docs/access-modes.md)
	}
	if err := locate(c.names, &id); err != nil {
		return err
	}
	acquired := c.inflight.TryAcquire(volumeID)
	if !acquired && wait {
		wctx, cancel := context.WithTimeout(ctx, claimTimeout/3)
		acquired = c.inflight.Acquire(wctx, volumeID)
		cancel()
	}
	if !acquired {
		return fault.New(fault.Aborted, "a claim operation on volume %q is still in progress (is its NFS server answering?); retry later", volumeID)
	}
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel() // an operation still running stops waiting for a lock
	done := make(chan error, 1)
	go func() {
		err := c.views.Claims(ctx, id, func(root *os.Root) error {
			return op(ctx, publock.Files{Root: root, Node: c.node, Lapse: c.lapse})
		})
		// Free before the answer: a call that follows at once must
		// find the volume free.
		c.inflight.Release(volumeID)
		done <- err
	}()
	select {
	case err = <-done:
	case <-ctx.Done():
		select {
		case err = <-done: // finished as time ran out: its answer counts
		default:
			err = fault.New(fault.Unavailable, "the NFS server of volume %q does not answer (claim of a single-node volume)", volumeID)
		}
	}
	if errors.Is(err, shares.ErrNoClaims) {
		c.mu.Lock()
		if !c.noDir[id.Export.String()] {
			klog.Warningf("share %s has no claims directory (.nfsdir/nodes; a controller of this version makes it): single-node volumes there are not kept to one node", id.Export)
			if c.noDir == nil {
				c.noDir = map[string]bool{}
			}
			c.noDir[id.Export.String()] = true
		}
		c.mu.Unlock()
		return nil
	}
	return err
}

// take claims volumeID (its directory subDir on the share) for target. A
// live claim of another node is FailedPrecondition naming the node. The
// target is added while the volume's claim operation is still the only
// one, so a drop that follows sees it and keeps the claim.
func (c *nodeClaims) take(ctx context.Context, volumeID, subDir, target string) error {
	err := c.run(ctx, volumeID, true, func(ctx context.Context, f publock.Files) error {
		took, err := f.Take(ctx, publock.Name(subDir), volumeID)
		if err != nil {
			return err
		}
		if took != "" {
			klog.Warningf("volume %s: took over the claim of node %q, not renewed for %s (that node is gone or lost the volume)", volumeID, took, c.lapse)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		h := c.held[volumeID]
		if h == nil {
			h = &heldClaim{SubDir: subDir, Targets: map[string]bool{}}
			c.held[volumeID] = h
		}
		if _, ok := h.Targets[target]; !ok {
			h.Targets[target] = false
			c.saveLocked()
		}
		return nil
	})
	var held *publock.HeldError
	if errors.As(err, &held) {
		return fault.New(fault.FailedPrecondition, "volume %q is single-node (ReadWriteOnce or ReadWriteOncePod, or a CSI single-node mode) and %v; retry once it is unpublished there", volumeID, held)
	}
	return err
}

// published records that target, claimed by take, is mounted now.
func (c *nodeClaims) published(volumeID, target string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.held[volumeID]; h != nil {
		if on, ok := h.Targets[target]; ok && !on {
			h.Targets[target] = true
			c.saveLocked()
		}
	}
}

// release drops target from volumeID's claim and drops the claim with its
// last target; a drop that fails is tried again by renew.
func (c *nodeClaims) release(ctx context.Context, volumeID, target string) {
	c.mu.Lock()
	h := c.held[volumeID]
	if h == nil {
		c.mu.Unlock()
		return
	}
	delete(h.Targets, target)
	last := len(h.Targets) == 0
	c.saveLocked()
	c.mu.Unlock()
	if last {
		c.drop(ctx, volumeID, h)
	}
}

// drop frees the claim of h unless a target was added meanwhile.
func (c *nodeClaims) drop(ctx context.Context, volumeID string, h *heldClaim) {
	err := c.run(ctx, volumeID, true, func(ctx context.Context, f publock.Files) error {
		c.mu.Lock()
		busy := len(h.Targets) > 0 || c.held[volumeID] != h
		c.mu.Unlock()
		if busy {
			return nil
		}
		return f.Drop(ctx, publock.Name(h.SubDir))
	})
	if err != nil {
		klog.Warningf("volume %s: dropping its claim: %v; tried again in %s", volumeID, err, c.lapse/3)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[volumeID] == h && len(h.Targets) == 0 {
		delete(c.held, volumeID)
		c.saveLocked()
	}
}

// renew renews every claim whose volume still has a target mounted here,
// forgets targets no longer mounted and drops claims left without any.
// Each claim is renewed on its own, so a share whose server does not
// answer delays no other share's renewals past their lapse.
func (c *nodeClaims) renew(ctx context.Context) {
	c.mu.Lock()
	ids := make([]string, 0, len(c.held))
	for id := range c.held {
		ids = append(ids, id)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.renewOne(ctx, id)
		}()
	}
	wg.Wait()
}

func (c *nodeClaims) renewOne(ctx context.Context, id string) {
	c.mu.Lock()
	h := c.held[id]
	var targets []string
	if h != nil {
		for t, on := range h.Targets {
			if on { // a publish still running has not mounted yet
				targets = append(targets, t)
			}
		}
	}
	c.mu.Unlock()
	if h == nil {
		return
	}
	for _, t := range targets {
		if ok, err := c.mounted(t); err == nil && !ok {
			c.mu.Lock()
			if h.Targets[t] { // not published again meanwhile
				klog.Infof("volume %s: target %s is no longer mounted; its claim is not kept for it", id, t)
				delete(h.Targets, t)
				c.saveLocked()
			}
			c.mu.Unlock()
		}
	}
	c.mu.Lock()
	empty := len(h.Targets) == 0
	c.mu.Unlock()
	if empty {
		c.drop(ctx, id, h)
		return
	}
	err := c.run(ctx, id, false, func(ctx context.Context, f publock.Files) error {
		// Looked at again now that no other operation on the volume's
		// claim runs: an unpublish that came since took the last target
		// and drops the claim, or dropped it already, and a renewal now
		// would take the free claim again for nothing.
		c.mu.Lock()
		gone := c.held[id] != h || len(h.Targets) == 0
		c.mu.Unlock()
		if gone {
			return nil
		}
		return f.Renew(ctx, publock.Name(h.SubDir), id)
	})
	var held *publock.HeldError
	switch {
	case errors.As(err, &held):
		c.lost.Add(1)
		klog.Errorf("volume %s: LOST its claim while mounted here: %v; this node's claim had lapsed (the plugin was down or the server unreachable for %s), and two nodes now have a single-node volume", id, held, c.lapse)
		c.mu.Lock()
		if c.held[id] == h {
			delete(c.held, id)
			c.saveLocked()
		}
		c.mu.Unlock()
	case err != nil:
		klog.Warningf("volume %s: renewing its claim: %v", id, err)
	}
}

// loop renews the claims every third of the lapse until ctx ends; the
// first pass runs at once (after a restart).
func (c *nodeClaims) loop(ctx context.Context) {
	for {
		c.renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.lapse / 3):
		}
	}
}

// count is how many claims the node holds.
func (c *nodeClaims) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.held)
}
