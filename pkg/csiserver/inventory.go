package csiserver

import (
	"context"
	"errors"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// ListVolumes pages through the volumes recorded on every share this
// controller has worked on, from the records on the shares. nfsdir has no
// attach stage, so it knows no published nodes (the CSI spec ties them to
// ControllerPublishVolume).
func (s *Controller) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries must not be negative")
	}
	vols, next, err := s.shares.List(ctx, req.GetStartingToken(), int(req.GetMaxEntries()), false)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &csi.ListVolumesResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, &csi.ListVolumesResponse_Entry{Volume: csiVolume(v.ID, v.Record)})
	}
	return resp, nil
}

// ControllerListVolumeHealth pages through the volumes as ListVolumes, with
// what is wrong with each (see health).
func (s *Controller) ControllerListVolumeHealth(ctx context.Context, req *csi.ControllerListVolumeHealthRequest) (*csi.ControllerListVolumeHealthResponse, error) {
	if req.GetMaxEntries() < 0 {
		return nil, invalid("max_entries must not be negative")
	}
	vols, next, err := s.shares.List(ctx, req.GetStartingToken(), int(req.GetMaxEntries()), true)
	if err != nil {
		return nil, toStatus(err)
	}
	resp := &csi.ControllerListVolumeHealthResponse{NextToken: next}
	for _, v := range vols {
		resp.Entries = append(resp.Entries, health(v.ID.String(), v.Problems))
	}
	return resp, nil
}

// ControllerGetVolume returns a volume from its record.
func (s *Controller) ControllerGetVolume(ctx context.Context, req *csi.ControllerGetVolumeRequest) (*csi.ControllerGetVolumeResponse, error) {
	id, rec, _, err := s.inspect(ctx, req.GetVolumeId(), false)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeResponse{Volume: csiVolume(id, rec), Status: &csi.ControllerGetVolumeResponse_VolumeStatus{}}, nil
}

// ControllerGetVolumeHealth reports what is wrong with a volume as the
// controller sees it on the share: its directory gone or replaced
// (DATA_LOSS: the volume's data is not where the volume is), or its last
// count over its capacity (DEGRADED).
func (s *Controller) ControllerGetVolumeHealth(ctx context.Context, req *csi.ControllerGetVolumeHealthRequest) (*csi.ControllerGetVolumeHealthResponse, error) {
	id, _, problems, err := s.inspect(ctx, req.GetVolumeId(), true)
	if err != nil {
		return nil, err
	}
	return &csi.ControllerGetVolumeHealthResponse{VolumeHealth: health(id.String(), problems)}, nil
}

// inspect reads the record of a volume ID, and with check its problems.
// An ID nfsdir did not make, or a volume without a record, is NotFound.
func (s *Controller) inspect(ctx context.Context, raw string, check bool) (volumeid.ID, *provision.Record, []provision.Problem, error) {
	if raw == "" {
		return volumeid.ID{}, nil, nil, invalid("volume ID is required")
	}
	id, err := volumeid.Parse(raw)
	if err != nil {
		return id, nil, nil, status.Errorf(codes.NotFound, "volume %q is not an nfsdir volume: %v", raw, err)
	}
	if err := locate(s.names, &id); err != nil {
		return id, nil, nil, toStatus(err)
	}
	var rec *provision.Record
	var problems []provision.Problem
	err = s.bounded(ctx, raw, func() error {
		return s.shares.OnVolume(ctx, id, func(a *provision.Area, _ *shares.Share) (err error) {
			if rec, err = a.Lookup(id); err != nil || rec == nil || !check {
				return err
			}
			problems, err = a.Figures().Health(rec)
			return err
		})
	})
	if err != nil && !errors.Is(err, provision.ErrNoArea) {
		return id, nil, nil, toStatus(err)
	}
	if rec == nil {
		return id, nil, nil, toStatus(fault.New(fault.NotFound, "volume %q does not exist", raw))
	}
	return id, rec, problems, nil
}

// csiVolume is the CSI volume of a record.
func csiVolume(id volumeid.ID, rec *provision.Record) *csi.Volume {
	v := &csi.Volume{VolumeId: id.String(), CapacityBytes: rec.CapacityBytes, VolumeContext: map[string]string{
		params.KeyServer: id.Export.Server,
		params.KeyShare:  id.Export.Share,
		"subDir":         rec.SubDir,
	}}
	if id.Name != "" {
		// The node looks up where the export is at each publish; server
		// and share say where it was, for a node without the name.
		v.VolumeContext[params.KeyExport] = id.Name
	}
	return v
}

// health is the CSI health of a volume with problems.
func health(volumeID string, problems []provision.Problem) *csi.VolumeHealth {
	h := &csi.VolumeHealth{VolumeId: volumeID}
	for _, p := range problems {
		st := csi.VolumeHealthErrorType_DEGRADED
		if p.Lost {
			st = csi.VolumeHealthErrorType_DATA_LOSS
		}
		h.HealthStatuses = append(h.HealthStatuses, &csi.VolumeHealth_VolumeHealthEntry{Status: st, Reason: p.Reason, Message: p.Message})
	}
	return h
}
