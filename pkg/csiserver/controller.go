package csiserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/keylock"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/params"
	"github.com/nfsdir/nfsdir/pkg/placement"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/serveragent"
	"github.com/nfsdir/nfsdir/pkg/shares"
	"github.com/nfsdir/nfsdir/pkg/subdir"
	"github.com/nfsdir/nfsdir/pkg/usage"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Controller serves the CSI Controller service: volumes are directories on
// kept share mounts. There is no attach stage.
type Controller struct {
	csi.UnimplementedControllerServer
	shares          *shares.Set
	defaultOnDelete params.OnDelete
	defaultMode     uint32
	locks           keylock.Set
	// claims reads the claim's labels and annotations for subDir
	// templates that use them; nil when the operator did not enable it.
	claims claimReader
	// quotas reaches the quota agents StorageClasses name; nil when the
	// controller has no client certificate for them.
	quotas quotaSetter
	// cluster names the cluster in new volumes' records and answers
	// reuseDirectory; nil: not known.
	cluster *cluster
	// names says where each named export is now (--export).
	names export.Names
	// placer chooses the export of a new volume.
	placer *placer
}

// quotaSetter sets and clears volumes' limits through quota agents
// (serveragent.Pool).
type quotaSetter interface {
	Set(ctx context.Context, endpoint string, v serveragent.Volume, bytes, inodes uint64) (*serveragent.Usage, error)
	Clear(ctx context.Context, endpoint string, v serveragent.Volume) error
}

// agentUsage reads volumes' usage from their quota agents: the
// accountant's source for the volumes whose size an agent enforces.
type agentUsage struct{ pool *serveragent.Pool }

func (u agentUsage) Usage(ctx context.Context, endpoint, share, subDir, token string) (usage.Result, error) {
	began := time.Now()
	got, err := u.pool.Get(ctx, endpoint, serveragent.Volume{Share: share, SubDir: subDir, Token: token})
	if err != nil {
		return usage.Result{}, err
	}
	if got.Project == 0 {
		return usage.Result{}, fmt.Errorf("quota agent %s: %s has no project", endpoint, subDir)
	}
	return usage.Result{Bytes: int64(got.Bytes), Inodes: int64(got.Inodes), Took: time.Since(began)}, nil
}

// setQuota has the volume's quota agent, if it has one, limit it to its
// capacity.
func (s *Controller) setQuota(ctx context.Context, e export.Export, rec *provision.Record) error {
	if rec.QuotaAgent == "" {
		return nil
	}
	if s.quotas == nil {
		return noQuotaClient(rec.QuotaAgent)
	}
	u, err := s.quotas.Set(ctx, rec.QuotaAgent, serveragent.Volume{Share: e.Share, SubDir: rec.SubDir, Token: rec.Token}, uint64(max(rec.CapacityBytes, 0)), 0)
	if err != nil {
		return err
	}
	klog.Infof("volume %q: quota %d bytes (project %d) set by %s", rec.Name, u.LimitBytes, u.Project, rec.QuotaAgent)
	return nil
}

// clearQuota has the volume's quota agent, if it has one, clear its limit.
func (s *Controller) clearQuota(ctx context.Context, e export.Export, rec *provision.Record) error {
	if rec == nil || rec.QuotaAgent == "" {
		return nil
	}
	if s.quotas == nil {
		return noQuotaClient(rec.QuotaAgent)
	}
	return s.quotas.Clear(ctx, rec.QuotaAgent, serveragent.Volume{Share: e.Share, SubDir: rec.SubDir, Token: rec.Token})
}

func noQuotaClient(agent string) error {
	return fault.New(fault.FailedPrecondition, "the volume's agent is %s, and the controller has no client certificate for quota agents: start it with --quota-tls-cert, --quota-tls-key and --quota-ca (chart: quota.clientSecret)", agent)
}

// claimReader reads what subDir templates may use of a claim
// (kubeapi.Client).
type claimReader interface {
	Claim(ctx context.Context, namespace, name string) (*subdir.Claim, error)
}

var controllerCaps = []csi.ControllerServiceCapability_RPC_Type{
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
	csi.ControllerServiceCapability_RPC_SINGLE_NODE_MULTI_WRITER,
	csi.ControllerServiceCapability_RPC_GET_CAPACITY,
	csi.ControllerServiceCapability_RPC_EXPAND_VOLUME,
	csi.ControllerServiceCapability_RPC_LIST_VOLUMES,
	csi.ControllerServiceCapability_RPC_GET_VOLUME,
	csi.ControllerServiceCapability_RPC_GET_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_LIST_VOLUME_HEALTH,
	csi.ControllerServiceCapability_RPC_MODIFY_VOLUME,
	csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
	csi.ControllerServiceCapability_RPC_GET_SNAPSHOT,
	csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
}

// ControllerGetCapabilities lists the controller RPCs nfsdir implements.
func (s *Controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	resp := &csi.ControllerGetCapabilitiesResponse{}
	for _, c := range controllerCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.ControllerServiceCapability{
			Type: &csi.ControllerServiceCapability_Rpc{Rpc: &csi.ControllerServiceCapability_RPC{Type: c}}})
	}
	return resp, nil
}

// CreateVolume creates <share>/<subDir> and records it on the share.
func (s *Controller) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	preq, cp, opts, err := s.createRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	var rec *provision.Record
	var id volumeid.ID
	err = s.bounded(ctx, req.GetName(), func() error {
		if err := s.placer.place(ctx, req.GetVolumeContentSource(), &cp, &preq, opts); err != nil {
			return err
		}
		return s.shares.On(ctx, cp.Export, opts, true, func(a *provision.Area, share *shares.Share) (err error) {
			if rec, err = a.Create(ctx, preq); err != nil {
				return err
			}
			// The limit is in place before the volume is handed out
			// (or filled): a retry sets it again.
			if err := s.setQuota(ctx, cp.Export, rec); err != nil {
				return err
			}
			if id, err = s.shares.VolumeID(cp.Export, rec, share.Options); err != nil || !rec.Filling {
				return err
			}
			return s.awaitFill(ctx, a, share, id, rec)
		})
	})
	if err != nil {
		return nil, toStatus(err)
	}
	s.placer.memo.done(req.GetName())
	// A retry finds the address written already: nothing to check again.
	mut, _ := params.ParseMutable(req.GetMutableParameters())
	if move := mountServerChange(mut, id); move != nil && *move != rec.MountServer {
		if rec, err = s.modify(ctx, id.String(), id, provision.Change{MountServer: move}); err != nil {
			return nil, err
		}
	}
	klog.Infof("volume %q: %q on %s (onDelete=%s, mode %04o, %s)", rec.Name, rec.SubDir, cp.Export, rec.OnDelete, rec.Mode, rec.Source)
	vctx := csiVolume(id, rec).VolumeContext
	if cp.StrictOptions {
		// A class's choice for the node's mounts: it goes in the PV's
		// attributes, where NodePublishVolume finds it.
		vctx[params.Spell(params.KeyStrictOptions)] = "true"
	}
	return &csi.CreateVolumeResponse{Volume: &csi.Volume{
		VolumeId:      id.String(),
		CapacityBytes: rec.CapacityBytes,
		VolumeContext: vctx,
		ContentSource: req.GetVolumeContentSource(),
	}}, nil
}

// createRequest checks a CreateVolume request and works out the volume it
// asks for: the StorageClass's parameters, the VolumeAttributesClass's
// and the driver's defaults. Where it goes, and its content source
// there, are for place.
func (s *Controller) createRequest(ctx context.Context, req *csi.CreateVolumeRequest) (preq provision.Request, cp params.Create, opts mountopts.Options, err error) {
	if req.GetName() == "" {
		return preq, cp, opts, invalid("volume name is required")
	}
	opts, err = checkCapabilities(req.GetVolumeCapabilities())
	if err != nil {
		return preq, cp, opts, err
	}
	capacity, err := capacityOf(req.GetCapacityRange())
	if err != nil {
		return preq, cp, opts, err
	}
	p := req.GetParameters()
	if _, ok := lookupFold(p, params.KeyPVName); !ok {
		// csi-provisioner names the volume after the PV.
		p = withEntry(p, params.KeyPVName, req.GetName())
	}
	claim, err := s.claimOf(ctx, p)
	if err != nil {
		return preq, cp, opts, toStatus(err)
	}
	cp, err = params.ParseCreate(p, claim)
	if err != nil {
		return preq, cp, opts, invalid("%v", err)
	}
	if cp.QuotaAgent != "" && s.quotas == nil {
		return preq, cp, opts, toStatus(noQuotaClient(cp.QuotaAgent))
	}
	if cp.CopyAgent != "" && s.quotas == nil {
		return preq, cp, opts, toStatus(noQuotaClient(cp.CopyAgent))
	}
	preq = provision.Request{Name: req.GetName(), SubDir: cp.SubDir, OnDelete: cp.OnDelete, Mode: cp.Mode,
		UID: cp.UID, GID: cp.GID, CapacityBytes: capacity, Shared: cp.Shared, Options: opts.ForShare().String(), QuotaAgent: cp.QuotaAgent,
		CopyAgent: cp.CopyAgent, KeepSetID: cp.KeepSetID, GIDRange: cp.GIDRange, ExportName: cp.ExportName}
	if err := s.provenance(ctx, p, cp, &preq); err != nil {
		return preq, cp, opts, err
	}
	mut, err := params.ParseMutable(req.GetMutableParameters())
	if err != nil {
		return preq, cp, opts, invalid("VolumeAttributesClass: %v", err)
	}
	if mut.OnDelete != "" {
		preq.OnDelete = mut.OnDelete
	}
	if mut.HasMountOptions {
		o := mut.MountOptions.String()
		preq.PublishOptions = &o
	}
	if preq.OnDelete == "" {
		preq.OnDelete = s.defaultOnDelete
	}
	if preq.Shared && preq.OnDelete != params.Retain {
		return preq, cp, opts, invalid("parameter \"allowSharedSubDir\" requires onDelete: retain; the driver default is %s", preq.OnDelete)
	}
	if preq.Mode == 0 {
		preq.Mode = s.defaultMode
	}
	return preq, cp, opts, nil
}

// claimOf reads the claim's labels and annotations when the subDir
// template of parameters p uses them, and returns nil otherwise.
func (s *Controller) claimOf(ctx context.Context, p map[string]string) (*subdir.Claim, error) {
	if !params.NeedsClaim(p) {
		return nil, nil
	}
	if s.claims == nil {
		return nil, fault.New(fault.InvalidArgument, "the subDir template uses the claim's labels or annotations, and reading them is off: start the controller with --read-claim-metadata (chart value controller.claimMetadata.enabled)")
	}
	ns, _ := lookupFold(p, params.KeyPVCNamespace)
	name, _ := lookupFold(p, params.KeyPVCName)
	return s.claims.Claim(ctx, ns, name)
}

// DeleteVolume applies the volume's onDelete policy. Volumes nfsdir did not
// create are never touched.
func (s *Controller) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, invalid("volume ID is required")
	}
	id, err := volumeid.Parse(raw)
	if err != nil {
		if l, lerr := volumeid.ParseLegacy(raw); lerr == nil {
			var resp *csi.DeleteVolumeResponse
			err := s.bounded(ctx, raw, func() (err error) {
				resp, err = s.deleteLegacy(ctx, raw, l)
				return err
			})
			return resp, toStatus(err)
		}
		// Nothing nfsdir could have created: there is nothing to delete.
		klog.Warningf("DeleteVolume %q: %v; nothing to do", raw, err)
		return &csi.DeleteVolumeResponse{}, nil
	}
	if err := locate(s.names, &id); err != nil {
		return nil, toStatus(err) // never taken as gone
	}
	err = s.bounded(ctx, raw, func() error {
		return s.shares.OnVolume(ctx, id, func(a *provision.Area, share *shares.Share) error {
			// The quota goes first, while the agent can still find the
			// directory by its record; a project left with limits
			// would never be given again.
			purge, err := a.DeleteWith(ctx, id, func(rec *provision.Record) error {
				return s.clearQuota(ctx, id.Export, rec)
			})
			if err != nil {
				return err
			}
			s.shares.ForgetFill(id)
			if purge {
				s.shares.Purge(share)
			}
			return nil
		})
	})
	if err != nil && !errors.Is(err, provision.ErrNoArea) {
		return nil, toStatus(err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// deleteLegacy answers DeleteVolume for a csi-driver-nfs ID. A directory
// adopted for exactly this ID (nfsdir serving under csi-driver-nfs's name,
// `nfsdir migrate`) follows its record's onDelete policy. Otherwise nfsdir
// did not create the directory, so it never removes it: when the
// directory is gone already, or the ID itself asks to retain it, there is
// nothing to do; otherwise the operator must decide.
func (s *Controller) deleteLegacy(ctx context.Context, raw string, l volumeid.Legacy) (*csi.DeleteVolumeResponse, error) {
	adopted := false
	err := s.shares.On(ctx, l.Export, nil, false, func(a *provision.Area, share *shares.Share) error {
		rec, err := a.Adoptions().As(raw, l.SubDir)
		if err != nil || rec == nil {
			return err
		}
		adopted = true
		purge, err := a.Delete(ctx, volumeid.ID{Export: l.Export, Key: rec.Key(), Token: rec.Token})
		if err != nil {
			return err
		}
		klog.Infof("DeleteVolume %q: adopted directory %q, onDelete=%s applied", raw, rec.SubDir, rec.OnDelete)
		if purge {
			s.shares.Purge(share)
		}
		return nil
	})
	if err != nil && !errors.Is(err, provision.ErrNoArea) {
		return nil, toStatus(err)
	}
	if adopted {
		return &csi.DeleteVolumeResponse{}, nil
	}
	if strings.EqualFold(l.OnDelete, string(params.Retain)) {
		klog.Infof("DeleteVolume %q: csi-driver-nfs volume with onDelete=retain; directory %q left as it is", raw, l.SubDir)
		return &csi.DeleteVolumeResponse{}, nil
	}
	dir := l.SubDir
	if dir == "" {
		dir = "."
	}
	// The share root only: no metadata area is created on a foreign share.
	share, err := s.shares.Mount(ctx, l.Export, nil)
	if err != nil {
		return nil, toStatus(err)
	}
	_, err = provision.FreshLstat(share.Root(), dir)
	present := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, toStatus(err)
	}
	if !present {
		return &csi.DeleteVolumeResponse{}, nil
	}
	return nil, status.Errorf(codes.FailedPrecondition,
		"volume %q was not created by nfsdir (csi-driver-nfs ID for directory %q on %s); nfsdir never deletes a directory it did not create: delete the data by hand, or hand it over with `nfsdir adopt --legacy-id` or `nfsdir migrate`", raw, l.SubDir, l.Export)
}

// ControllerExpandVolume records the volume's new capacity (online: pods
// keep using it; nothing to do on the nodes). Volumes never shrink
// (OutOfRange). A csi-driver-nfs volume has no record to hold a capacity:
// its expansion is accepted and changes nothing, as with csi-driver-nfs.
func (s *Controller) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, invalid("volume ID is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, invalid("capacity range is required")
	}
	capacity, err := capacityOf(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	id, err := volumeid.Parse(raw)
	if err != nil {
		if _, lerr := volumeid.ParseLegacy(raw); lerr == nil {
			klog.Infof("volume %q (csi-driver-nfs): expansion to %d bytes accepted; nfsdir records capacities of its own volumes only", raw, capacity)
			return &csi.ControllerExpandVolumeResponse{CapacityBytes: capacity}, nil
		}
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist: %v", raw, err)
	}
	if err := locate(s.names, &id); err != nil {
		return nil, toStatus(err)
	}
	rec, err := s.updateRecord(ctx, raw, id, func(a *provision.Area) (*provision.Record, error) { return a.Expand(id, capacity) })
	if err != nil {
		return nil, err
	}
	if err := s.setQuota(ctx, id.Export, rec); err != nil {
		return nil, toStatus(err)
	}
	klog.Infof("volume %q: capacity %d bytes", rec.Name, rec.CapacityBytes)
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: rec.CapacityBytes}, nil
}

// updateRecord runs update on the share of the volume id (raw as the
// caller sent it), bounded as every call on a volume, and returns the
// record it made; a share nfsdir never made is NotFound, any other error
// its gRPC status.
func (s *Controller) updateRecord(ctx context.Context, raw string, id volumeid.ID, update func(*provision.Area) (*provision.Record, error)) (*provision.Record, error) {
	var rec *provision.Record
	err := s.bounded(ctx, raw, func() error {
		return s.shares.OnVolume(ctx, id, func(a *provision.Area, _ *shares.Share) (err error) {
			rec, err = update(a)
			return err
		})
	})
	if errors.Is(err, provision.ErrNoArea) {
		return nil, status.Errorf(codes.NotFound, "volume %q does not exist", raw)
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return rec, nil
}

// ControllerModifyVolume applies a VolumeAttributesClass to a volume: its
// onDelete policy at once, its mount options and the address it is
// mounted from (mountServer, once its directory is seen there) at the
// volume's next NodePublishVolume (pods already running keep their mounts
// until they are restarted). Any other parameter is InvalidArgument
// naming it.
func (s *Controller) ControllerModifyVolume(ctx context.Context, req *csi.ControllerModifyVolumeRequest) (*csi.ControllerModifyVolumeResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, invalid("volume ID is required")
	}
	mut, err := params.ParseMutable(req.GetMutableParameters())
	if err != nil {
		return nil, invalid("VolumeAttributesClass: %v", err)
	}
	id, err := volumeid.Parse(raw)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "volume %q is not an nfsdir volume: %v", raw, err)
	}
	if err := locate(s.names, &id); err != nil {
		return nil, toStatus(err)
	}
	change := provision.Change{OnDelete: mut.OnDelete}
	if mut.HasMountOptions {
		o := mut.MountOptions.String()
		change.PublishOptions = &o
	}
	change.MountServer = mountServerChange(mut, id)
	rec, err := s.modify(ctx, raw, id, change)
	if err != nil {
		return nil, err
	}
	opts := "the StorageClass's"
	if rec.PublishOptions != nil {
		opts = fmt.Sprintf("%q", *rec.PublishOptions)
	}
	server := id.Export.Server + " (its export's)"
	if rec.MountServer != "" {
		server = rec.MountServer
	}
	klog.Infof("volume %q modified: onDelete %s now; from its next publish mount options %s, from server %s (running pods keep their mounts)", rec.Name, rec.OnDelete, opts, server)
	return &csi.ControllerModifyVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms filesystem access of any mode.
func (s *Controller) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	raw := req.GetVolumeId()
	if raw == "" {
		return nil, invalid("volume ID is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalid("volume capabilities are required")
	}
	if err := s.bounded(ctx, raw, func() error { return s.exists(ctx, raw) }); err != nil {
		return nil, toStatus(err)
	}
	if _, err := checkCapabilities(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext:      req.GetVolumeContext(),
		VolumeCapabilities: req.GetVolumeCapabilities(),
		Parameters:         req.GetParameters(),
	}}, nil
}

// exists returns nil when the volume exists, NotFound when it does not.
func (s *Controller) exists(ctx context.Context, raw string) error {
	id, err := volumeid.Parse(raw)
	if err != nil {
		l, lerr := volumeid.ParseLegacy(raw)
		if lerr != nil {
			return fault.New(fault.NotFound, "volume %q does not exist: %v", raw, err)
		}
		share, err := s.shares.Mount(ctx, l.Export, nil)
		if err != nil {
			return err
		}
		dir := l.SubDir
		if dir == "" {
			dir = "."
		}
		if st, err := share.Root().Stat(dir); err != nil || !st.IsDir() {
			return fault.New(fault.NotFound, "volume %q: directory %q does not exist on %s", raw, l.SubDir, l.Export)
		}
		return nil
	}
	if err := locate(s.names, &id); err != nil {
		return err
	}
	var rec *provision.Record
	err = s.shares.OnVolume(ctx, id, func(a *provision.Area, _ *shares.Share) (err error) {
		rec, err = a.Lookup(id)
		return err
	})
	if err != nil && !errors.Is(err, provision.ErrNoArea) {
		return err
	}
	if rec == nil {
		return fault.New(fault.NotFound, "volume %q does not exist", raw)
	}
	return nil
}

// GetCapacity returns the free space of the export the parameters name;
// of a class of several exports, the room of those that take new
// volumes, summed, and the most one of them has as the largest volume.
// Drained exports and space over the fill threshold do not count. Without
// parameters there is no export to measure and it returns 0.
func (s *Controller) GetCapacity(ctx context.Context, req *csi.GetCapacityRequest) (*csi.GetCapacityResponse, error) {
	p := req.GetParameters()
	server, _ := lookupFold(p, params.KeyServer)
	share, _ := lookupFold(p, params.KeyShare)
	name, _ := lookupFold(p, params.KeyExport)
	if server == "" && share == "" && name == "" {
		return &csi.GetCapacityResponse{}, nil
	}
	e, pl, err := params.ParsePlacement(p)
	if err != nil {
		return nil, invalid("%v", err)
	}
	members, err := s.placer.members(params.Create{Export: e, Placement: pl})
	if err != nil {
		return nil, toStatus(err)
	}
	var flags []string
	for _, c := range req.GetVolumeCapabilities() {
		flags = append(flags, c.GetMount().GetMountFlags()...)
	}
	opts, err := mountopts.Parse(flags...)
	if err != nil {
		return nil, invalid("%v", err)
	}
	if !pl.Chooses() {
		return s.capacityOf(ctx, members[0].at, opts)
	}
	found := s.placer.readMembers(ctx, members, "", pl, opts)
	policy := placement.Policy{FillPercent: pl.FillPercent}
	resp := &csi.GetCapacityResponse{}
	for _, m := range found {
		room := policy.Room(m)
		resp.AvailableCapacity += room
		resp.MaximumVolumeSize = wrapperspb.Int64(max(resp.MaximumVolumeSize.GetValue(), room))
	}
	return resp, nil
}

// capacityOf is the available space of export e's file system.
func (s *Controller) capacityOf(ctx context.Context, e export.Export, opts mountopts.Options) (*csi.GetCapacityResponse, error) {
	var available int64
	err := s.bounded(ctx, "capacity of "+e.String(), func() error {
		sh, err := s.shares.Mount(ctx, e, opts)
		if err != nil {
			return err
		}
		u, err := s.shares.Usage(ctx, sh)
		available = u.AvailableBytes
		return err
	})
	if err != nil {
		return nil, toStatus(err)
	}
	return &csi.GetCapacityResponse{AvailableCapacity: available}, nil
}

// checkCapabilities accepts filesystem ("mount") capabilities of any access
// mode and returns the mount options they carry; block is InvalidArgument.
func checkCapabilities(caps []*csi.VolumeCapability) (mountopts.Options, error) {
	if len(caps) == 0 {
		return nil, invalid("volume capabilities are required")
	}
	var flags []string
	for _, c := range caps {
		if c.GetBlock() != nil {
			return nil, invalid("block volumes are not supported: nfsdir volumes are NFS directories (use volumeMode: Filesystem)")
		}
		m := c.GetMount()
		if m == nil {
			return nil, invalid("volume capability must be a filesystem (mount) capability")
		}
		switch m.GetFsType() {
		case "", "nfs", "nfs4":
		default:
			return nil, invalid("fsType %q is not supported: nfsdir volumes are NFS", m.GetFsType())
		}
		if c.GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_UNKNOWN {
			return nil, invalid("volume capability has no access mode")
		}
		flags = append(flags, m.GetMountFlags()...)
	}
	opts, err := mountopts.Parse(flags...)
	if err != nil {
		return nil, invalid("StorageClass mountOptions: %v", err)
	}
	return opts, nil
}

// capacityOf returns the capacity to record: the required bytes, or the
// limit when only a limit is given.
func capacityOf(r *csi.CapacityRange) (int64, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, invalid("capacity range must not be negative")
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.OutOfRange, "required bytes %d exceed limit bytes %d", req, lim)
	}
	if req == 0 {
		return lim, nil
	}
	return req, nil
}

// lookupFold finds key in m ignoring case.
func lookupFold(m map[string]string, key string) (string, bool) {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v, true
		}
	}
	return "", false
}

func withEntry(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}
