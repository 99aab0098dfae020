package shares

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// CreateSnapshot records the snapshot name of the volume src on its share
// (or finds the one a former call recorded) and returns its state, its
// copy started in the background and waited for up to wait.
func (r Snapshots) CreateSnapshot(ctx context.Context, src volumeid.ID, name string, wait time.Duration) (SnapshotState, error) {
	s := r.set
	var st SnapshotState
	err := s.OnVolume(ctx, src, func(a *provision.Area, share *Share) error {
		snap, err := a.Snapshots().Create(name, src)
		if err != nil {
			return err
		}
		st, err = s.snapshotState(a, share, volumeid.SnapshotOf(src, snap.Key(), snap.Token), snap, wait)
		return err
	})
	if errors.Is(err, provision.ErrNoArea) {
		return st, fault.New(fault.NotFound, "source volume %q does not exist", src.String())
	}
	return st, err
}

// Snapshot returns the state of the snapshot of id, nil when it does not
// exist; an unfinished copy with no attempt running is started.
func (r Snapshots) Snapshot(ctx context.Context, id volumeid.ID) (*SnapshotState, error) {
	s := r.set
	var out *SnapshotState
	err := s.OnVolume(ctx, id, func(a *provision.Area, share *Share) error {
		snap, err := a.Snapshots().Lookup(id)
		if err != nil || snap == nil {
			return err
		}
		st, err := s.snapshotState(a, share, id, snap, 0)
		out = &st
		return err
	})
	if errors.Is(err, provision.ErrNoArea) {
		return nil, nil
	}
	return out, err
}

// DeleteSnapshot deletes the snapshot of id and kicks the purge of its
// copy; a snapshot that does not exist is not an error.
func (r Snapshots) DeleteSnapshot(ctx context.Context, id volumeid.ID) error {
	s := r.set
	err := s.OnVolume(ctx, id, func(a *provision.Area, share *Share) error {
		err := a.Snapshots().Delete(id)
		if err == nil {
			s.copies.forget(snapshotJob(id))
		}
		s.Purge(share)
		return err
	})
	if errors.Is(err, provision.ErrNoArea) {
		return nil
	}
	return err
}

// ListSnapshots returns at most max snapshots (0: no bound) of every share
// this Set's state directory has mounted, of the volume source only when
// source is set, in a stable order (export, then record key), starting
// after token, and the next page's token ("" at the end), as List does
// for volumes. Snapshots not yet complete are listed as not ready, and
// their copies started when no attempt runs.
func (r Snapshots) ListSnapshots(ctx context.Context, token string, max int, source *volumeid.ID) ([]SnapshotState, string, error) {
	s := r.set
	var only *export.Export
	if source != nil {
		only = &source.Export
	}
	// One at a time: listing a snapshot may start its copy.
	return pageThrough(ctx, s, "snapshots", token, max, only, 1, func(a *provision.Area) ([]string, error) { return a.Snapshots().Keys() },
		func(a *provision.Area, share *Share, k knownExport, key string) (*SnapshotState, error) {
			snap, err := a.Snapshots().Record(key)
			if errors.Is(err, provision.ErrBadRecord) {
				klog.Warningf("listing snapshots: share %s: %v; left out", k.e, err)
				return nil, nil
			}
			if err != nil || snap == nil || source != nil && !snap.SourceIs(*source) || s.names.Elsewhere(snap.ExportName, k.e) {
				return nil, err
			}
			id, err := r.snapshotID(k, share, snap)
			if err != nil {
				return nil, err
			}
			st, err := s.snapshotState(a, share, id, snap, 0)
			return &st, err
		},
		func(st SnapshotState) volumeid.ID { return st.ID })
}

// snapshotID builds the ID of snap, a snapshot on the share k, as
// CreateSnapshot handed it out: with its source volume's share options.
func (r Snapshots) snapshotID(k knownExport, share *Share, snap *provision.Snapshot) (volumeid.ID, error) {
	s := r.set
	opts := share.Options
	if snap.Options != "" {
		if o, err := mountopts.Parse(snap.Options); err == nil {
			opts = o
		}
	}
	vol, err := s.idFor(snap.ExportName, k.e, snap.SourceKey, snap.SourceToken, opts)
	if err != nil {
		return volumeid.ID{}, err
	}
	return volumeid.SnapshotOf(vol, snap.Key(), snap.Token), nil
}

// Snapshots are the Set's snapshots: made by a copy on the share (or by
// the share's agent), listed, looked at and deleted.
type Snapshots struct{ set *Set }

// Snapshots returns the Set's snapshots.
func (s *Set) Snapshots() Snapshots { return Snapshots{s} }
