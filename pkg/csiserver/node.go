package csiserver

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/capacity"
	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/keylock"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/mounttable"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/nodestage"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/safepath"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/targetdir"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// statsTimeout bounds NodeGetVolumeStats and the health check of an
// existing mount in NodePublishVolume.
const statsTimeout = 10 * time.Second

// Node serves the CSI Node service: each publish is an NFS mount of the
// volume's directory on the target path, or, in NodeStage mode, a bind
// mount of the volume's staging path (nodestage.go).
type Node struct {
	csi.UnimplementedNodeServer
	nodeID       string
	driverName   string // as kubelet records it in vol_data.json
	mounter      nfsmount.Mounter
	mountTimeout time.Duration
	targets      targetpath.Rule // where targets may be
	policy       mountopts.Policy
	inline       *export.AllowList // nil: inline volumes are not restricted
	locks        keylock.Set       // by target path
	volumeLocks  keylock.Set       // by mount source, for single-writer publishes
	views        *shares.Set       // read-only share mounts for records and figures; nil: statfs only
	claims       *nodeClaims       // single-node volumes kept to one node; nil: not enforced
	names        export.Names      // where each named export is now (--export)
	stager       *nodestage.Stager // nil: no NodeStage; each publish is an NFS mount

	mu        sync.Mutex
	published map[string]map[string]bool // volume ID -> targets this process mounted
	// optionNotes: target -> how its mount differs from the options it
	// asked for (checkOptions).
	optionNotes map[string]string
	noView      map[string]time.Time // export -> until when its records are not tried again
	viewReads   map[string]int       // export -> record reads in flight
}

var nodeCaps = []csi.NodeServiceCapability_RPC_Type{
	csi.NodeServiceCapability_RPC_GET_VOLUME_STATS,
	csi.NodeServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.NodeServiceCapability_RPC_GET_VOLUME_HEALTH,
}

// NodeGetCapabilities lists the node RPCs nfsdir implements.
func (s *Node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	caps := nodeCaps
	if s.stager != nil {
		caps = append(slices.Clip(caps), csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME)
	}
	for _, c := range caps {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: c}}})
	}
	return resp, nil
}

// NodeGetInfo returns the node ID. NFS volumes have no topology.
func (s *Node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: s.nodeID}, nil
}

// NodePublishVolume mounts server:/share/subDir on the target path. It
// acts only on a target the node's rule allows (kubelet's layout), reached
// without symlinks, and answers OK only once the mount table shows the NFS
// mount of the volume there.
func (s *Node) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	p, err := s.publication(ctx, req)
	if err != nil {
		return nil, err
	}
	if !s.locks.TryAcquire(p.target) {
		return nil, busy("target " + p.target)
	}
	defer s.locks.Release(p.target)

	if err := targetdir.CheckParent(p.tg); err != nil {
		return nil, toStatus(err)
	}
	done, err := s.republish(ctx, req, p)
	if err != nil {
		return nil, err
	}
	if done {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if singleWriter(req.GetVolumeCapability()) {
		// The check and the mount must be one step per volume, or two
		// publishes on different targets could both pass the check.
		if !s.volumeLocks.TryAcquire(p.source) {
			return nil, busy("volume " + p.source)
		}
		defer s.volumeLocks.Release(p.source)
		if err := s.checkSingleWriter(p); err != nil {
			return nil, err
		}
	}
	if err := s.mountNew(ctx, req, p); err != nil {
		return nil, err
	}
	s.track(req.GetVolumeId(), p.target, true)
	return &csi.NodePublishVolumeResponse{}, nil
}

// publication is what a NodePublishVolume request asks for, checked.
type publication struct {
	vol            params.Volume
	opts           mountopts.Options
	tg             targetpath.Target
	source, target string
	staged         string   // the volume's staging path in NodeStage mode: bound from there
	stagedOptions  []string // the options the mount table shows at staged
}

// publication checks req and works out the mount it asks for: the
// volume, its target and the mount options (the class's or those a
// VolumeAttributesClass set, with the volume's, under the node's policy).
func (s *Node) publication(ctx context.Context, req *csi.NodePublishVolumeRequest) (publication, error) {
	var p publication
	if req.GetVolumeId() == "" {
		return p, invalid("volume ID is required")
	}
	tg, err := s.targets.Check(req.GetTargetPath())
	if err != nil {
		return p, invalid("%v", err)
	}
	// A staged volume is bound from its staging path, which has the
	// options it was staged with: its record need not be read again.
	staged := s.stager != nil && req.GetStagingTargetPath() != ""
	vol, opts, err := s.volumeMount(ctx, req.GetVolumeId(), req.GetVolumeCapability(), req.GetVolumeContext(), !staged)
	if err != nil {
		return p, err
	}
	readOnly, err := s.checkInline(vol, opts, req.GetReadonly())
	if err != nil {
		return p, err
	}
	p = publication{vol: vol, opts: opts.WithReadOnly(readOnly), tg: tg, source: vol.Export.Source(vol.SubDir), target: tg.Path()}
	if staged && !vol.Ephemeral {
		var e *nfsmount.Entry
		if p.staged, e, err = s.staged(req.GetStagingTargetPath(), p.source); err == nil {
			p.stagedOptions = e.Options
			p.opts = p.opts.WithReadOnly(readOnly || hasOption(e.Options, "ro"))
		}
	}
	return p, err
}

// volumeMount checks a node call's volume and capability and works out
// what to mount: the volume and the mount options (the class's or those a
// VolumeAttributesClass set, with the volume's, under the node's policy).
func (s *Node) volumeMount(ctx context.Context, volumeID string, c *csi.VolumeCapability, attrs map[string]string, withRecord bool) (params.Volume, mountopts.Options, error) {
	if c == nil {
		return params.Volume{}, nil, invalid("volume capability is required")
	}
	classOpts, err := checkCapabilities([]*csi.VolumeCapability{c})
	if err != nil {
		return params.Volume{}, nil, err
	}
	vol, err := volumeOf(s.names, volumeID, attrs)
	if err != nil {
		return vol, nil, invalid("%v", err)
	}
	if safepath.InMetaDir(path.Join(vol.Export.Share, vol.SubDir)) {
		return vol, nil, invalid("volume %q: %q lies inside nfsdir's metadata directory %s, which is never mounted", volumeID, path.Join(vol.Export.Share, vol.SubDir), safepath.MetaDir)
	}
	if !vol.Ephemeral && withRecord {
		var server string
		if classOpts, server = s.publishOptions(ctx, volumeID, classOpts); server != "" {
			vol.Export.Server = server
		}
	}
	opts, err := mountopts.Parse(classOpts.String(), vol.MountOptions.String())
	if err == nil {
		opts, err = s.policy.Apply(opts)
	}
	if err != nil {
		return vol, nil, invalid("%v", err)
	}
	return vol, opts, nil
}

// republish handles a target that already has a mount: the same volume's
// healthy mount is the publish done again (done); another mount there is
// AlreadyExists; a mount whose server does not answer stays and the call
// is Unavailable; a stale one is unmounted, to be mounted anew.
func (s *Node) republish(ctx context.Context, req *csi.NodePublishVolumeRequest, p publication) (done bool, err error) {
	cur, err := s.mounter.Mounted(p.target)
	if err != nil || cur == nil {
		return false, toStatus(err)
	}
	if !mounttable.SameSource(cur.Source, p.source) {
		return false, status.Errorf(codes.AlreadyExists, "target %q already has %q mounted, not %q", p.target, cur.Source, p.source)
	}
	// Read-only is what the mount options say, whether from the request's
	// flag or from the class or volume options.
	if ro, want := hasOption(cur.Options, "ro"), p.opts.Has("ro"); ro != want {
		return false, status.Errorf(codes.AlreadyExists, "target %q already has %q mounted with read-only=%v; this request asks for read-only=%v", p.target, p.source, ro, want)
	}
	if ok, err := s.healthy(ctx, p.target, p.source); !ok {
		return false, err
	}
	if s.claims != nil && singleNode(req.GetVolumeCapability()) && !p.vol.Ephemeral {
		// Mounted before (a retry, or a restart that lost the claims
		// file): the claim is renewed or taken.
		if err := s.claims.take(ctx, req.GetVolumeId(), p.vol.SubDir, p.target); err != nil {
			klog.ErrorS(err, "volume already mounted here; its claim", "volume", req.GetVolumeId(), "target", p.target)
		}
		s.claims.published(req.GetVolumeId(), p.target)
	}
	return true, nil
}

// mountNew takes the volume's claim for a single-node volume (another
// node's live claim refuses the publish before anything is mounted), makes
// the target and mounts; a failure gives the claim back.
func (s *Node) mountNew(ctx context.Context, req *csi.NodePublishVolumeRequest, p publication) error {
	claimed := false
	if s.claims != nil && singleNode(req.GetVolumeCapability()) && !p.vol.Ephemeral {
		if err := s.claims.take(ctx, req.GetVolumeId(), p.vol.SubDir, p.target); err != nil {
			return toStatus(err)
		}
		claimed = true
	}
	err := targetdir.Make(p.tg)
	if err == nil {
		mctx, cancel := context.WithTimeout(ctx, s.mountTimeout)
		if p.staged != "" {
			// The options were checked when the volume was staged.
			err = s.bindStaged(mctx, p)
		} else {
			err = s.mounter.Mount(mctx, p.source, p.target, p.opts)
		}
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			err = status.Errorf(codes.DeadlineExceeded, "%v (is the NFS server %q reachable?)", err, p.vol.Export.Server)
		}
		switch {
		case err == nil && p.staged == "":
			err = s.checkOptions(ctx, p)
		case err == nil:
			s.inheritNote(p.staged, p.target)
		}
	}
	if err != nil {
		if claimed {
			s.claims.release(ctx, req.GetVolumeId(), p.target)
		}
		return toStatus(err)
	}
	if claimed {
		s.claims.published(req.GetVolumeId(), p.target)
	}
	return nil
}

// publishOptions returns the mount options a VolumeAttributesClass set on
// the volume in its record, in place of the StorageClass's classOpts, and
// the address it set to mount the volume from ("": its export's). When it
// set none, or the record cannot be read (logged), classOpts and "".
func (s *Node) publishOptions(ctx context.Context, volumeID string, classOpts mountopts.Options) (mountopts.Options, string) {
	rec, _, _, ok := s.record(ctx, volumeID, false, publishViewWait)
	if !ok || rec == nil {
		return classOpts, ""
	}
	server := rec.MountServer
	if server != "" {
		if e, err := export.New(server, "/"); err != nil || e.Server != server {
			klog.Warningf("volume %s: its record's mount server %q: %v; using its export's", volumeID, server, err)
			server = ""
		}
	}
	if rec.PublishOptions == nil {
		return classOpts, server
	}
	opts, err := mountopts.Parse(*rec.PublishOptions)
	if err != nil {
		klog.Warningf("volume %s: its record's mount options %q: %v; using the StorageClass's", volumeID, *rec.PublishOptions, err)
		return classOpts, server
	}
	return opts, server
}

// checkIDAndPath validates the fields every node call carries.
func checkIDAndPath(volumeID, what, p string) error {
	switch {
	case volumeID == "":
		return invalid("volume ID is required")
	case p == "":
		return invalid("%s is required", what)
	}
	return nil
}

func hasOption(opts []string, name string) bool {
	for _, o := range opts {
		if o == name {
			return true
		}
	}
	return false
}

// volumeOf reads what to mount from the volume context (a named export
// where names says it is now), or, for a csi-driver-nfs volume handle
// without attributes, from the ID itself.
func volumeOf(names export.Names, id string, attrs map[string]string) (params.Volume, error) {
	_, server := lookupFold(attrs, params.KeyServer)
	_, named := lookupFold(attrs, params.KeyExport)
	if server || named {
		v, err := params.ParseVolume(attrs)
		if err == nil {
			err = locateVolume(names, &v)
		}
		return v, err
	}
	if l, err := volumeid.ParseLegacy(id); err == nil {
		return params.Volume{Export: l.Export, SubDir: l.SubDir}, nil
	}
	return params.ParseVolume(attrs) // reports the missing server
}

// NodeUnpublishVolume unmounts the target path and removes it. It reads the
// mount table instead of touching the target, so a dead server cannot block
// it; it acts only on a target the node's rule allows and removes nothing
// but the empty target directory.
func (s *Node) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is required")
	}
	tg, err := s.targets.Check(req.GetTargetPath())
	if err != nil {
		return nil, invalid("%v", err)
	}
	target := tg.Path()
	if !s.locks.TryAcquire(target) {
		return nil, busy("target " + target)
	}
	defer s.locks.Release(target)

	if err := targetdir.CheckParent(tg); err != nil {
		return nil, toStatus(err)
	}
	if err := s.mounter.Unmount(ctx, target); err != nil {
		return nil, toStatus(err)
	}
	if cur, err := s.mounter.Mounted(target); err != nil || cur != nil {
		return nil, status.Errorf(codes.Internal, "target %q is still mounted after unmount", target)
	}
	s.track(req.GetVolumeId(), target, false)
	if s.claims != nil {
		s.claims.release(ctx, req.GetVolumeId(), target)
	}
	if err := targetdir.Remove(tg); err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports bytes and inodes of a published volume. It
// never blocks past statsTimeout: a dead server gives Unavailable.
func (s *Node) NodeGetVolumeStats(ctx context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	u, err := s.usage(ctx, req.GetVolumeId(), req.GetVolumePath())
	if err != nil {
		return nil, toStatus(err)
	}
	if st, ok := s.volumeStats(ctx, req.GetVolumeId(), u); ok {
		return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
			{Unit: csi.VolumeUsage_BYTES, Total: st.TotalBytes, Available: st.AvailableBytes, Used: st.UsedBytes},
			{Unit: csi.VolumeUsage_INODES, Total: st.TotalInodes, Available: st.AvailableInodes, Used: st.UsedInodes},
		}}, nil
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: u.TotalBytes, Available: u.AvailableBytes, Used: u.UsedBytes},
		{Unit: csi.VolumeUsage_INODES, Total: u.TotalInodes, Available: u.FreeInodes, Used: u.UsedInodes},
	}}, nil
}

// noViewFor is how long a share whose records could not be read is left
// alone before they are tried again.
const noViewFor = time.Minute

// maxViewReads bounds the record reads in flight per share: a read stuck
// in the kernel on a dead server (a hard mount) cannot be stopped, so at
// most this many goroutines wait on one share, whatever the call rate.
const maxViewReads = 4

// publishViewWait is how long NodePublishVolume waits for a volume's
// record before it mounts with the StorageClass's options.
const publishViewWait = 3 * time.Second

// record reads the record of an nfsdir volume ID on its share (with
// figure, its usage figure too), through the node's read-only mount of the
// share. The caller waits at most wait (and ctx); the read itself runs
// apart, bounded by statsTimeout where the kernel allows. ok is false when
// there is nothing to read (another driver's ID, no read-only mounts) or
// it could not be read in time (logged; the share is then left alone for
// noViewFor); rec is nil for a volume without a record.
func (s *Node) record(ctx context.Context, volumeID string, figure bool, wait time.Duration) (rec *provision.Record, fig capacity.Figure, counted, ok bool) {
	id, err := volumeid.Parse(volumeID)
	if s.views == nil || err != nil || locate(s.names, &id) != nil {
		return nil, fig, false, false
	}
	exp := id.Export.String()
	s.mu.Lock()
	if time.Now().Before(s.noView[exp]) || s.viewReads[exp] >= maxViewReads {
		s.mu.Unlock()
		return nil, fig, false, false
	}
	if s.viewReads == nil {
		s.viewReads = map[string]int{}
	}
	s.viewReads[exp]++
	s.mu.Unlock()
	type result struct {
		rec     *provision.Record
		fig     capacity.Figure
		counted bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		vctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		defer cancel()
		var r result
		r.err = s.views.View(vctx, id, func(v *provision.View) error {
			var err error
			if r.rec, err = v.Volume(id); err != nil || r.rec == nil || !figure {
				return err
			}
			r.fig, r.counted, err = v.Figure(r.rec)
			return err
		})
		// Released before answering: a call that follows at once must
		// find the read free.
		s.mu.Lock()
		s.viewReads[exp]--
		s.mu.Unlock()
		done <- r
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	var r result
	select {
	case r = <-done:
	case <-t.C:
		r.err = fmt.Errorf("no answer within %s", wait)
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	if r.err != nil {
		klog.Warningf("volume %s: reading its record on the share: %v; not tried again for %s", volumeID, r.err, noViewFor)
		s.mu.Lock()
		if s.noView == nil {
			s.noView = map[string]time.Time{}
		}
		s.noView[exp] = time.Now().Add(noViewFor)
		s.mu.Unlock()
		return nil, fig, false, false
	}
	return r.rec, r.fig, r.counted, true
}

// volumeStats returns the volume's own figures: its recorded capacity as
// total, the usage the controller last counted, and what it can still
// take, bounded by u (the export's statfs). It reports false, and the
// caller answers with u, for a volume nfsdir keeps no record of (a static
// or csi-driver-nfs volume), an adopted volume not counted yet, or a
// share whose records cannot be read (logged, and not tried again for
// noViewFor). A volume nfsdir created and has not counted yet is new and
// empty: it answers with nothing used.
func (s *Node) volumeStats(ctx context.Context, volumeID string, u nfsmount.Usage) (capacity.Stats, bool) {
	rec, fig, counted, ok := s.record(ctx, volumeID, true, statsTimeout)
	if !ok || rec == nil || (!counted && rec.Adopted) {
		return capacity.Stats{}, false
	}
	return capacity.Report(rec.CapacityBytes, fig, capacity.Space{TotalBytes: u.TotalBytes, AvailableBytes: u.AvailableBytes,
		TotalInodes: u.TotalInodes, FreeInodes: u.FreeInodes}), true
}

// NodeGetVolumeHealth reports a published volume as INACCESSIBLE, with the
// reason, when its mount is stale or its server does not answer, and as
// DEGRADED when it is over its capacity or its mount did not get the
// options it asked for (MountOptionsNotApplied). Without a
// publish path it checks every target the volume is published on: those
// this process published, and those kubelet records for it (so a restarted
// plugin knows them too); each is checked against the mount table and
// probed at call time.
func (s *Node) NodeGetVolumeHealth(ctx context.Context, req *csi.NodeGetVolumeHealthRequest) (*csi.NodeGetVolumeHealthResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is required")
	}
	paths := []string{req.GetVolumePublishPath()}
	if paths[0] == "" {
		paths = s.targetsOf(req.GetVolumeId())
		paths = append(paths, targetdir.Published(s.targets, req.GetVolumeId())...)
		slices.Sort(paths)
		paths = slices.Compact(paths)
	}
	health := &csi.VolumeHealth{VolumeId: req.GetVolumeId()}
	seen := map[string]bool{}
	var reachable *nfsmount.Usage // statfs of a path that answered
	for _, p := range paths {
		u, err := s.usage(ctx, req.GetVolumeId(), p)
		if err == nil {
			reachable = &u
		}
		var bad *unhealthyError
		switch {
		case errors.As(err, &bad):
			reason := "ServerNotResponding"
			if nfsmount.IsStale(bad.err) {
				reason = "StaleFileHandle"
			}
			if !seen[reason] {
				seen[reason] = true
				health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
					Status: csi.VolumeHealthErrorType_INACCESSIBLE, Reason: reason, Message: bad.Error()})
			}
		case fault.Is(err, fault.NotFound) && req.GetVolumePublishPath() == "":
			// Unmounted behind our back since we published it.
		case err != nil:
			return nil, toStatus(err)
		}
		if h := s.optionHealth(p); h != nil && !seen[h.Reason] {
			seen[h.Reason] = true
			health.HealthStatuses = append(health.HealthStatuses, h)
		}
	}
	if reachable != nil {
		if st, ok := s.volumeStats(ctx, req.GetVolumeId(), *reachable); ok && st.Over != "" {
			health.HealthStatuses = append(health.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{
				Status: csi.VolumeHealthErrorType_DEGRADED, Reason: "OverCapacity", Message: st.Over})
		}
	}
	return &csi.NodeGetVolumeHealthResponse{VolumeHealth: health}, nil
}

// track records that volumeID is (or is no longer) published at target.
func (s *Node) track(volumeID, target string, published bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.published == nil {
		s.published = map[string]map[string]bool{}
	}
	if published {
		if s.published[volumeID] == nil {
			s.published[volumeID] = map[string]bool{}
		}
		s.published[volumeID][target] = true
		return
	}
	delete(s.published[volumeID], target)
	delete(s.optionNotes, target)
	if len(s.published[volumeID]) == 0 {
		delete(s.published, volumeID)
	}
}

func (s *Node) targetsOf(volumeID string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.published[volumeID] {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// carries reports whether a mount of source can be the volume volumeID:
// an nfsdir ID names its share, a csi-driver-nfs ID its directory. Only the
// source's path is compared (a mount sharing a superblock is listed under
// its first host name). A static volume's free-form ID says nothing about
// its source, so any mount can carry it.
func carries(names export.Names, volumeID, source string) bool {
	sp := mounttable.SourcePath(source)
	if id, err := volumeid.Parse(volumeID); err == nil && locate(names, &id) == nil {
		return sp == id.Export.Share || strings.HasPrefix(sp, strings.TrimSuffix(id.Export.Share, "/")+"/")
	}
	if l, err := volumeid.ParseLegacy(volumeID); err == nil {
		return sp == path.Join(l.Export.Share, l.SubDir)
	}
	return true
}

// unhealthyError says a mounted volume could not be statfs-ed.
type unhealthyError struct {
	volumeID, source string
	err              error
}

func (e *unhealthyError) Error() string {
	why := "is unusable"
	if errors.Is(e.err, context.DeadlineExceeded) {
		why = "does not answer"
	}
	return fmt.Sprintf("volume %q: NFS server of %q %s: %v", e.volumeID, e.source, why, e.err)
}

func (e *unhealthyError) Unwrap() error { return fault.New(fault.Unavailable, "%v", e.err) }

// usage validates the request fields and statfs-es the mounted volume path
// within statsTimeout. Errors: an InvalidArgument status for a missing
// field; fault errors otherwise: NotFound (not mounted, or another volume),
// or *unhealthyError (Unavailable).
func (s *Node) usage(ctx context.Context, volumeID, p string) (nfsmount.Usage, error) {
	if err := checkIDAndPath(volumeID, "volume path", p); err != nil {
		return nfsmount.Usage{}, err
	}
	tg, err := s.targets.Check(p)
	if err != nil {
		// No volume is published there (the CSI spec's answer for a
		// path that does not hold the volume is NotFound).
		return nfsmount.Usage{}, fault.Wrap(fault.NotFound, err, "volume path")
	}
	p = tg.Path()
	cur, err := s.mounter.Mounted(p)
	if err != nil {
		return nfsmount.Usage{}, err
	}
	if cur == nil || !strings.HasPrefix(cur.FsType, "nfs") {
		return nfsmount.Usage{}, fault.New(fault.NotFound, "volume path %q is not a mounted NFS volume", p)
	}
	if !carries(s.names, volumeID, cur.Source) {
		return nfsmount.Usage{}, fault.New(fault.NotFound, "volume path %q has %q mounted, which is not volume %q", p, cur.Source, volumeID)
	}
	pctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	u, err := s.mounter.Probe(pctx, p)
	if err != nil {
		return u, &unhealthyError{volumeID: volumeID, source: cur.Source, err: err}
	}
	return u, nil
}
