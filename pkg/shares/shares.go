// Package shares owns the controller's life with each NFS share: the
// mounts it keeps of it (pkg/sharemount), the provisioning Area open on
// each mount and the Area its purges run on (pkg/provision), the retry
// after a stale file handle, the resumption of purges after a restart, the
// registry of mount options too long for a volume ID, and the building of
// volume IDs. The gRPC layer (pkg/csiserver) and `nfsdir adopt` both reach
// shares through it, so each of these has one owner.
package shares

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/provision"
	"github.com/nfsdir/nfsdir/pkg/sharemount"
	"github.com/nfsdir/nfsdir/pkg/usage"
	"github.com/nfsdir/nfsdir/pkg/volumeid"
)

// Share is one kept mount of a share.
type Share = sharemount.Share

// Set is every share a controller (or one `nfsdir adopt` run) works on.
type Set struct {
	mounts *sharemount.Manager
	purger *provision.Purger // nil: no purges (adopt)
	acct   *usage.Accountant // nil: no usage counts (adopt, nodes)
	copies *copies
	bg     context.Context // ends when purges and counts stop
	stop   context.CancelFunc
	wg     sync.WaitGroup // counts running

	// mu covers the map only: every share needs it, so nothing that
	// touches a share (opening or closing an Area, listing its trash)
	// runs under it.
	mu    sync.Mutex
	areas map[string]*openArea // by share mount point
	// abandoned counts the volumes discarded as abandoned.
	abandoned atomic.Int64

	names        export.Names    // Config.Names
	abandonAfter time.Duration   // Config.AbandonAfter
	sweeping     map[string]bool // shares being swept, by mount point
	listing      map[string]bool // by export: a listing runs on it (List)
	ops          opsReader       // the kernel's NFS counts (NFSOps)
}

// Config says where a Set keeps its mounts and how it works.
type Config struct {
	// StateDir holds the share mounts, the exports mounted so far (to
	// resume their purges) and the options registry.
	StateDir string
	// MountTimeout bounds every mount of a share.
	MountTimeout time.Duration
	// PurgeWorkers is how many deleted volumes are purged at once; 0
	// purges nothing (a Set that only creates or adopts).
	PurgeWorkers int
	// Accounting configures the usage counts; its zero value counts
	// nothing.
	Accounting usage.Accounting
	// Copying configures the copies of snapshots, restores and clones.
	Copying Copying
	// Names says where each named export is now: a listing gives the
	// volumes of a named export under that export only, not under an
	// address it had before and still answers at.
	Names export.Names
	// AbandonAfter is how long a volume made from a snapshot or volume
	// and never handed out may go without CreateVolume asking for it
	// before it is discarded (provision.SweepAbandoned); 0: never.
	AbandonAfter time.Duration
}

// New returns the Set for cfg, mounting through m.
func New(cfg Config, m nfsmount.Mounter) (*Set, error) {
	mounts, err := sharemount.New(cfg.StateDir, m, cfg.MountTimeout)
	if err != nil {
		return nil, err
	}
	s := &Set{mounts: mounts, copies: newCopies(cfg.Copying), names: cfg.Names}
	s.bg, s.stop = context.WithCancel(context.Background())
	if cfg.PurgeWorkers > 0 {
		s.purger = provision.NewPurger(cfg.PurgeWorkers)
	}
	if cfg.AbandonAfter > 0 {
		s.abandonAfter = cfg.AbandonAfter
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.upkeep().sweepAbandoned(s.bg)
		}()
	}
	if cfg.Accounting.Every > 0 {
		s.acct = usage.NewAccountant(cfg.Accounting)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.acct.Run(s.bg, s.shelves)
		}()
	}
	return s, nil
}

// openArea is the provisioning Area of one mount of a share, and the Area
// its purges run on: the share's second mount, with the client's name
// cache on (sharemount.GetForPurge), or the same Area when that mount
// could not be had.
type openArea struct {
	share *Share
	area  *provision.Area
	purge *provision.Area
}

func (oa *openArea) close() {
	oa.area.Close()
	if oa.purge != oa.area {
		oa.purge.Close()
	}
}

// On runs fn on the Area of the share (e, opts), mounting the share and
// opening its Area (and resuming its purges) when needed. Without create,
// a share with no metadata area gives provision.ErrNoArea and is left
// untouched. When fn fails with a stale handle (the server restarted or
// re-exported), it drops the cached Area, has the share's health checked,
// which mounts it again if the mount itself is stale, and runs fn once
// more.
func (s *Set) On(ctx context.Context, e export.Export, opts mountopts.Options, create bool, fn func(*provision.Area, *Share) error) error {
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
			s.upkeep().forget(share)
			s.mounts.Invalidate(share)
		}
	}
}

// OnVolume runs fn, as On, on the Area of the share a volume ID names,
// mounted with the options the ID carries or refers to. Options referred
// to by digest that the state directory does not hold (a new pod, another
// replica) are replaced by the ID's own subset of options needed to reach
// the share, or by the defaults for an ID without one: the volume's record
// and directory are on the share whatever tuning the mount had.
func (s *Set) OnVolume(ctx context.Context, id volumeid.ID, fn func(*provision.Area, *Share) error) error {
	opts, err := mountopts.Parse(id.Options)
	if err != nil {
		return fault.Wrap(fault.InvalidArgument, err, "volume ID %q carries mount options nfsdir would never have written", id.String())
	}
	if id.OptionsRef != "" {
		full, err := s.mounts.LookupOptions(id.OptionsRef)
		if err == nil {
			opts = full
		} else {
			klog.V(2).Infof("volume %s: %v; reaching the share with %q", id, err, opts.String())
		}
	}
	return s.On(ctx, id.Export, opts, false, fn)
}

// VolumeID returns the ID of the volume recorded as rec on the share e
// mounted with opts, and keeps options too long for the ID in the
// registry.
func (s *Set) VolumeID(e export.Export, rec *provision.Record, opts mountopts.Options) (volumeid.ID, error) {
	return s.idFor(rec.ExportName, e, rec.Key(), rec.Token, opts)
}

// idFor returns the ID of the record key.token on the share e (of the
// export named name; "": none) mounted with opts, keeping options too
// long for the ID in the registry.
func (s *Set) idFor(name string, e export.Export, key, token string, opts mountopts.Options) (volumeid.ID, error) {
	id, err := volumeid.ForNamedShare(name, e, key, token, opts)
	if err != nil {
		return id, fault.New(fault.InvalidArgument, "%v", err)
	}
	if id.OptionsRef != "" {
		if err := s.mounts.RememberOptions(id.OptionsRef, opts); err != nil {
			return id, err
		}
	}
	return id, nil
}

// Mount returns the kept mount of the share (e, opts) without opening its
// metadata area: for shares nfsdir only reads (csi-driver-nfs volumes,
// capacity).
func (s *Set) Mount(ctx context.Context, e export.Export, opts mountopts.Options) (*Share, error) {
	return s.mounts.Get(ctx, e, opts)
}

// Usage returns the space and inodes of the file system a share is on.
func (s *Set) Usage(ctx context.Context, share *Share) (nfsmount.Usage, error) {
	return s.mounts.Usage(ctx, share)
}

// Purge starts the purges of share's trash that are not running yet.
func (s *Set) Purge(share *Share) {
	s.mu.Lock()
	oa := s.areas[share.Path]
	s.mu.Unlock()
	if oa != nil && oa.share == share {
		s.upkeep().kick(share, oa.purge)
	}
}

func (s upkeep) kick(share *Share, a *provision.Area) {
	if s.purger != nil {
		s.purger.Kick(s.bg, share.Path, a)
	}
}

// Resume mounts every export the state directory has mounted before and
// resumes its purges; run at start-up.
func (s *Set) Resume() {
	exps, opts := s.mounts.Known()
	for i, e := range exps {
		ctx, cancel := context.WithTimeout(s.bg, 2*time.Minute)
		if _, _, err := s.area(ctx, e, opts[i], false); err != nil && !errors.Is(err, provision.ErrNoArea) {
			klog.Warningf("resuming work on %s: %v", e, err)
		}
		cancel()
	}
}

// area returns the mounted share and its provisioning Area, opening the
// Area (and resuming the share's purges) when the share was (re)mounted.
func (s *Set) area(ctx context.Context, e export.Export, opts mountopts.Options, create bool) (*provision.Area, *Share, error) {
	share, err := s.mounts.Get(ctx, e, opts)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if oa := s.areas[share.Path]; oa != nil && oa.share == share {
		s.mu.Unlock()
		return oa.area, share, nil
	}
	s.mu.Unlock()
	// Open without holding the lock: this touches the share, which may hang.
	a, err := provision.OpenArea(share.Root(), create)
	if err != nil {
		return nil, share, err
	}
	a.FreshLookups() // the share mount is lookupcache=none (sharemount.Get)
	if s.copies.cfg.Remote != nil {
		a.Agents().Use(s.copies.cfg.Remote, e.Share)
	}
	opened := &openArea{share: share, area: a, purge: s.upkeep().purgeArea(ctx, e, opts, a)}
	s.mu.Lock()
	var stale *openArea
	if oa := s.areas[share.Path]; oa != nil {
		if oa.share == share { // another call opened it meanwhile
			s.mu.Unlock()
			opened.close()
			return oa.area, share, nil
		}
		stale = oa // from an earlier mount of the share
	}
	if s.areas == nil {
		s.areas = map[string]*openArea{}
	}
	s.areas[share.Path] = opened
	s.mu.Unlock()
	if stale != nil {
		stale.close()
	}
	s.upkeep().kick(share, opened.purge) // resume purges left by a restart
	if s.purger != nil {
		s.upkeep().resumeSnapshots(a, share) // and snapshots a restart cut
	}
	return a, share, nil
}

// resumeSnapshots starts the copies of the share's unfinished snapshots,
// in the background: the share may not answer. (Volumes being filled
// resume at the CreateVolume retry that asks for them.)
func (s upkeep) resumeSnapshots(a *provision.Area, share *Share) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		keys, err := a.Snapshots().Keys()
		if err != nil {
			klog.Warningf("share %s: resuming snapshots: %v", share.Path, err)
			return
		}
		for _, key := range keys {
			snap, err := a.Snapshots().Record(key)
			if err != nil || snap == nil {
				continue
			}
			id := volumeid.ID{Key: key, Token: snap.Token, Snapshot: true}
			if _, err := s.snapshotState(a, share, id, snap, 0); err != nil {
				klog.Warningf("share %s: resuming snapshot %q: %v", share.Path, snap.Name, err)
			}
		}
	}()
}

// purgeArea opens the share's Area on the share's purge mount; without
// one, purges run through main (correct, only slower). A Set that purges
// nothing needs no such mount.
func (s upkeep) purgeArea(ctx context.Context, e export.Export, opts mountopts.Options, main *provision.Area) *provision.Area {
	if s.purger == nil {
		return main
	}
	ps, err := s.mounts.GetForPurge(ctx, e, opts)
	if err == nil {
		var pa *provision.Area
		if pa, err = provision.OpenArea(ps.Root(), false); err == nil {
			return pa
		}
	}
	klog.Warningf("share %s: no mount of its own for purges (%v); purging through the main mount", e, err)
	return main
}

// forget drops the cached Area of share.
func (s upkeep) forget(share *Share) {
	s.mu.Lock()
	oa := s.areas[share.Path]
	if oa != nil && oa.share == share {
		delete(s.areas, share.Path)
	} else {
		oa = nil
	}
	s.mu.Unlock()
	if oa != nil {
		oa.close()
	}
}

// StopPurges stops the background purges and waits for them; a purge
// blocked in the kernel on a dead server holds it until the server
// answers, so callers bound the wait.
func (s *Set) StopPurges() {
	s.stop()
	if s.purger != nil {
		s.purger.Wait()
	}
	s.wg.Wait()
}

// Close closes every Area and releases the share mounts, giving up on
// those still busy when ctx ends. Call it after StopPurges.
func (s *Set) Close(ctx context.Context) {
	s.stop()
	s.mu.Lock()
	areas := s.areas
	s.areas = nil
	s.mu.Unlock()
	for _, oa := range areas {
		oa.close()
	}
	s.mounts.Close(ctx)
}

// Usable reports whether the state directory can be written.
func (s *Set) Usable() error { return s.mounts.Usable() }

// Stats are the figures the metrics export.
type Stats struct {
	Mounts        int   // share mounts kept (two per share: calls and purges)
	PurgesPending int   // deleted volumes being purged or waiting to be
	PurgesStuck   int   // deleted volumes whose last purge attempt left entries
	PurgedEntries int64 // files and directories removed by purges
}

// Accounting returns the usage accountant's figures; zero without one.
func (s *Set) Accounting() usage.Stats {
	if s.acct == nil {
		return usage.Stats{}
	}
	return s.acct.Stats()
}

// shelves returns every share with an open Area, for the accountant.
func (s *Set) shelves() []usage.Shelf {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]usage.Shelf, 0, len(s.areas))
	for _, oa := range s.areas {
		out = append(out, usage.Shelf{Share: oa.share.Export.Share, Name: oa.share.Export.String(), Book: oa.area.Book()})
	}
	return out
}

// Stats returns the Set's current figures.
func (s *Set) Stats() Stats {
	st := Stats{Mounts: s.mounts.Count()}
	if s.purger != nil {
		st.PurgesPending, st.PurgesStuck, st.PurgedEntries = s.purger.Pending(), s.purger.Stuck(), s.purger.Removed()
	}
	return st
}

// View runs fn on a read-only View of the records and usage figures of
// the share a volume ID names, through a read-only kept mount of it: for
// node plugins, which read what the controller records and write nothing.
// A stale mount is checked, mounted again, and fn run once more.
func (s *Set) View(ctx context.Context, id volumeid.ID, fn func(*provision.View) error) error {
	opts, err := mountopts.Parse(id.Options)
	if err != nil {
		return fault.Wrap(fault.InvalidArgument, err, "volume ID %q carries mount options nfsdir would never have written", id.String())
	}
	for attempt := 0; ; attempt++ {
		share, err := s.mounts.GetReadOnly(ctx, id.Export, opts)
		if err != nil {
			return err
		}
		v, err := provision.OpenView(share.Root())
		if err == nil {
			err = fn(v)
			v.Close()
		}
		if err == nil || !provision.IsStale(err) || attempt > 0 {
			return err
		}
		s.mounts.Invalidate(share)
	}
}

// ErrNoClaims says a share has no claims directory (.nfsdir/nodes): no
// controller of this version has opened it, or nfsdir never created a
// volume there.
var ErrNoClaims = errors.New("the share has no claims directory (.nfsdir/nodes)")

// Claims runs fn on the claims directory of the share a volume ID names
// (pkg/publock), through a read-write kept mount of that directory alone;
// whether it exists is read first on the share's read-only mount. A stale
// mount is checked, mounted again, and fn run once more.
func (s *Set) Claims(ctx context.Context, id volumeid.ID, fn func(*os.Root) error) error {
	opts, err := mountopts.Parse(id.Options)
	if err != nil {
		return fault.Wrap(fault.InvalidArgument, err, "volume ID %q carries mount options nfsdir would never have written", id.String())
	}
	for attempt := 0; ; attempt++ {
		view, err := s.mounts.GetReadOnly(ctx, id.Export, opts)
		if err != nil {
			return err
		}
		st, err := view.Root().Lstat(sharemount.ClaimsDir)
		if errors.Is(err, fs.ErrNotExist) {
			return ErrNoClaims
		}
		if err == nil && !st.IsDir() {
			// The controller refuses such a share too (OpenArea).
			return fault.New(fault.FailedPrecondition, "share %s: %s is not a directory (%s); nfsdir will not write claims through it", id.Export, sharemount.ClaimsDir, st.Mode().Type())
		}
		var share *Share
		if err == nil {
			if share, err = s.mounts.GetClaims(ctx, id.Export, opts); err != nil {
				return err
			}
			err = fn(share.Root())
		}
		if err == nil || !provision.IsStale(err) || attempt > 0 {
			return err
		}
		s.mounts.Invalidate(view)
		if share != nil {
			s.mounts.Invalidate(share)
		}
	}
}

// AbandonedVolumes counts the volumes discarded as abandoned.
func (s *Set) AbandonedVolumes() int64 { return s.abandoned.Load() }

// AbandonAfter is Config.AbandonAfter.
func (s *Set) AbandonAfter() time.Duration { return s.abandonAfter }

// sweepAbandoned sweeps every open share for abandoned volumes
// (provision.SweepAbandoned) every eighth of AbandonAfter (at least every
// second, at most every 10 minutes), one sweep per share at a time: a share
// whose server hangs holds up only its own.
func (s upkeep) sweepAbandoned(ctx context.Context) {
	tick := time.NewTicker(min(max(s.abandonAfter/8, time.Second), 10*time.Minute))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		if s.sweeping == nil {
			s.sweeping = map[string]bool{}
		}
		var open []*openArea
		for p, oa := range s.areas {
			if !s.sweeping[p] {
				s.sweeping[p] = true
				open = append(open, oa)
			}
		}
		s.mu.Unlock()
		for _, oa := range open {
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				gone, err := oa.area.Pending().SweepAbandoned(ctx, s.abandonAfter)
				if err != nil {
					klog.Warningf("share %s: sweeping abandoned volumes: %v", oa.share.Export, err)
				}
				for _, id := range gone {
					s.ForgetFill(id)
				}
				if len(gone) > 0 {
					s.abandoned.Add(int64(len(gone)))
					s.Purge(oa.share)
				}
				s.mu.Lock()
				delete(s.sweeping, oa.share.Path)
				s.mu.Unlock()
			}()
		}
	}
}

// upkeep is the room of Set that keeps shares in order in the background:
// purges kicked and run on an area of their own, snapshots left unfinished
// resumed, shares forgotten, and abandoned volumes swept.
type upkeep struct{ *Set }

func (s *Set) upkeep() upkeep { return upkeep{s} }
