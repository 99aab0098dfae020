package csiserver

import (
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/params"
)

// checkInline applies the inline-volume rules to a CSI inline volume, whose
// attributes a pod author chose: no option that changes the mount point's
// owner or mode (X-mount.*), and, when the node has an allow-list, only
// exports on it, read-only unless the entry says rw. It returns whether to
// mount read-only.
func (s *Node) checkInline(vol params.Volume, opts mountopts.Options, readOnly bool) (bool, error) {
	if !vol.Ephemeral {
		return readOnly, nil
	}
	for _, o := range opts {
		if strings.HasPrefix(strings.ToLower(o), "x-mount.") {
			return false, invalid("inline volume: mount option %q is refused: it changes the mount point's owner or mode", o)
		}
	}
	if s.inline == nil {
		return readOnly, nil
	}
	ok, rw := s.inline.Allows(vol.Export, vol.SubDir)
	if !ok {
		return false, status.Errorf(codes.PermissionDenied, "inline volume %q is not on this node's inline allow-list (chart value feature.inlineVolumeAllow)", vol.Export.Source(vol.SubDir))
	}
	return readOnly || !rw, nil
}

func singleWriter(c *csi.VolumeCapability) bool {
	return c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
}

// checkSingleWriter refuses a SINGLE_NODE_SINGLE_WRITER publish when the
// volume is already mounted at another target on this node (its staging
// path is not a target). The caller holds the volume's lock.
func (s *Node) checkSingleWriter(p publication) error {
	targets, err := s.mounter.Targets(p.source)
	if err != nil {
		return toStatus(err)
	}
	for _, t := range targets {
		if _, err := s.targets.Check(t); err != nil || t == p.staged {
			continue // a staging path, or a mount of nfsdir's own
		}
		if t != p.target {
			return status.Errorf(codes.FailedPrecondition, "volume %q has access mode SINGLE_NODE_SINGLE_WRITER and is already published at %q", p.source, t)
		}
	}
	return nil
}
