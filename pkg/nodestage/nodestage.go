// Package nodestage keeps a node's NFS mounts in NodeStage mode: one mount
// per export and option set below the node's state directory, from which
// each staged volume's directory is bind-mounted on its staging path (and
// from there on each pod's target). A share mount's users are counted from
// the mount table, never from memory: the mounts of its superblock below its
// export path at kubelet's staging paths and targets. A restarted node
// plugin therefore knows them, and a share mount no one uses any more is
// unmounted.
package nodestage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/nfsdir/nfsdir/pkg/export"
	"github.com/nfsdir/nfsdir/pkg/fault"
	"github.com/nfsdir/nfsdir/pkg/keylock"
	"github.com/nfsdir/nfsdir/pkg/mountopts"
	"github.com/nfsdir/nfsdir/pkg/mounttable"
	"github.com/nfsdir/nfsdir/pkg/nfsmount"
	"github.com/nfsdir/nfsdir/pkg/targetpath"
)

// probeTimeout bounds the health check of a kept share mount.
const probeTimeout = 10 * time.Second

// Stager owns the share mounts below Dir. It is safe for concurrent use.
type Stager struct {
	dir          string
	mounter      nfsmount.Mounter
	mountTimeout time.Duration
	users        targetpath.Rule // where a share mount's users are
	own          string          // below it, no mount is a user (ends in "/")
	locks        keylock.Set     // by share key
}

// New returns a Stager keeping share mounts below dir; users says where the
// mounts that use them may be (kubelet's staging paths and targets), and
// mounts below own (the driver's state directory, which holds dir) are
// the driver's own, never users, wherever users allows.
func New(dir string, m nfsmount.Mounter, mountTimeout time.Duration, users targetpath.Rule, own string) (*Stager, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fault.Wrap(fault.Internal, err, "stage directory")
	}
	return &Stager{dir: filepath.Clean(dir), mounter: m, mountTimeout: mountTimeout, users: users, own: filepath.Clean(own) + "/"}, nil
}

// Key names the share mount of an export and option set.
func Key(e export.Export, opts mountopts.Options) string {
	sum := sha256.Sum256([]byte(e.String() + "\x00" + opts.Canonical()))
	return hex.EncodeToString(sum[:])[:16]
}

// Stage bind-mounts subDir of export e, mounted with opts, on staging,
// mounting the share first when this node has no healthy mount of it with
// those options. It answers only once the mount table shows the bind of
// exactly that directory, on the share's superblock: a bind that arrived
// elsewhere (a symlink on the way) is taken away and refused. The caller
// has checked staging and holds its lock; a staging path already mounted
// is the caller's to handle.
func (s *Stager) Stage(ctx context.Context, e export.Export, subDir string, opts mountopts.Options, staging string) error {
	if subDir != "" && !filepath.IsLocal(subDir) {
		return fault.New(fault.InvalidArgument, "staging %s: directory %q is not below the share", e, subDir)
	}
	key := Key(e, opts)
	if !s.locks.Acquire(ctx, key) {
		return fault.Wrap(fault.Aborted, ctx.Err(), "waiting for the node's mount of %s", e)
	}
	defer s.locks.Release(key)
	share, err := s.share(ctx, e, opts, key)
	if err != nil {
		return err
	}
	from := filepath.Join(s.dir, key, subDir)
	bctx, cancel := context.WithTimeout(ctx, s.mountTimeout)
	err = s.mounter.Bind(bctx, from, staging, nil)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fault.Wrap(fault.DeadlineExceeded, err, "binding %s (is the NFS server %q reachable?)", e.Source(subDir), e.Server)
		}
		return fault.Wrap(fault.KindOf(err), err, "binding %s", e.Source(subDir))
	}
	got, err := s.mounter.Mounted(staging)
	if err != nil {
		return err
	}
	want := path.Join(mounttable.SourcePath(share.Source), subDir)
	if got != nil && got.Device == share.Device && mounttable.SourcePath(got.Source) == want {
		return nil
	}
	found := "nothing"
	if got != nil {
		found = got.Source + " (device " + got.Device + ")"
	}
	if uerr := s.mounter.Unmount(context.WithoutCancel(ctx), staging); uerr != nil {
		klog.ErrorS(uerr, "unmounting a bind that is not the volume's", "staging", staging)
	}
	return fault.New(fault.FailedPrecondition, "staging %s: the bind on %s shows %s, not %s on device %s: a symlink or another filesystem on the way; nothing is staged",
		e.Source(subDir), staging, found, want, share.Device)
}

// share returns the mount table entry of the share mount of key, mounting
// it, or mounting it again when it went stale. The caller holds key.
func (s *Stager) share(ctx context.Context, e export.Export, opts mountopts.Options, key string) (*nfsmount.Entry, error) {
	mp := filepath.Join(s.dir, key)
	if err := os.Mkdir(mp, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fault.Wrap(fault.Internal, err, "stage directory")
	}
	cur, err := s.mounter.Mounted(mp)
	if err != nil {
		return nil, err
	}
	if cur != nil {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		_, perr := s.mounter.Probe(pctx, mp)
		cancel()
		switch {
		case perr == nil && mounttable.SameSource(cur.Source, e.String()):
			return cur, nil
		case perr != nil && !nfsmount.IsStale(perr):
			return nil, fault.Wrap(fault.Unavailable, perr, "the node's mount of %s does not answer", e)
		}
		klog.Warningf("node mount of %s at %s: %s %v; mounting again", e, mp, cur.Source, perr)
		if err := s.mounter.Unmount(ctx, mp); err != nil {
			return nil, fault.Wrap(fault.Unavailable, err, "the node's mount of %s", e)
		}
	}
	mctx, cancel := context.WithTimeout(ctx, s.mountTimeout)
	err = s.mounter.Mount(mctx, e.String(), mp, opts)
	cancel()
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fault.Wrap(fault.DeadlineExceeded, err, "mounting %s (is the NFS server %q reachable?)", e, e.Server)
		}
		return nil, err
	}
	cur, err = s.mounter.Mounted(mp)
	if err == nil && cur == nil {
		err = fault.New(fault.Unavailable, "mounting %s on %s: nothing is mounted there", e, mp)
	}
	return cur, err
}

// Sweep unmounts every share mount that no mount at kubelet's staging
// paths or targets uses, and removes the empty directories of those not
// mounted. A share being staged is left alone. table is the mount table
// as the caller just read it (nil: Sweep reads it); a share mount that
// looks unused there is read again before it goes.
func (s *Stager) Sweep(ctx context.Context, table map[string]nfsmount.Entry) {
	if table == nil {
		var err error
		if table, err = s.mounter.Table(); err != nil {
			klog.Warningf("stage sweep: %v", err)
			return
		}
	}
	ents, _ := os.ReadDir(s.dir)
	for _, en := range ents {
		key := en.Name()
		mp := filepath.Join(s.dir, key)
		if _, mounted := table[mp]; !isKey(key) || (mounted && s.used(table, mp)) {
			continue
		}
		if !s.locks.TryAcquire(key) {
			continue
		}
		s.drop(ctx, key, mp)
		s.locks.Release(key)
	}
}

// drop unmounts the share mount at mp if, read again under its lock, it
// still has no user, and removes its directory when empty.
func (s *Stager) drop(ctx context.Context, key, mp string) {
	table, err := s.mounter.Table()
	if err != nil {
		return
	}
	if _, mounted := table[mp]; mounted {
		if s.used(table, mp) {
			return
		}
		if err := s.mounter.Unmount(ctx, mp); err != nil {
			klog.Warningf("unmounting the unused node mount %s: %v", mp, err)
			return
		}
		klog.V(2).InfoS("unmounted a node mount no staged volume uses", "share", table[mp].Source, "path", mp)
	}
	// rmdir only: a directory that is not empty or still a mount stays.
	if err := os.Remove(mp); err != nil && !errors.Is(err, os.ErrNotExist) {
		klog.V(4).InfoS("stage directory not removed", "path", mp, "err", err)
	}
}

// used reports whether a mount at a staging path or target shares the
// superblock of the share mount at mp and lies below its export path.
func (s *Stager) used(table map[string]nfsmount.Entry, mp string) bool {
	share := table[mp]
	below := strings.TrimSuffix(mounttable.SourcePath(share.Source), "/") + "/"
	for point, e := range table {
		if point == mp || e.Device != share.Device || strings.HasPrefix(point, s.own) {
			continue
		}
		if sp := mounttable.SourcePath(e.Source); sp+"/" != below && !strings.HasPrefix(sp, below) {
			continue
		}
		if _, err := s.users.CheckStaging(point); err == nil {
			return true
		}
		if _, err := s.users.Check(point); err == nil {
			return true
		}
	}
	return false
}

// Shares returns the share mounts below the stage directory, by path.
func (s *Stager) Shares() (map[string]nfsmount.Entry, error) {
	table, err := s.mounter.Table()
	if err != nil {
		return nil, err
	}
	out := map[string]nfsmount.Entry{}
	for point, e := range table {
		if filepath.Dir(point) == s.dir && isKey(filepath.Base(point)) {
			out[point] = e
		}
	}
	return out, nil
}

// isKey reports whether name has the form of a Key.
func isKey(name string) bool {
	if len(name) != 16 {
		return false
	}
	for _, c := range name {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
