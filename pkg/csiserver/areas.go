package csiserver

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/sharemount"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// This file holds how the controller reaches a share: the cache of open
// provisioning Areas per share mount, the retry after a stale handle, and
// the deadline every operation on a share is bounded by.

// openArea is the provisioning Area of one mount of a share, and the Area
// its purges run on: the share's second mount, with the client's name
// cache on (sharemount.GetForPurge), or the same Area when that mount
// could not be had.
type openArea struct {
	share *sharemount.Share
	area  *provision.Area
	purge *provision.Area
}

func (oa *openArea) close() {
	oa.area.Close()
	if oa.purge != oa.area {
		oa.purge.Close()
	}
}

// area returns the mounted share and its provisioning Area, opening the Area
// (and resuming the share's purges) when the share was (re)mounted. Without
// create, a share with no metadata area gives provision.ErrNoArea and is
// left untouched.
func (s *Controller) area(ctx context.Context, e export.Export, opts mountopts.Options, create bool) (*provision.Area, *sharemount.Share, error) {
	share, err := s.shares.Get(ctx, e, opts)
	if err != nil {
		return nil, nil, err
	}
	s.areasMu.Lock()
	if oa := s.areas[share.Path]; oa != nil && oa.share == share {
		s.areasMu.Unlock()
		return oa.area, share, nil
	}
	s.areasMu.Unlock()
	// Open without holding the lock: this touches the share, which may hang.
	a, err := provision.OpenArea(share.Root(), create)
	if err != nil {
		return nil, share, err
	}
	opened := &openArea{share: share, area: a, purge: s.purgeArea(ctx, e, opts, a)}
	// The lock covers the map only: every share needs it, so nothing that
	// touches a share (closing an Area, listing its trash) runs under it.
	s.areasMu.Lock()
	var stale *openArea
	if oa := s.areas[share.Path]; oa != nil {
		if oa.share == share { // another call opened it meanwhile
			s.areasMu.Unlock()
			opened.close()
			return oa.area, share, nil
		}
		stale = oa // from an earlier mount of the share
	}
	if s.areas == nil {
		s.areas = map[string]*openArea{}
	}
	s.areas[share.Path] = opened
	s.areasMu.Unlock()
	if stale != nil {
		stale.close()
	}
	s.purger.Kick(s.bg, share.Path, opened.purge) // resume purges left by a restart
	return a, share, nil
}

// purgeArea opens the share's Area on the share's purge mount; without
// one, purges run through main (correct, only slower).
func (s *Controller) purgeArea(ctx context.Context, e export.Export, opts mountopts.Options, main *provision.Area) *provision.Area {
	ps, err := s.shares.GetForPurge(ctx, e, opts)
	if err == nil {
		var pa *provision.Area
		if pa, err = provision.OpenArea(ps.Root(), false); err == nil {
			return pa
		}
	}
	klog.Warningf("share %s: no mount of its own for purges (%v); purging through the main mount", e, err)
	return main
}

// kick starts the purges of share's trash that are not running yet.
func (s *Controller) kick(share *sharemount.Share) {
	s.areasMu.Lock()
	oa := s.areas[share.Path]
	s.areasMu.Unlock()
	if oa != nil && oa.share == share {
		s.purger.Kick(s.bg, share.Path, oa.purge)
	}
}

// bounded runs fn holding the lock of key until fn returns, but returns
// when ctx ends even if fn does not: filesystem calls on a dead hard-mounted
// server block in the kernel and cannot be cancelled. fn then finishes in
// the background with the lock still held, so retries get Aborted instead
// of piling up blocked goroutines, and the first retry after the server
// returns gets the result (every operation is idempotent).
func (s *Controller) bounded(ctx context.Context, key string, fn func() error) error {
	if !s.locks.TryAcquire(key) {
		return busy("volume " + key)
	}
	done := make(chan error, 1)
	go func() {
		err := fn()
		s.locks.Release(key) // before answering: an immediate retry must find it free
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fault.Wrap(fault.DeadlineExceeded, ctx.Err(), "the NFS server did not answer in time; the operation goes on in the background and a retry returns its result")
	}
}

// onArea runs fn on the Area of the share (e, opts). When fn fails with a
// stale handle (the server restarted or re-exported), it drops the cached
// Area, has the share's health checked, which mounts it again if the mount
// itself is stale, and runs fn once more.
func (s *Controller) onArea(ctx context.Context, e export.Export, opts mountopts.Options, create bool, fn func(*provision.Area, *sharemount.Share) error) error {
	for attempt := 0; ; attempt++ {
		a, share, err := s.area(ctx, e, opts, create)
		if err == nil {
			err = fn(a, share)
		}
		if err == nil || !provision.IsStale(err) || attempt > 0 {
			return err
		}
		klog.Warningf("share %s: %v; checking the mount and retrying", e, err)
		if share != nil {
			s.forget(share)
			s.shares.Invalidate(share)
		}
	}
}

// forget drops the cached Area of share.
func (s *Controller) forget(share *sharemount.Share) {
	s.areasMu.Lock()
	oa := s.areas[share.Path]
	if oa != nil && oa.share == share {
		delete(s.areas, share.Path)
	} else {
		oa = nil
	}
	s.areasMu.Unlock()
	if oa != nil {
		oa.close()
	}
}

// resume mounts every export this state directory has mounted before and
// resumes its purges; run at start-up.
func (s *Controller) resume() {
	exps, opts := s.shares.Known()
	for i, e := range exps {
		ctx, cancel := context.WithTimeout(s.bg, 2*time.Minute)
		if _, _, err := s.area(ctx, e, opts[i], false); err != nil && !errors.Is(err, provision.ErrNoArea) {
			klog.Warningf("resuming work on %s: %v", e, err)
		}
		cancel()
	}
}

func (s *Controller) closeAreas() {
	s.areasMu.Lock()
	areas := s.areas
	s.areas = nil
	s.areasMu.Unlock()
	for _, oa := range areas {
		oa.close()
	}
}

// onVolumeArea runs fn on the Area of the share a volume ID names, mounted
// with the options the ID carries or refers to. Options referred to by
// digest that this controller's state directory does not hold (a new pod,
// another replica) are replaced by the ID's own subset of options needed to
// reach the share, or by the defaults for an ID without one: the volume's
// record and directory are on the share whatever tuning the mount had.
func (s *Controller) onVolumeArea(ctx context.Context, id volumeid.ID, fn func(*provision.Area, *sharemount.Share) error) error {
	opts, err := mountopts.Parse(id.Options)
	if err != nil {
		return fault.Wrap(fault.InvalidArgument, err, "volume ID %q carries mount options nfsdir would never have written", id.String())
	}
	if id.OptionsRef != "" {
		full, err := s.shares.LookupOptions(id.OptionsRef)
		if err == nil {
			opts = full
		} else {
			klog.V(2).Infof("volume %s: %v; reaching the share with %q", id, err, opts.String())
		}
	}
	return s.onArea(ctx, id.Export, opts, false, fn)
}
