package csiserver

import (
	"context"
	"errors"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// copyWait is how long a call that starts a copy (CreateSnapshot, a
// CreateVolume from a source) waits for it before answering "not yet":
// a small tree is done by then and answered at once; a large one goes on
// in the background, and the caller's retries see its progress.
const copyWait = 2 * time.Second

// contentSource turns a CreateVolume content source into the record's
// Source: a snapshot or a volume nfsdir made on the share e. IDs that are
// not nfsdir's name nothing nfsdir has (NotFound); one on another share is
// InvalidArgument, since copies stay on their share.
func contentSource(cs *csi.VolumeContentSource, e export.Export, names export.Names) (*provision.Source, error) {
	if cs == nil {
		return nil, nil
	}
	var raw, kind string
	var id volumeid.ID
	var err error
	switch {
	case cs.GetSnapshot() != nil:
		raw, kind = cs.GetSnapshot().GetSnapshotId(), "snapshot"
		id, err = volumeid.ParseSnapshot(raw)
		if l, lerr := volumeid.ParseLegacySnapshot(raw); err != nil && lerr == nil {
			// csi-driver-nfs's tar.gz on this share: unpacked into the
			// new volume, never deleted.
			if l.Export.String() != e.String() {
				return nil, invalid("csi-driver-nfs snapshot %q is on %s, the new volume on %s: nfsdir restores within one share only", raw, l.Export, e)
			}
			return &provision.Source{Archive: l.Archive}, nil
		}
	case cs.GetVolume() != nil:
		raw, kind = cs.GetVolume().GetVolumeId(), "volume"
		id, err = volumeid.Parse(raw)
	default:
		return nil, invalid("volume content source names neither a snapshot nor a volume")
	}
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "source %s %q does not exist: %v", kind, raw, err)
	}
	if err := locate(names, &id); err != nil {
		return nil, toStatus(err)
	}
	if id.Export.String() != e.String() {
		return nil, invalid("source %s %q is on %s, the new volume on %s: nfsdir copies within one share only", kind, raw, id.Export, e)
	}
	return &provision.Source{Snapshot: id.Snapshot, Key: id.Key, Token: id.Token}, nil
}

// awaitFill starts (or finds) the copy that fills the new volume of id and
// waits for it up to copyWait: a volume still filling is Aborted, with how
// far the copy has come, and the caller's retry finds it further on.
func (s *Controller) awaitFill(ctx context.Context, a *provision.Area, share *shares.Share, id volumeid.ID, rec *provision.Record) error {
	if rec.Abandoned {
		return fault.New(fault.Aborted, "volume %q was never handed out and nobody asked for it for too long: it is being discarded; retry to make it anew", rec.Name)
	}
	// Asked for: not abandoned (provision.SweepAbandoned).
	if after := s.shares.AbandonAfter(); after > 0 {
		if err := a.Pending().MarkAsked(id, rec, after/8); err != nil {
			return err
		}
	}
	var filling bool
	var st shares.CopyState
	var err error
	if !rec.Copied { // else complete, waiting to be handed out
		filling, st, err = s.shares.FillState(a, share, id, waitFor(ctx))
	}
	switch {
	case errors.Is(err, provision.ErrGone):
		return fault.New(fault.Aborted, "volume %q was deleted while it was being filled; retry", rec.Name)
	case err != nil:
		return err
	case !filling:
		err := a.Pending().HandOut(id, rec)
		if errors.Is(err, provision.ErrGone) {
			return fault.New(fault.Aborted, "volume %q was deleted, or changed, while it was being handed out; retry", rec.Name)
		}
		rec.Filling = false
		return err
	case st.Err != nil && !fault.KindOf(st.Err).Final():
		return fault.Wrap(fault.KindOf(st.Err), st.Err, "volume %q: filling it from %s failed (retried)", rec.Name, rec.Source)
	case st.Err != nil:
		// The provisioner stops at this answer and will never delete a
		// volume it was not given: the half-filled one goes now (it was
		// never usable), and a retry starts over.
		if err := a.DiscardFill(ctx, id); err != nil {
			return fault.Wrap(fault.Unavailable, err, "volume %q: filling it from %s failed (%v), and removing the half-filled volume failed; retry", rec.Name, rec.Source, st.Err)
		}
		s.shares.ForgetFill(id)
		s.shares.Purge(share)
		return fault.Wrap(fault.KindOf(st.Err), st.Err, "volume %q: filling it from %s failed, and the half-filled volume is removed", rec.Name, rec.Source)
	}
	return fault.New(fault.Aborted, "volume %q is being filled from %s: %d entries and %d bytes copied so far; retry until it is done", rec.Name, rec.Source, st.Entries, st.Bytes)
}

// waitFor is copyWait, or less when ctx ends sooner (with a margin for
// the answer).
func waitFor(ctx context.Context) time.Duration {
	w := copyWait
	if dl, ok := ctx.Deadline(); ok {
		w = min(w, time.Until(dl)/2)
	}
	return max(w, 0)
}

// CreateSnapshot records a snapshot of a volume and copies the volume's
// tree into the share's metadata area in the background: the answer says
// ready_to_use once the copy is complete (small volumes: at once), and
// repeated calls, or ListSnapshots, follow it.
func (s *Controller) CreateSnapshot(ctx context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("snapshot name is required")
	}
	raw := req.GetSourceVolumeId()
	if raw == "" {
		return nil, invalid("source volume ID is required")
	}
	src, err := volumeid.Parse(raw)
	if err != nil {
		if _, lerr := volumeid.ParseLegacy(raw); lerr == nil {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q was not created by nfsdir (csi-driver-nfs ID); hand it over with `nfsdir adopt` to snapshot it", raw)
		}
		return nil, status.Errorf(codes.NotFound, "source volume %q does not exist: %v", raw, err)
	}
	if err := locate(s.names, &src); err != nil {
		return nil, toStatus(err)
	}
	var st shares.SnapshotState
	err = s.bounded(ctx, "snapshot "+req.GetName(), func() (err error) {
		st, err = s.shares.Snapshots().CreateSnapshot(ctx, src, req.GetName(), waitFor(ctx))
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	if st.Copy.Err != nil && !st.Ready {
		return nil, toStatus(fault.Wrap(fault.KindOf(st.Copy.Err), st.Copy.Err, "snapshot %q: its copy failed (retried)", req.GetName()))
	}
	if st.Ready {
		klog.Infof("snapshot %q of volume %q: ready", req.GetName(), st.Snapshot.SourceName)
	} else {
		klog.Infof("snapshot %q of volume %q: copying, %d entries and %d bytes so far", req.GetName(), st.Snapshot.SourceName, st.Copy.Entries, st.Copy.Bytes)
	}
	return &csi.CreateSnapshotResponse{Snapshot: csiSnapshot(st, raw)}, nil
}

// DeleteSnapshot removes a snapshot through its record: its copy goes to
// the trash and is purged in the background. IDs that are not nfsdir's,
// and snapshots already gone, succeed.
func (s *Controller) DeleteSnapshot(ctx context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	raw := req.GetSnapshotId()
	if raw == "" {
		return nil, invalid("snapshot ID is required")
	}
	id, err := volumeid.ParseSnapshot(raw)
	if err != nil {
		klog.Warningf("DeleteSnapshot %q: %v; nothing to do", raw, err)
		return &csi.DeleteSnapshotResponse{}, nil
	}
	if err := locate(s.names, &id); err != nil {
		return nil, toStatus(err) // never taken as gone
	}
	err = s.bounded(ctx, raw, func() error { return s.shares.Snapshots().DeleteSnapshot(ctx, id) })
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots pages through the snapshots of every share this controller
// has worked on, or returns the one snapshot asked for by ID, or those of
// one source volume.
func (s *Controller) ListSnapshots(ctx context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries must not be negative")
	}
	resp := &csi.ListSnapshotsResponse{}
	if raw := req.GetSnapshotId(); raw != "" {
		id, err := volumeid.ParseSnapshot(raw)
		if err != nil {
			return resp, nil // names no snapshot of nfsdir's
		}
		if err := locate(s.names, &id); err != nil {
			return nil, toStatus(err)
		}
		st, err := s.snapshot(ctx, raw, id)
		if err != nil {
			return nil, err
		}
		if st != nil && (req.GetSourceVolumeId() == "" || st.Snapshot.SourceIs(mustParse(req.GetSourceVolumeId()))) {
			resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(*st, sourceID(id, st.Snapshot))})
		}
		return resp, nil
	}
	var source *volumeid.ID
	if raw := req.GetSourceVolumeId(); raw != "" {
		id, err := volumeid.Parse(raw)
		if err != nil {
			return resp, nil // no snapshot of nfsdir's has it as its source
		}
		if err := locate(s.names, &id); err != nil {
			return nil, toStatus(err)
		}
		source = &id
	}
	list, next, err := s.shares.Snapshots().ListSnapshots(ctx, req.GetStartingToken(), int(req.GetMaxEntries()), source)
	if err != nil {
		return nil, toStatus(err)
	}
	resp.NextToken = next
	for _, st := range list {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: csiSnapshot(st, sourceID(st.ID, st.Snapshot))})
	}
	return resp, nil
}

// GetSnapshot returns one snapshot by its ID; a snapshot that is gone, or
// an ID that is not nfsdir's, is NotFound.
func (s *Controller) GetSnapshot(ctx context.Context, req *csi.GetSnapshotRequest) (*csi.GetSnapshotResponse, error) {
	raw := req.GetSnapshotId()
	if raw == "" {
		return nil, invalid("snapshot ID is required")
	}
	id, err := volumeid.ParseSnapshot(raw)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %q: not a snapshot ID of nfsdir's: %v", raw, err)
	}
	if err := locate(s.names, &id); err != nil {
		return nil, toStatus(err)
	}
	st, err := s.snapshot(ctx, raw, id)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, status.Errorf(codes.NotFound, "snapshot %q does not exist", raw)
	}
	return &csi.GetSnapshotResponse{Snapshot: csiSnapshot(*st, sourceID(id, st.Snapshot))}, nil
}

// snapshot looks up the snapshot id (raw as asked for): nil when it is
// gone.
func (s *Controller) snapshot(ctx context.Context, raw string, id volumeid.ID) (*shares.SnapshotState, error) {
	var st *shares.SnapshotState
	err := s.bounded(ctx, raw, func() (err error) {
		st, err = s.shares.Snapshots().Snapshot(ctx, id)
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return st, nil
}

// mustParse parses a volume ID; one that is not nfsdir's yields the zero
// ID, which no snapshot has as its source.
func mustParse(raw string) volumeid.ID {
	id, _ := volumeid.Parse(raw)
	return id
}

// sourceID rebuilds the ID of the source volume of snap, a snapshot of
// the ID sid: same share and options, the source's key and token.
func sourceID(sid volumeid.ID, snap *provision.Snapshot) string {
	sid.Snapshot, sid.Key, sid.Token = false, snap.SourceKey, snap.SourceToken
	return sid.String()
}

func csiSnapshot(st shares.SnapshotState, source string) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId:     st.ID.String(),
		SourceVolumeId: source,
		SizeBytes:      st.Snapshot.SizeBytes,
		CreationTime:   timestamppb.New(st.Snapshot.Created),
		ReadyToUse:     st.Ready,
	}
}
