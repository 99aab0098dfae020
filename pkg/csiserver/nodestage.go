package csiserver

import (
	"context"
	"errors"
	"slices"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/mounttable"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/targetdir"
)

// NodeStageVolume, in NodeStage mode, binds the volume's directory on its
// staging path from the node's one mount of its export and options
// (pkg/nodestage), mounting the export first when the node has none. Like
// a publish, it acts only on kubelet's staging layout reached without
// symlinks and answers OK only once the mount table shows the volume's
// directory there.
func (s *Node) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if s.stager == nil {
		return nil, status.Error(codes.FailedPrecondition, "this node plugin does not stage volumes (flag --node-stage, chart value node.stage)")
	}
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is required")
	}
	tg, err := s.targets.CheckStaging(req.GetStagingTargetPath())
	if err != nil {
		return nil, invalid("%v", err)
	}
	vol, opts, err := s.volumeMount(ctx, req.GetVolumeId(), req.GetVolumeCapability(), req.GetVolumeContext(), true)
	if err != nil {
		return nil, err
	}
	if vol.Ephemeral {
		return nil, invalid("volume %q: inline volumes are published without staging", req.GetVolumeId())
	}
	staging := tg.Path()
	if !s.locks.TryAcquire(staging) {
		return nil, busy("staging path " + staging)
	}
	defer s.locks.Release(staging)
	if err := targetdir.CheckParent(tg); err != nil {
		return nil, toStatus(err)
	}
	source := vol.Export.Source(vol.SubDir)
	cur, err := s.mounter.Mounted(staging)
	if err != nil {
		return nil, toStatus(err)
	}
	if cur != nil {
		if !mounttable.SameSource(cur.Source, source) {
			return nil, status.Errorf(codes.AlreadyExists, "staging path %q already has %q mounted, not %q", staging, cur.Source, source)
		}
		if ok, err := s.healthy(ctx, staging, source); ok || err != nil {
			return &csi.NodeStageVolumeResponse{}, err
		}
	}
	if err := targetdir.Make(tg); err != nil {
		return nil, toStatus(err)
	}
	if err := s.stager.Stage(ctx, vol.Export, vol.SubDir, opts, staging); err != nil {
		return nil, toStatus(err)
	}
	// The staging path shows the options of the node's mount of the
	// export, which every publish of the volume then has.
	if err := s.checkOptions(ctx, publication{vol: vol, opts: opts, tg: tg, source: source, target: staging}); err != nil {
		return nil, toStatus(err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unmounts the staging path (reading the mount table, not
// the path, so a dead server cannot block it) and then the node's mounts
// of exports no staged volume uses any more. The staging directory is
// kubelet's to remove.
func (s *Node) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, invalid("volume ID is required")
	}
	tg, err := s.targets.CheckStaging(req.GetStagingTargetPath())
	if err != nil {
		return nil, invalid("%v", err)
	}
	staging := tg.Path()
	if !s.locks.TryAcquire(staging) {
		return nil, busy("staging path " + staging)
	}
	defer s.locks.Release(staging)
	if err := targetdir.CheckParent(tg); err != nil {
		return nil, toStatus(err)
	}
	if err := s.mounter.Unmount(ctx, staging); err != nil {
		return nil, toStatus(err)
	}
	table, err := s.mounter.Table()
	if err != nil {
		return nil, toStatus(err)
	}
	if _, still := table[staging]; still {
		return nil, status.Errorf(codes.Internal, "staging path %q is still mounted after unmount", staging)
	}
	s.noteOptions(staging, "")
	if s.stager != nil {
		s.stager.Sweep(ctx, table)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

// staged checks a publish's staging path: the volume (source) must be
// mounted there. It returns the checked path and its mount.
func (s *Node) staged(stagingPath, source string) (string, *nfsmount.Entry, error) {
	tg, err := s.targets.CheckStaging(stagingPath)
	if err != nil {
		return "", nil, invalid("%v", err)
	}
	cur, err := s.mounter.Mounted(tg.Path())
	if err != nil {
		return "", nil, toStatus(err)
	}
	if cur == nil || !mounttable.SameSource(cur.Source, source) {
		return "", nil, status.Errorf(codes.FailedPrecondition, "volume %q is not staged at %q (NodeStageVolume first)", source, tg.Path())
	}
	return tg.Path(), cur, nil
}

// bindStaged binds the publication's staging path on its target; a
// read-only publish keeps the staging mount's restrictions and adds ro.
func (s *Node) bindStaged(ctx context.Context, p publication) error {
	var flags []string
	if p.opts.Has("ro") {
		flags = readOnlyFlags(p.stagedOptions)
	}
	if err := s.mounter.Bind(ctx, p.staged, p.target, flags); err != nil {
		return err
	}
	cur, err := s.mounter.Mounted(p.target)
	if err == nil && (cur == nil || !mounttable.SameSource(cur.Source, p.source)) {
		err = status.Errorf(codes.Internal, "binding %q on %q: the mount table shows %v there", p.staged, p.target, cur)
		if uerr := s.mounter.Unmount(context.WithoutCancel(ctx), p.target); uerr != nil {
			klog.ErrorS(uerr, "unmounting a bind that is not the volume's", "target", p.target)
		}
	}
	return err
}

// perMount are the flags a bind mount keeps of its own, which a remount of
// the bind sets anew.
var perMount = []string{"nosuid", "nodev", "noexec", "noatime", "nodiratime", "relatime", "strictatime", "nosymfollow"}

// readOnlyFlags returns ro and the per-mount flags among a mount's options:
// what a read-only remount of its bind must name so as not to lose any.
func readOnlyFlags(options []string) []string {
	out := []string{"ro"}
	for _, o := range options {
		if slices.Contains(perMount, o) && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// healthy probes the mount of source at target within statsTimeout: true
// when it answers; Unavailable when its server does not (a slow or
// unreachable server, a failover, is no reason to take the mount away
// from the pods using it: it stays); false and unmounted when its file
// handle is stale, to be mounted anew.
func (s *Node) healthy(ctx context.Context, target, source string) (bool, error) {
	pctx, cancel := context.WithTimeout(ctx, statsTimeout)
	_, perr := s.mounter.Probe(pctx, target)
	cancel()
	switch {
	case perr == nil:
		return true, nil
	case !errors.Is(perr, unix.ESTALE):
		return false, status.Errorf(codes.Unavailable, "%q: the NFS server of %q does not answer (%v); the mount stays, retry later", target, source, perr)
	}
	klog.InfoS("existing mount has a stale file handle; mounting again", "target", target, "source", source, "err", perr)
	return false, toStatus(s.mounter.Unmount(ctx, target))
}
