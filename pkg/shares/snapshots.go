package shares

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// CreateSnapshot records the snapshot name of the volume src on its share
// (or finds the one a former call recorded) and returns its state, its
// copy started in the background and waited for up to wait.
func (s *Set) CreateSnapshot(ctx context.Context, src volumeid.ID, name string, wait time.Duration) (SnapshotState, error) {
	var st SnapshotState
	err := s.OnVolume(ctx, src, func(a *provision.Area, share *Share) error {
		snap, err := a.CreateSnapshot(name, src)
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
func (s *Set) Snapshot(ctx context.Context, id volumeid.ID) (*SnapshotState, error) {
	var out *SnapshotState
	err := s.OnVolume(ctx, id, func(a *provision.Area, share *Share) error {
		snap, err := a.LookupSnapshot(id)
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
func (s *Set) DeleteSnapshot(ctx context.Context, id volumeid.ID) error {
	err := s.OnVolume(ctx, id, func(a *provision.Area, share *Share) error {
		err := a.DeleteSnapshot(id)
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
func (s *Set) ListSnapshots(ctx context.Context, token string, max int, source *volumeid.ID) ([]SnapshotState, string, error) {
	afterExport, afterKey, err := decodeToken(token)
	if err != nil {
		return nil, "", err
	}
	var out []SnapshotState
	for _, k := range s.exports() {
		if k.e.String() < afterExport || source != nil && k.e.String() != source.Export.String() {
			continue
		}
		after := ""
		if k.e.String() == afterExport {
			after = afterKey
		}
		room, page := max-len(out), []SnapshotState(nil)
		err := s.onShareBounded(ctx, k.e, k.opts, func(a *provision.Area, share *Share) error {
			keys, err := a.SnapshotKeys()
			if err != nil {
				return err
			}
			i, _ := slices.BinarySearch(keys, after)
			for _, key := range keys[i:] {
				if key == after {
					continue
				}
				if max > 0 && len(page) == room {
					return errPageFull
				}
				snap, err := a.SnapshotRecord(key)
				if errors.Is(err, provision.ErrBadRecord) {
					klog.Warningf("listing snapshots: share %s: %v; left out", k.e, err)
					continue
				}
				if err != nil {
					return err
				}
				if snap == nil || source != nil && !snap.SourceIs(*source) {
					continue
				}
				id, err := s.snapshotID(k, share, snap)
				if err != nil {
					return err
				}
				st, err := s.snapshotState(a, share, id, snap, 0)
				if err != nil {
					return err
				}
				page = append(page, st)
			}
			return nil
		})
		switch {
		case errors.Is(err, errPageFull):
			out = append(out, page...)
			last := out[len(out)-1].ID
			return out, encodeToken(last.Export.String(), last.Key), nil
		case err == nil:
			out = append(out, page...)
		case errors.Is(err, provision.ErrNoArea):
		case ctx.Err() != nil:
			return nil, "", fault.Wrap(fault.DeadlineExceeded, ctx.Err(), "listing snapshots")
		default:
			klog.Warningf("listing snapshots: share %s left out: %v", k.e, err)
		}
	}
	return out, "", nil
}

// snapshotID builds the ID of snap, a snapshot on the share k, as
// CreateSnapshot handed it out: with its source volume's share options.
func (s *Set) snapshotID(k knownExport, share *Share, snap *provision.Snapshot) (volumeid.ID, error) {
	opts := share.Options
	if snap.Options != "" {
		if o, err := mountopts.Parse(snap.Options); err == nil {
			opts = o
		}
	}
	vol, err := s.idFor(k.e, snap.SourceKey, snap.SourceToken, opts)
	if err != nil {
		return volumeid.ID{}, err
	}
	return volumeid.SnapshotOf(vol, snap.Key(), snap.Token), nil
}
